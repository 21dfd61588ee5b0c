package pool

import (
	"context"
	"hash/maphash"
	"runtime/debug"
	"time"

	"github.com/handoff-go/handoff"
)

// SubmitBatch hands vs to the pool in order, as len(vs) calls of
// [Pool.Submit] one after the other would, in one operation: one lock
// for the items there is room for, and at most one worker loop woken
// (each loop that starts an item wakes the next while items are ready),
// where Submit takes the lock and may wake a loop per item.
//
// It blocks while the pool is full, as Submit does: the items there is
// room for are accepted at once, in order, and the rest wait their turn
// together, first come first served with other Submits, until there is
// room for each, ctx ends or [Pool.Stop] begins. It returns how many of
// vs the pool accepted, always a prefix: len(vs) and nil, or fewer and
// ctx.Err() or [ErrStopped]; the pool owns vs[:n] (their handlers will
// run, or Stop will return them) and not the rest. ctx only bounds the
// wait; a SubmitBatch that finds room for all does not look at it. In an
// Ordered pool KeyFunc is called for each item with the pool's lock held,
// and the items of one key run in their order in vs. Safe for concurrent
// use; vs is not kept.
func (p *Pool[T]) SubmitBatch(ctx context.Context, vs []T) (int, error) {
	if len(vs) == 0 {
		return 0, nil
	}
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return 0, ErrStopped
	}
	i := 0
	if p.waiters.head == nil && p.firsts.head == nil {
		for ; i < len(vs) && p.queued < p.queueSize; i++ {
			p.queueLocked(p.newEntryLocked(vs[i], p.keyOf(vs[i])))
		}
	}
	dispatch := i > 0 && p.wakeOneLocked()
	if i == len(vs) {
		p.mu.Unlock()
		if dispatch {
			p.dispatch()
		}
		return i, nil
	}
	// The rest waits, as one waiter, so that nothing overtakes it.
	w := p.newWaiterLocked(len(vs) - i)
	p.spare = max(p.spare, len(w.es))
	for j := range w.es {
		v := vs[i+j]
		w.es[j] = p.newEntryLocked(v, p.keyOf(v))
	}
	p.waiters.pushBack(w)
	p.mu.Unlock()
	if dispatch {
		p.dispatch()
	}

	n, err := p.await(ctx, w)
	return i + n, err
}

// keyOf is the hash of v's ordering key in an Ordered pool (KeyFunc's
// string, hashed with the pool's seed: what the pool keeps and compares
// instead of the string), 0 otherwise.
func (p *Pool[T]) keyOf(v T) uint64 {
	if p.ordered {
		return maphash.String(p.seed, p.keyFunc(v))
	}
	return 0
}

// wakeOneLocked counts in one worker loop, and reports so, if items just
// queued need one: some are ready, a worker is free, and no loop on its
// way (or, with BatchHandler, filling) will take them.
func (p *Pool[T]) wakeOneLocked() bool {
	if p.loops >= p.maxWorkers || !p.hasReadyLocked() {
		return false
	}
	if p.batchFunc != nil && (p.filling || p.starting > 0) {
		return false
	}
	if p.batchFunc == nil && p.starting >= p.readyLenLocked() {
		return false
	}
	p.addLoopLocked()
	return true
}

// admitBatchLocked is admitLocked's last step for a BatchHandler pool,
// once a ready item is queued: it counts in a loop only when none is
// filling or on its way (those take the new item), so a trickle of items
// does not wake a loop each.
func (p *Pool[T]) admitBatchLocked() bool {
	if p.filling || p.starting > 0 || p.loops >= p.maxWorkers {
		return false
	}
	p.addLoopLocked()
	return true
}

// readyAddedLocked wakes the loop filling a batch once MaxBatch items are
// ready. It does nothing in a pool without BatchHandler.
func (p *Pool[T]) readyAddedLocked() {
	if !p.filling || p.readyLenLocked() < p.maxBatch {
		return
	}
	select {
	case p.fill <- struct{}{}:
	default: // already woken
	}
}

// batchBuf is one BatchHandler call's buffers, recycled across calls.
type batchBuf[T any] struct {
	es   []*entry[T]
	vs   []T
	errs []error
	outs []batchOut
}

// batchOut is one item's outcome as report decided it.
type batchOut struct {
	out   outcome
	after time.Duration
}

func (p *Pool[T]) getBufLocked() *batchBuf[T] {
	if n := len(p.bufs); n > 0 {
		b := p.bufs[n-1]
		p.bufs[n-1] = nil
		p.bufs = p.bufs[:n-1]
		return b
	}
	return &batchBuf[T]{es: make([]*entry[T], 0, p.maxBatch), vs: make([]T, 0, p.maxBatch),
		errs: make([]error, 0, p.maxBatch), outs: make([]batchOut, 0, p.maxBatch)}
}

func (p *Pool[T]) putBufLocked(b *batchBuf[T]) {
	b.reset()
	if len(p.bufs) < p.maxWorkers {
		p.bufs = append(p.bufs, b)
	}
}

