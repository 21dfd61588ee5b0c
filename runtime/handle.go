package runtime

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// The pool calls three functions per message, all made here for each
// class: handler runs it, retry decides after a failed attempt whether
// to retry in place, result settles it once it leaves the pool.

// handlingConfig is what the message's way through a pool is built from.
type handlingConfig struct {
	state   *stateFile
	deletes *snapshot.DoneQueue
	tally   *tally
	fail    *failures
	sched   *scheduler
	// clog ends the restore's mark of a re-pushed pending record
	// (stateLog.unmarkPushed); nil (a test's) marks none.
	clog *stateLog
	// stopping is set when the stop begins (lifecycle.stopping).
	stopping *atomic.Bool
	log      *slog.Logger
}

// handling makes every pool's Handler, RetryFunc and ResultFunc: the
// handler wrapper and the result path of every class.
type handling struct {
	cfg handlingConfig
	// metrics observes the handler calls; set by New once the metrics
	// exist (nil records nothing).
	metrics *metrics
	// testHookDiverted, when set by a test, runs in the handler wrapper
	// after it saved a message elsewhere, before it returns.
	testHookDiverted func(ctx context.Context)
}

// handler wraps a class's handler: it defers messages whose header asks
// for later delivery, parks messages of a blocked key, and bounds the call
// of the middleware chain (attempt.go) by the class's Timeout.
func (h *handling) handler(c *class) func(context.Context, *item) error {
	return func(ctx context.Context, it *item) error {
		if run, err := h.before(ctx, c, it); !run {
			return err
		}
		if c.batch != nil {
			return joinBatch(ctx, c, it) // batch.go
		}
		if c.cfg.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeoutCause(ctx, c.cfg.Timeout, ErrHandlerTimeout)
			defer cancel()
		}
		if c.hooked {
			a := it.begin(ctx)
			defer a.end()
			ctx = a
		}
		// The handler is handed the item's envelope, which it may
		// keep: the runtime writes no envelope a handler had (see
		// item.own).
		m := it.env()
		switch {
		case sample(it):
			return h.timedCall(ctx, c, m)
		case c.svc.learning():
			return h.learnCall(ctx, c, m)
		case h.metrics == nil:
			return c.handle(ctx, m)
		default:
			return h.countedCall(ctx, c, m)
		}
	}
}

// before is what the handler wrapper does for a message before its
// handler (or its batch) may have it: the hold learns it starts, a
// message whose header asks for later delivery is deferred, one of a
// blocked key parked. It reports whether the handler is to run, and if
// not, the message's result.
func (h *handling) before(ctx context.Context, c *class, it *item) (run bool, err error) {
	c.hold.Starting(it)
	if it.deferrable() {
		if at, ok, err := deliverAt(it.env()); err != nil {
			return false, err // permanent: a dead letter
		} else if ok && at.After(time.Now()) && h.cfg.sched.deferDelivery(c, it, at) {
			return false, h.diverted(ctx, it)
		}
	}
	if c.cfg.Ordered && !c.keys.gate(it) {
		return false, h.diverted(ctx, it)
	}
	return true, nil
}

// timedCall calls the class's handler, feeds its time to the drain
// estimate and, with metrics, to the histogram under its outcome (a call
// in sampleEvery, see sample) and counts a failed call; a panic is
// observed on its way up to the pool, which recovers it.
func (h *handling) timedCall(ctx context.Context, c *class, m *handoff.Message) (err error) {
	began := time.Now()
	returned := false
	defer func() {
		d := time.Since(began)
		c.svc.observe(d)
		h.metrics.observeHandler(c.index, callEndOf(ctx, !returned, err), d)
	}()
	err = c.handle(ctx, m)
	returned = true
	return err
}

// learnCall is a call that sample leaves out while the drain estimate
// still learns the handler time (serviceTime.learning): it feeds the
// estimate, not the histogram, and is counted as countedCall counts.
func (h *handling) learnCall(ctx context.Context, c *class, m *handoff.Message) error {
	began := time.Now()
	defer func() { c.svc.observe(time.Since(began)) }()
	if h.metrics == nil {
		return c.handle(ctx, m)
	}
	return h.countedCall(ctx, c, m)
}

