package runtime

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/handoff-go/handoff"
)

// A batch class runs on the same retry and result functions as any
// other: every message is a pool item of its own, goes through what the
// handler wrapper does before a handler (handling.before: deferral,
// parking), is one of the messages of a BatchHandler call, and gets its
// own error back, which the pool then decides as the result of that
// message's attempt: retried in place, redelivered, dead-lettered,
// interrupted by the stop, or done. So a batch class has no retry,
// dead-letter, parking or stop logic of its own.
//
// Without middleware the batches are made in the pool: it has Workers
// workers and a BatchHandler (pool.Config), each worker taking up to
// MaxBatch ready items under one lock, waiting up to MaxWait only when
// fewer are ready, and calling handling.batchHandler once for them. An
// ordered pool starts a key's next item only once the previous one's
// result is in, so a batch of an ordered class holds at most one message
// per key, and per-key order holds exactly as for single messages.
//
// With middleware each message passes through its chain on its own, once
// per attempt, with an attempt context of its own, and the chain's
// innermost handler puts the message it is given into the class's
// batcher. Its pool then has (Workers+1)×MaxBatch workers: Workers
// batches running, and one filling. A pool worker that brings a message
// into the batcher waits there for its batch's result; the first one of
// a batch (its leader) waits for the batch to fill or MaxWait to pass,
// then for one of the Workers call slots, and runs the call.

// batchHandler is the pool's BatchHandler of a batch class without
// middleware. Each of its items goes through handling.before; the others
// are the messages of one call of the class's BatchHandler (batcher.call:
// Timeout, panic, metrics), in their order, each its item's envelope,
// which the handler may keep (see item.own), and each gets its own result in
// errs (batcher.spread). ctx is the pool's handler context: once the hard
// stop has cancelled it, the messages are interrupted without a call.
func (h *handling) batchHandler(c *class) func(context.Context, []*item, []error) {
	return func(ctx context.Context, its []*item, errs []error) {
		ptrs := make([]*handoff.Message, 0, len(its))
		var idx []int // index in its of each of ptrs, once one did not run
		for i, it := range its {
			if run, err := h.before(ctx, c, it); !run {
				errs[i] = err
				if idx == nil {
					idx = make([]int, i, len(its))
					for j := range idx {
						idx[j] = j
					}
				}
				continue
			}
			ptrs = append(ptrs, it.env())
			if idx != nil {
				idx = append(idx, i)
			}
		}
		if len(ptrs) == 0 {
			return
		}
		bt := &batch{msgs: ptrs, errs: errs} // each ran: the results are errs
		if idx != nil {
			bt.errs = make([]error, len(ptrs))
		}
		if ctx.Err() != nil {
			bt.fail(context.Cause(ctx)) // interrupted: the pool saves them
		} else {
			c.batch.spread(bt, c.batch.call(ctx, bt))
		}
		for j, i := range idx {
			errs[i] = bt.errs[j]
		}
	}
}

// batchPoolWorkers is the pool size of a batch class with middleware.
func batchPoolWorkers(c Class) int { return (c.Workers + 1) * c.MaxBatch }

// batchDefaults fills and checks MaxBatch and MaxWait.
func (c *Class) batchDefaults(bad func(string, ...any)) {
	if c.BatchHandler == nil {
		if c.MaxBatch != 0 || c.MaxWait != 0 {
			bad("class %q: MaxBatch and MaxWait need a BatchHandler", c.Name)
		}
		return
	}
	if c.MaxBatch < 0 {
		bad("class %q: MaxBatch must be > 0, got %d", c.Name, c.MaxBatch)
	} else if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxWait < 0 {
		bad("class %q: MaxWait must not be negative, got %s", c.Name, c.MaxWait)
	} else if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
}

// joinBatch is the handler wrapper's last step for a message of a batch
// class with middleware (one without has its batches made in the pool,
// see batchHandler): it joins the class's batcher through the class's
// middleware chain. Each message then passes through the chain on its
// own, once per attempt, with an attempt context of its own (OnOutcome,
// SetHeaders), and the chain's innermost handler, batchJoin, puts the
// message it is given into the batch. ctx is the pool's handler context.
//
// As for any class, the chain and the BatchHandler are handed the
// item's envelope, which they may keep (see item.own).
func joinBatch(ctx context.Context, c *class, it *item) error {
	j := &join{b: c.batch, it: it, ctx: ctx}
	a := it.begin(context.WithValue(ctx, joinKey{}, j))
	defer a.end()
	return c.handle(a, it.env())
}

// join is what batchJoin needs of a message's way into its batch.
type join struct {
	b   *batcher
	it  *item
	ctx context.Context // the pool's handler context
}

type joinKey struct{}

// errJoinContext is the error of a batch class's message whose
// middleware called the next handler with a context not derived from
// the one it was given.
var errJoinContext = handoff.Permanent(errors.New("runtime: a batch class's middleware called the next handler with a context not derived from its own"))

// batchJoin is the innermost handler of a batch class's middleware
// chain (see chain): it puts m into the batch and returns its result.
func batchJoin(ctx context.Context, m *handoff.Message) error {
	j, ok := ctx.Value(joinKey{}).(*join)
	if !ok {
		return errJoinContext
	}
	return j.b.add(j.ctx, j.it, m)
}

// errBatchGoexit is the error of every message of a batch whose handler
// called runtime.Goexit.
var errBatchGoexit = errors.New("runtime: batch handler called runtime.Goexit")

