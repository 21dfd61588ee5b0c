package runtime

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/service"
	"github.com/handoff-go/handoff/snapshot"
)

// retainInterval is how often the dead-letter retention turns
// (Class.DeadLetterRetention, Class.MaxDeadLetters) and the oldest dead
// letter's age is sampled.
const retainInterval = 30 * time.Second

// Why the retention drops a dead letter: the reason label of
// handoff_dead_letters_dropped_total and the value of [HeaderDropped].
const (
	dropAge   = "age"
	dropCount = "count"
)

// retention enforces the classes' dead-letter bounds and samples, per
// class, when the oldest dead letter this instance owns was saved. Only
// the owner of a dead letter's partition drops it (owns): another
// instance's copy of a partition that moved is not its to change.
type retention struct {
	service.Base // run, from Start to Stop
	// every is how often it turns (retainInterval; shorter in tests).
	every time.Duration
	// alive is the runtime's liveness, stopping closed when a stop is
	// requested (the retention's loop ends then, see Start).
	alive    *liveness
	stopping <-chan struct{}
	state    *stateFile
	fail     *failures
	classes  []*class
	// clog says which dead letters are this instance's (stateLog.mine).
	clog *stateLog
	// publish publishes a dropped dead letter of a class with a
	// DeadLetterTopic and returns once the broker acknowledged it.
	publish func(ctx context.Context, c *class, rec snapshot.Record, reason string) error
	// oldest is, per class (by index), the UnixNano save time of the
	// oldest dead letter kept at the last turn; 0 when none.
	oldest []atomic.Int64
	// dropped counts the drops per class and reason (0 age, 1 count).
	dropped [][2]atomic.Uint64
	// turns counts the turns done over every class.
	turns atomic.Uint64
}

func newRetention(r *Runtime) *retention {
	return &retention{every: retainInterval, alive: &r.alive, stopping: r.life.stopCh,
		state: r.state, fail: r.fail, classes: r.classes.order,
		clog: r.clog,
		publish: func(ctx context.Context, c *class, rec snapshot.Record, reason string) error {
			return r.dlq.publishNow(ctx, c, rec, reason)
		},
		oldest:  make([]atomic.Int64, len(r.classes.order)),
		dropped: make([][2]atomic.Uint64, len(r.classes.order))}
}

// oldestAge is the age at now of class c's oldest dead letter at the
// last turn; 0 when it had none.
func (t *retention) oldestAge(c *class, now time.Time) time.Duration {
	ns := t.oldest[c.index].Load()
	if ns == 0 {
		return 0
	}
	return max(now.Sub(time.Unix(0, ns)), 0)
}

// Start runs the retention (run) until Stop or the request of a stop:
// a drop releases parked messages, which the stop no longer takes.
func (t *retention) Start(ctx context.Context) error {
	return t.StartLoop(ctx, func(ctx context.Context) {
		alive := t.alive.start("dead-letter retention", t.every)
		defer alive.end()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-t.stopping:
				cancel()
			case <-ctx.Done():
			}
		}()
		t.run(ctx, t.every, alive.beat)
	})
}