// countedCall calls the class's handler without timing it, and counts
// it in handoff_handler_errors_total when it fails or panics (which the
// pool recovers): the calls sample leaves out, with metrics.
func (h *handling) countedCall(ctx context.Context, c *class, m *handoff.Message) (err error) {
	returned := false
	defer func() {
		if !returned || err != nil {
			h.metrics.handlerFailed(c.index)
		}
	}()
	err = c.handle(ctx, m)
	returned = true
	return err
}

// diverted marks an item the handler wrapper did not run because it is
// saved elsewhere (parked, or delayed by its header) and settled: the
// pool reports it as interrupted when the hard stop's cancel came first,
// and the stop must then neither save nor count it.
func (h *handling) diverted(ctx context.Context, it *item) error {
	it.diverted.Store(true)
	if h.testHookDiverted != nil {
		h.testHookDiverted(ctx)
	}
	return errDiverted
}

// divertedResult reports whether the attempt of it ended with the
// handler wrapper saving it elsewhere: err is errDiverted or, in a batch
// whose handler called runtime.Goexit (the pool then fails every item of
// the call with its own error), it was marked so before the call.
func divertedResult(it *item, err error) bool {
	return errors.Is(err, errDiverted) || it.isDiverted()
}

// retry is every pool's RetryFunc: it counts the failed attempt and
// decides between a retry in place (returned to the pool) and what result
// does next.
func (h *handling) retry(c *class) func(*item, error) (time.Duration, bool) {
	return func(it *item, err error) (time.Duration, bool) {
		if divertedResult(it, err) {
			return 0, false
		}
		if h.stopRefused(err) {
			// Not the class's dependency, and not the message: neither
			// the outage detection nor its attempts count it. It waits
			// for the hard stop, which saves it (the drain does not wait
			// for it: it would fail again), and runs again after the
			// restart.
			it.tellOutcome(OutcomeInterrupted, err, 0)
			h.cfg.log.Debug("handler failed on the stop's refusal; saved for the restart", "class", c.cfg.Name,
				"id", it.env().ID, "attempt", it.env().Attempt, "err", err)
			return untilStopped, true
		}
		if c.hold.Failed(it, err) {
			it.tellOutcome(OutcomeHeld, err, 0)
			return 0, true // not counted; it waits in the held pool
		}
		now := time.Now()
		it.writeEnv().Attempt++ // the handlers' envelope stays as they saw it
		x := it.ext()
		if x.firstFailed.IsZero() {
			x.firstFailed = now
		}
		it.verdict, x.wait = c.cfg.Retry.decide(err, it.env().Attempt, x.redeliveries, x.firstFailed, now, nil)
		if it.verdict == retryInPlace {
			it.tellOutcome(OutcomeRetried, err, x.wait)
			h.cfg.tally.inc(c, evRetried)
			h.cfg.log.Debug("handler failed; retrying in place", "class", c.cfg.Name, "id", it.env().ID,
				"attempt", it.env().Attempt, "wait", x.wait, "err", err)
			return x.wait, true
		}
		return 0, false
	}
}

// untilStopped is the retry wait of a message whose attempt the stop
// refused: longer than any stop, so the drain does not wait for it and
// the hard stop takes it out of its pool.
const untilStopped = time.Duration(math.MaxInt64 / 4)

// stopRefused reports whether err, a failed attempt's error, is the
// stop's refusal of what the handler asked for ([ErrNotRunning] from
// Submit or Requeue once the stop has begun), whatever wraps it
// (handoff.Permanent too): a failure the stop caused, not one of the
// message or of a dependency.
func (h *handling) stopRefused(err error) bool {
	return h.cfg.stopping != nil && h.cfg.stopping.Load() && errors.Is(err, ErrNotRunning)
}