// batcher gathers one batch class's messages into batches.
type batcher struct {
	c     *class
	log   *slog.Logger
	calls chan struct{} // one token per batch call running: Workers
	// metrics observes the calls; set by New once the metrics exist (nil
	// records nothing).
	metrics *metrics

	mu    sync.Mutex
	open  *batch // the batch filling, nil when none
	added uint64 // messages put into batches so far (tests wait on it)
}

// batch is one BatchHandler call's messages and their results.
type batch struct {
	items []*item
	msgs  []*handoff.Message // what the handler gets: each item's, as its middleware passed it on
	errs  []error            // each message's result, set before done closes
	full  chan struct{}      // closed when items reached MaxBatch
	done  chan struct{}      // closed when errs are set
}

func newBatcher(c *class, log *slog.Logger) *batcher {
	return &batcher{c: c, log: log, calls: make(chan struct{}, c.cfg.Workers)}
}

// add puts it, as m, in the batch filling (starting one if none is) and
// returns its own result once the batch's call has returned. ctx is the
// pool's handler context, the same for every message of the class: the
// hard stop cancels it.
func (b *batcher) add(ctx context.Context, it *item, m *handoff.Message) error {
	b.mu.Lock()
	bt := b.open
	lead := bt == nil
	if lead {
		bt = &batch{items: make([]*item, 0, b.c.cfg.MaxBatch), msgs: make([]*handoff.Message, 0, b.c.cfg.MaxBatch),
			full: make(chan struct{}), done: make(chan struct{})}
		b.open = bt
	}
	i := len(bt.items)
	b.added++
	bt.items = append(bt.items, it)
	bt.msgs = append(bt.msgs, m)
	if len(bt.items) == b.c.cfg.MaxBatch {
		b.open = nil // full: the next message starts a new batch
		close(bt.full)
	}
	b.mu.Unlock()
	if lead {
		b.lead(ctx, bt)
	} else {
		// Not ctx: once the call has begun its result decides, and a
		// straggling call is the pool's to give up on.
		<-bt.done
	}
	return bt.errs[i]
}

// lead waits for bt to fill or MaxWait to pass and for a call slot, then
// closes bt to newcomers and runs the call. A hard stop before the call
// begins interrupts every message of bt without calling the handler.
// Whatever happens, even a runtime.Goexit in the handler, bt's results
// are set and done is closed.
func (b *batcher) lead(ctx context.Context, bt *batch) {
	called, slot := false, false
	defer func() {
		if !called { // Goexit in the handler
			if slot {
				<-b.calls
			}
			bt.fail(errBatchGoexit)
			close(bt.done)
		}
	}()
	t := time.NewTimer(b.c.cfg.MaxWait)
	select {
	case <-bt.full:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	if ctx.Err() == nil {
		select {
		case b.calls <- struct{}{}:
			slot = true
		case <-ctx.Done():
		}
	}
	b.mu.Lock()
	if b.open == bt {
		b.open = nil
	}
	b.mu.Unlock()
	// bt.items no longer grows.
	bt.errs = make([]error, len(bt.items))
	if !slot || ctx.Err() != nil {
		if slot {
			<-b.calls
		}
		bt.fail(context.Cause(ctx)) // interrupted: the pool saves them
		called = true
		close(bt.done)
		return
	}
	err := b.call(ctx, bt)
	<-b.calls
	slot = false
	b.spread(bt, err)
	called = true
	close(bt.done)
}

// call runs the class's BatchHandler for bt under the class's Timeout,
// turning a panic into a *handoff.PanicError, and records its time: the
// handler histogram observes the call, the drain estimate the call's time
// per message.
func (b *batcher) call(ctx context.Context, bt *batch) (err error) {
	c := b.c
	if c.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.cfg.Timeout, ErrHandlerTimeout)
		defer cancel()
	}
	msgs := bt.msgs
	began := time.Now()
	defer func() {
		v := recover()
		if v != nil {
			stack := debug.Stack()
			err = &handoff.PanicError{Value: v, Stack: stack}
			b.log.Error("batch handler panicked", "class", c.cfg.Name, "batch", len(msgs), "err", err, "stack", string(stack))
		}
		d := time.Since(began)
		c.svc.observe(d / time.Duration(len(msgs)))
		b.metrics.observeHandler(c.index, callEndOf(ctx, v != nil, err), d)
		b.metrics.observeBatch(c.index, len(msgs))
	}()
	return c.cfg.BatchHandler(ctx, msgs)
}

// spread turns the call's error into each message's result: nil, every
// message done; a *handoff.BatchError, its entries failed and the rest
// done (a nil one names no failure); any other error, every message
// failed with it.
func (b *batcher) spread(bt *batch, err error) {
	var be *handoff.BatchError
	switch {
	case err == nil:
	case errors.As(err, &be):
		if be == nil {
			break
		}
		for i, e := range be.Failed {
			if i < 0 || i >= len(bt.errs) {
				if e != nil {
					b.log.Error("batch handler failed a message outside its batch; ignored", "class", b.c.cfg.Name,
						"index", i, "batch", len(bt.errs), "err", e)
				}
				continue
			}
			bt.errs[i] = e
		}
	default:
		bt.fail(err)
	}
}

// fail gives every message of bt the result err.
func (bt *batch) fail(err error) {
	if bt.errs == nil {
		bt.errs = make([]error, len(bt.items))
	}
	for i := range bt.errs {
		bt.errs[i] = err
	}
}
