package runtime

import (
	"context"
	"sync"
	"time"
)

// Backoff bounds between the retries of the unsaved messages' writes.
const (
	unsavedRetryInitial = 50 * time.Millisecond
	unsavedRetryMax     = 5 * time.Second
)

// unsaved keeps the submitted messages whose dead-letter or redelivery
// write failed. A Kafka message in that case stays unsettled (Kafka
// delivers it again), counted abandoned so that a revoke of its
// partition does not wait for it, and a re-pushed, delayed, parked or requeued one
// keeps its record, but a submitted one has no other copy: it is kept
// here and its failure saved again, with backoff, until the write
// succeeds or the stop's snapshot, which saves what is still kept to
// pending. (They are counted as "held" in the metrics and the Report.)
type unsaved struct {
	mu    sync.Mutex
	msgs  []unsavedMsg
	added chan struct{} // capacity 1: a message was kept
}

// unsavedMsg is one kept message and the handler's error it failed with.
type unsavedMsg struct {
	c     *class
	it    *item
	err   error
	tries int // writes failed so far
}

// keep keeps a submitted message whose save after its failure failed. In
// an ordered class it blocks its key meanwhile, as its dead letter or
// redelivery will once saved: later messages of the key are parked
// behind it rather than run first.
func (f *failures) keep(c *class, it *item, err error) {
	f.cfg.tally.inc(c, evHeld)
	f.cfg.log.Error("submitted message kept in memory until the state file takes it; it is saved at the stop if it never does",
		"class", c.cfg.Name, "id", it.env().ID, "err", err)
	if c.cfg.Ordered {
		c.keys.blockHere(it)
	}
	f.unsaved.put(unsavedMsg{c: c, it: it, err: err, tries: 1})
}

func (u *unsaved) put(m unsavedMsg) {
	u.mu.Lock()
	u.msgs = append(u.msgs, m)
	u.mu.Unlock()
	select {
	case u.added <- struct{}{}:
	default:
	}
}

// take returns and forgets the kept messages.
func (u *unsaved) take() []unsavedMsg {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := u.msgs
	u.msgs = nil
	return out
}

func (u *unsaved) len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.msgs)
}

// retryUnsaved saves the kept messages again, all of them each round,
// with a growing wait between the rounds, until ctx ends (at the stop's
// snapshot, which saves what is left). A round in progress is finished
// first, so a message is always either kept or saved.
func (f *failures) retryUnsaved(ctx context.Context) {
	u := &f.unsaved
	for {
		select {
		case <-ctx.Done():
			return
		case <-u.added:
		}
		for round := 1; u.len() > 0; round++ {
			if !sleep(ctx, backoff(round, unsavedRetryInitial, unsavedRetryMax, nil)) {
				return
			}
			for _, m := range u.take() {
				if f.save(m.c, m.it, m.err) {
					f.cfg.log.Info("held message saved", "class", m.c.cfg.Name, "id", m.it.env().ID, "tries", m.tries+1)
					continue
				}
				m.tries++
				u.put(m)
			}
		}
	}
}