// result is every pool's ResultFunc: done messages are settled, failed
// ones redelivered later (delayed.go) or made dead letters
// (deadletter.go); a submitted one whose write fails is kept (unsaved.go).
func (h *handling) result(c *class) func(*item, error) {
	return func(it *item, err error) {
		switch {
		case err == nil:
			c.hold.Succeeded(it)
			h.done(c, it)
			it.tellOutcome(OutcomeSucceeded, nil, 0)
		case divertedResult(it, err):
			c.diverted.Add(1) // the pool counts it failed; see Stats
			c.hold.Inconclusive(it)
		default:
			if !h.cfg.fail.save(c, it, err) {
				switch it.src {
				case fromSubmit:
					h.cfg.fail.keep(c, it, err) // it has no other copy
				case fromShare:
					// Not saved: the broker delivers it again.
					it.x.share.unsaved(h.cfg.log)
				case fromKafka:
					// Unsettled, Kafka delivers it again, and nothing
					// here will settle it: a revoke must not wait for
					// it.
					it.abandon()
				}
			}
			if it.verdict == redeliverLater {
				it.tellOutcome(OutcomeRedelivered, err, it.extOrZero().wait)
			} else {
				it.tellOutcome(OutcomeDeadLettered, err, 0)
			}
		}
		h.outOfPool(it)
		if err == nil {
			it.recycle() // last: nothing uses it after
		}
	}
}

// done settles a handled message, forgets its record and, in an ordered
// class, releases the messages parked behind it.
func (h *handling) done(c *class, it *item) {
	h.forget(c, it)
	if c.cfg.Ordered {
		c.keys.unblock(it.env().Key, it.env().ID)
	}
}

// outOfPool ends an item's ties to the work that put it in a pool: a key's
// release waiting for it, a requeue in progress.
func (h *handling) outOfPool(it *item) {
	if x := it.x; x != nil && x.release != nil {
		x.release()
		x.release = nil
	}
	switch it.src {
	case fromDead:
		h.cfg.fail.requeues.finish(it.extOrZero().key)
	case fromPending:
		// A done one's hold ends once its record is deleted (run.go).
		x := it.extOrZero()
		if !x.deleting {
			h.cfg.clog.unmarkPushed(x.key)
		}
		x.saved.leave() // unless it is done or moved
	}
}

// forget removes what the message's origin keeps once it is done: a
// Kafka offset is settled, a pending or delayed record queued for the
// batched delete, a parked record or a requeued dead letter deleted at
// once (a parked record whose delete fails is queued for the batched
// delete, and its key's release skips it).
func (h *handling) forget(c *class, it *item) {
	if it.src == fromKafka {
		it.tracker().settle(it.slot)
		return
	}
	h.forgetStored(c, it)
}

// forgetStored is forget for a message that did not come from Kafka's
// fetch: apart, so that the fetched message's path keeps a small stack
// frame (a new worker goroutine's stack starts at 2 KiB; forget's frame
// with these cases was 448 bytes, and growing the stack was about 3% of
// the hand-off's CPU profile).
func (h *handling) forgetStored(c *class, it *item) {
	switch it.src {
	case fromShare:
		it.x.share.ack(shareAccept)
	case fromPending:
		it.ext().deleting = true
		h.cfg.deletes.Pending(it.extOrZero().key)
		it.x.saved.finish() // its fetched copy's offset settles
	case fromDelayed:
		h.cfg.deletes.Delayed(it.extOrZero().delayedKey)
	case fromParked:
		const op = "delete done parked message"
		state := h.cfg.state
		err := state.deleteDoneParked(op, it)
		if err != nil {
			h.cfg.deletes.Parked(it.extOrZero().parkedKey)
		}
		state.logErr(op, it, err)
	case fromDead:
		h.cfg.state.logErr("delete requeued dead letter", it, h.cfg.state.deleteDead(it.extOrZero().key))
		h.cfg.tally.inc(c, evRequeuedDone)
	}
}
