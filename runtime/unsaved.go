package runtime

import (
	"context"
	"sync"
	"time"
)

// Backoff bounds between the retries of the held messages' writes.
const (
	holdRetryInitial = 50 * time.Millisecond
	holdRetryMax     = 5 * time.Second
)

// held keeps the submitted messages whose dead-letter or redelivery write
// failed. A Kafka message in that case stays unsettled (Kafka delivers it
// again) and a re-pushed, delayed, parked or requeued one keeps its
// record, but a submitted one has no other copy: it is kept here and its
// failure saved again, with backoff, until the write succeeds or the
// stop's snapshot, which saves what is still held to pending.
type held struct {
	mu    sync.Mutex
	msgs  []heldMsg
	added chan struct{} // capacity 1: a message was held
}

// heldMsg is one held message and the handler's error it failed with.
type heldMsg struct {
	c     *class
	it    *item
	err   error
	tries int // writes failed so far
}

// saveFailed saves a failed message for its delayed redelivery or as a
// dead letter, and reports whether the write succeeded.
func (r *Runtime) saveFailed(c *class, it *item, err error) bool {
	it.unsaved = false
	if it.verdict == redeliverLater {
		r.redeliver(c, it, err)
	} else {
		r.deadLetter(c, it, err)
	}
	return !it.unsaved
}

// hold keeps a submitted message whose save after its failure failed.
func (r *Runtime) hold(c *class, it *item, err error) {
	r.inc(c, outHeld)
	r.log.Error("submitted message kept in memory until the state file takes it; it is saved at the stop if it never does",
		"class", c.cfg.Name, "id", it.msg.ID, "err", err)
	r.held.put(heldMsg{c: c, it: it, err: err, tries: 1})
}

func (h *held) put(m heldMsg) {
	h.mu.Lock()
	h.msgs = append(h.msgs, m)
	h.mu.Unlock()
	select {
	case h.added <- struct{}{}:
	default:
	}
}

// take returns and forgets the held messages.
func (h *held) take() []heldMsg {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.msgs
	h.msgs = nil
	return out
}

func (h *held) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs)
}

// retryHeld saves the held messages again, all of them each round, with
// a growing wait between the rounds, until ctx ends (at the stop's
// snapshot, which saves what is left). A round in progress is finished
// first, so a message is always either held or saved.
func (r *Runtime) retryHeld(ctx context.Context) {
	h := &r.held
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.added:
		}
		for round := 1; h.len() > 0; round++ {
			if !sleep(ctx, backoff(round, holdRetryInitial, holdRetryMax, nil)) {
				return
			}
			for _, m := range h.take() {
				if r.saveFailed(m.c, m.it, m.err) {
					r.log.Info("held message saved", "class", m.c.cfg.Name, "id", m.it.msg.ID, "tries", m.tries+1)
					continue
				}
				m.tries++
				h.put(m)
			}
		}
	}
}

// keepHeld adds what is still held to what the snapshot saves.
func (s *runState) keepHeld() {
	for _, m := range s.r.held.take() {
		s.left = append(s.left, leftover{it: m.it, reason: reasonFailed, err: m.err})
	}
}