// reset empties b, dropping its references to items and errors.
func (b *batchBuf[T]) reset() {
	clear(b.es)
	clear(b.vs)
	clear(b.errs)
	b.es, b.vs, b.errs, b.outs = b.es[:0], b.vs[:0], b.errs[:0], b.outs[:0]
}

// workBatches is the worker loop of a BatchHandler pool, entered with mu
// held (and left with it released): it takes up to MaxBatch ready items
// under one lock, calls BatchHandler once for them and settles each under
// one lock, until nothing is ready. A loop that finds fewer than MaxBatch
// ready items, while no other loop is filling, waits up to MaxWait for
// more (see fillLocked); one that finds another filling leaves them to it.
func (p *Pool[T]) workBatches(now int64) {
	b := p.getBufLocked()
	for {
		if !p.fillLocked() {
			p.putBufLocked(b)
			p.loopExitLocked()
			p.mu.Unlock()
			return
		}
		if p.maxWait > 0 {
			now = p.clock() // the loop may have waited
		}
		n := p.maxBatch
		if p.limiter != nil {
			var ok bool
			if n, now, ok = p.paceLocked(n, now); !ok {
				p.putBufLocked(b)
				p.loopExitLocked()
				p.mu.Unlock()
				return
			}
		}
		dispatch := 0
		for len(b.es) < n {
			e := p.startOneLocked(now)
			if e == nil {
				break
			}
			b.es = append(b.es, e)
			dispatch += p.grantLocked()
		}
		if len(b.es) == 0 {
			p.putBufLocked(b)
			p.loopExitLocked()
			p.mu.Unlock()
			return
		}
		// Items left over for another call: wake a loop for them unless
		// one is filling or on its way.
		if !p.filling && p.starting == 0 && p.loops < p.maxWorkers && p.hasReadyLocked() {
			p.addLoopLocked()
			dispatch++
		}
		p.mu.Unlock()
		for range dispatch {
			p.dispatch()
		}
		for _, e := range b.es {
			b.vs = append(b.vs, e.v)
		}
		b.errs = b.errs[:len(b.es)]
		p.callBatch(b)
		for i, e := range b.es {
			out, after := p.report(e, b.errs[i])
			b.outs = append(b.outs, batchOut{out, after})
		}
		now = p.clock()
		p.mu.Lock()
		for i, e := range b.es {
			p.settleLocked(e, b.outs[i].out, b.outs[i].after)
		}
		b.reset()
	}
}

// fillLocked decides whether this loop calls now: it returns false when
// the loop should exit (nothing may start, or another loop is filling and
// will take what is ready). With fewer than MaxBatch ready items, MaxWait
// set and no loop filling, it becomes the filling loop and waits, mu
// released, until MaxBatch items are ready, MaxWait has passed or Stop
// begins; it returns with mu held.
func (p *Pool[T]) fillLocked() bool {
	if !p.hasReadyLocked() {
		return false
	}
	if p.readyLenLocked() >= p.maxBatch || p.maxWait <= 0 || p.hold.on {
		return true // a held pool starts its probe at once
	}
	if p.filling {
		return false
	}
	p.filling = true
	select {
	case <-p.fill: // a stale wake-up of an earlier filler
	default:
	}
	p.mu.Unlock()
	t := time.NewTimer(p.maxWait)
	select {
	case <-p.fill:
	case <-t.C:
	case <-p.stopCh:
	}
	t.Stop()
	p.mu.Lock()
	p.filling = false
	return p.hasReadyLocked()
}

// callBatch runs the BatchHandler for b.vs, turning a panic into a
// *handoff.PanicError for every item. If the handler calls runtime.Goexit
// this goroutine cannot be kept: callBatch reports and settles every item
// itself and hands the loop over to a new one.
func (p *Pool[T]) callBatch(b *batchBuf[T]) {
	returned := false
	defer func() {
		if returned {
			return
		}
		var err error
		if r := recover(); r != nil {
			stack := debug.Stack()
			err = &handoff.PanicError{Value: r, Stack: stack}
			p.log.Error("batch handler panicked", "err", err, "batch", len(b.vs), "stack", string(stack))
			for i := range b.errs {
				b.errs[i] = err
			}
			return
		}
		err = errGoexit
		p.log.Error("batch handler called runtime.Goexit", "err", err, "batch", len(b.vs), "stack", string(debug.Stack()))
		outs := make([]batchOut, len(b.es))
		for i, e := range b.es {
			outs[i].out, outs[i].after = p.report(e, err)
		}
		p.mu.Lock()
		for i, e := range b.es {
			p.settleLocked(e, outs[i].out, outs[i].after)
		}
		handover := p.hasReadyLocked()
		if handover {
			p.starting++ // the new loop takes this one's place in loops
		} else {
			p.loopExitLocked()
		}
		p.mu.Unlock()
		if handover {
			p.dispatch()
		}
	}()
	p.batchFunc(p.workCtx, b.vs, b.errs)
	returned = true
}