// run turns at once and then every interval until ctx ends (the start
// of the stop ends it: a drop releases parked messages, which the stop
// no longer takes), calling beat each turn.
func (t *retention) run(ctx context.Context, interval time.Duration, beat func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		beat()
		for _, c := range t.classes {
			if ctx.Err() != nil {
				return
			}
			t.turn(ctx, c, time.Now(), beat)
		}
		t.turns.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// turn drops class c's dead letters beyond its bounds at now and samples
// its oldest, calling beat after each batch of drops. A batch whose
// publish failed ends the class's turn: the broker is unlikely to take
// the next one, and each waits for the publish timeout.
func (t *retention) turn(ctx context.Context, c *class, now time.Time, beat func()) {
	if _, err := t.state.get(); err != nil {
		return // not open (yet, or any more): nothing to read
	}
	all, err := t.state.deadTimes(c.cfg.Name, t.clog.mine)
	if err != nil {
		t.fail.cfg.log.Error("dead letters not read for their retention and age; tried again at the next turn", "class", c.cfg.Name, "err", err)
		return
	}
	// Oldest first; a tie in the save order of this file.
	slices.SortFunc(all, func(a, b deadTime) int { return cmp.Or(a.Saved.Compare(b.Saved), cmp.Compare(a.Key, b.Key)) })
	var due []deadTime
	var reasons []string
	for i, d := range all {
		switch {
		case c.cfg.DeadLetterRetention > 0 && now.Sub(d.Saved) > c.cfg.DeadLetterRetention:
			due, reasons = append(due, d), append(reasons, dropAge)
		case c.cfg.MaxDeadLetters > 0 && i < len(all)-c.cfg.MaxDeadLetters:
			due, reasons = append(due, d), append(reasons, dropCount)
		}
	}
	gone := map[uint64]bool{}
	for len(due) > 0 && ctx.Err() == nil {
		n := min(len(due), publishBatch)
		dropped, failed := t.drop(ctx, c, due[:n], reasons[:n])
		for k := range dropped {
			gone[k] = true
		}
		due, reasons = due[n:], reasons[n:]
		beat()
		if failed {
			break
		}
	}
	oldest := int64(0)
	for _, d := range all {
		if !gone[d.Key] {
			oldest = d.Saved.UnixNano()
			break
		}
	}
	t.oldest[c.index].Store(oldest)
}

// retainClaim is a dead letter the retention claimed to drop, with its
// reason.
type retainClaim struct {
	key    uint64
	id     snapshot.DeadID
	rec    snapshot.Record
	reason string
}

// claim claims the dead letters due for the retention (one being
// requeued or discarded is left alone) and reads each again: one gone,
// moved to another owner or failed again since the turn's read is left
// for the next turn. The caller finishes the claims returned.
func (t *retention) claim(due []deadTime, reasons []string) []retainClaim {
	var held []retainClaim
	for i, d := range due {
		if !t.fail.requeues.start(d.Key) {
			continue // being requeued or discarded: the next turn sees what is left
		}
		id, rec, ok, err := t.state.getDead(d.Key)
		if err != nil || !ok || !t.clog.mine(&rec) || !rec.SavedAt.Equal(d.Saved) {
			// Gone, moved to another owner or failed again since the
			// read: the next turn decides again.
			t.fail.requeues.finish(d.Key)
			continue
		}
		held = append(held, retainClaim{key: d.Key, id: id, rec: rec, reason: reasons[i]})
	}
	return held
}

// publishAll publishes the claimed dead letters of class c to its
// DeadLetterTopic, together (one write of the publisher), each awaited.
// It returns those published; the others' claims it finishes, and
// reports failed.
func (t *retention) publishAll(ctx context.Context, c *class, held []retainClaim) (kept []retainClaim, failed bool) {
	results := make([]chan error, len(held))
	for i := range held {
		results[i] = make(chan error, 1)
		go func(h retainClaim, res chan error) { res <- t.publish(ctx, c, h.rec, h.reason) }(held[i], results[i])
	}
	kept = held[:0:0]
	var firstErr error
	for i, h := range held {
		if err := <-results[i]; err != nil {
			firstErr = cmp.Or(firstErr, err)
			t.fail.requeues.finish(h.key)
			continue
		}
		kept = append(kept, h)
	}
	if firstErr != nil {
		t.fail.cfg.log.Error("dead letters beyond their class's retention not dropped: their publish failed; tried again at the next turn",
			"class", c.cfg.Name, "count", len(held)-len(kept), "topic", c.cfg.DeadLetterTopic, "err", firstErr)
	}
	return kept, firstErr != nil
}

// drop drops the dead letters due of class c, each for its reason: it
// claims each (one being requeued or discarded is left alone), reads it
// again, publishes those of a class with a DeadLetterTopic (one whose
// publish fails stays), deletes the rest in one write, releases their
// keys in an ordered class, and returns the keys it deleted and whether
// a publish or the delete failed.
func (t *retention) drop(ctx context.Context, c *class, due []deadTime, reasons []string) (gone map[uint64]bool, failed bool) {
	held := t.claim(due, reasons)
	defer func() {
		for _, h := range held {
			t.fail.requeues.finish(h.key)
		}
	}()
	if c.cfg.DeadLetterTopic != "" {
		held, failed = t.publishAll(ctx, c, held)
	}
	// The publishes took time: what moved to another owner meanwhile is
	// that owner's now, and a stop begun leaves the rest for the next run.
	if ctx.Err() != nil {
		return nil, failed
	}
	mine := held[:0:0]
	for _, h := range held {
		if t.clog.mine(&h.rec) {
			mine = append(mine, h)
		} else {
			t.fail.requeues.finish(h.key)
		}
	}
	held = mine
	if len(held) == 0 {
		return nil, failed
	}
	keys := make([]uint64, len(held))
	for i, h := range held {
		keys[i] = h.key
	}
	if err := t.state.deleteDead(keys...); err != nil {
		t.fail.cfg.log.Error("dead letters beyond their class's retention not dropped: the state write failed; tried again at the next turn",
			"class", c.cfg.Name, "count", len(keys), "err", fmt.Errorf("runtime: drop dead letters: %w", err))
		return nil, true
	}
	gone = make(map[uint64]bool, len(held))
	for _, h := range held {
		gone[h.key] = true
		r := 0
		if h.reason == dropCount {
			r = 1
		}
		t.dropped[c.index][r].Add(1)
		t.fail.cfg.log.Warn("dead letter dropped by its class's retention", "class", c.cfg.Name, "id", h.rec.Message.ID,
			"key", h.id.String(), "reason", h.reason, "saved", h.rec.SavedAt, "published", c.cfg.DeadLetterTopic != "")
		t.fail.removed(c, &h.rec.Message)
	}
	return gone, failed
}
