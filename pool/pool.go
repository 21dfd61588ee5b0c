package pool

import (
	"context"
	"hash/maphash"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alitto/pond/v2"
	"golang.org/x/time/rate"

	"github.com/handoff-go/handoff"
)

// Pool runs one message class's handlers on a bounded number of workers
// behind a bounded queue. Make one with [New]; all its methods are safe for
// concurrent use. A stopped Pool is not reused.
//
// Each pond task is a worker loop: it starts the first ready item, runs
// it, reports it and takes the next, until nothing is ready. The pool
// keeps at most Workers loops, so pond's own queue stays empty and pond's
// blocking and futures, which cannot honour a caller's ctx or tell "ran"
// from "dropped", are never relied on.
type Pool[T any] struct {
	name       string
	ordered    bool
	maxWorkers int
	queueSize  int
	keyFunc    func(T) string
	seed       maphash.Seed // Ordered: keyOf hashes keys with it
	handler    func(context.Context, T) error
	batchFunc  func(context.Context, []T, []error) // BatchHandler; nil without
	maxBatch   int
	maxWait    time.Duration
	resultFunc func(T, error)
	retryFunc  func(T, error) (time.Duration, bool)
	log        *slog.Logger

	workers pond.Pool
	workFn  func() // p.work, bound once so that dispatch allocates nothing

	stopCh chan struct{} // closed when Stop begins

	// workCtx is the context every handler gets. It outlives any caller's
	// ctx on purpose: only Stop ends it, with the cause Stop was given.
	workCtx context.Context
	cancel  context.CancelCauseFunc

	// succeeded and failed are counted under mu, where the worker loop
	// settles the item anyway: no shared counter write per item.
	succeeded uint64
	failed    uint64
	retried   atomic.Uint64

	// timerWG counts the retry timers whose callback may still run: Stop
	// waits for it, so no callback outlives Stop.
	timerWG sync.WaitGroup
	// testHookWake, when set by a test, runs at the start of every retry
	// timer callback, before it takes mu.
	testHookWake func()

	mu          sync.Mutex
	stopped     bool
	unstarted   list[T]              // accepted, not started, submission order
	running     list[T]              // handlers running or reporting their result
	waiting     list[T]              // waiting out a retry delay, in the order they began
	ready       readySet[T]          // Ordered: unstarted items whose key is free
	seq         uint32               // Ordered: acceptance counter, wrapping
	keys        map[uint64]*entry[T] // Ordered: last accepted item of each busy key, by keyOf
	waiters     waitList[T]          // Submits waiting for room, first come first served
	firsts      waitList[T]          // SubmitFirsts waiting for room, served before waiters
	queued      int                  // len(unstarted) + len(waiting): what QueueSize bounds
	nwaiting    int                  // len(waiting)
	nrunning    int                  // len(running)
	loops       int                  // worker loops dispatched and not returned
	starting    int                  // of loops, those that have not taken mu yet
	filling     bool                 // BatchHandler: a loop waits for MaxBatch ready items (see fill)
	fill        chan struct{}        // BatchHandler: wakes the filling loop; buffered 1
	bufs        []*batchBuf[T]       // BatchHandler: recycled call buffers, at most Workers
	loopsDone   chan struct{}        // closed when loops reaches 0; made by waitLoops
	idle        chan struct{}        // closed when idleLocked becomes true; made by Drain
	stopDone    chan struct{}        // closed when nrunning reaches 0; made by Stop
	interrupted []T                  // returned an error after Stop cancelled workCtx
	free        []*entry[T]          // recycled entries, for Submit
	freeWaiters []*waiter[T]         // recycled waiters, for Submit and SubmitBatch
	spare       int                  // the most entries one SubmitBatch held waiting (see recycleLocked)
	// timers holds the retry timer of each waiting item; RetryFunc only.
	timers map[*entry[T]]retryTimer
	// drainBy, while a Drain with a deadline waits, is that deadline on
	// the pool's clock: a retry due by then is waited for (see Drain).
	// Zero otherwise.
	drainBy int64
	// hold is set by Hold; see hold.go.
	hold holdState
	// limiter paces the starts (Config.Rate); nil without a limit. paced
	// counts the ready items the worker loops waiting for their tokens
	// will take (see paceLocked).
	limiter *rate.Limiter
	burst   int
	paced   int

	// epoch is the origin of the pool's clock (see clock).
	epoch time.Time
}

// retryTimer is a waiting item's timer and when it is due, on the pool's
// clock.
type retryTimer struct {
	t   *time.Timer
	due int64
}

// clock returns the monotonic time since the pool was made, in
// nanoseconds: one clock read, no wall-clock reading.
func (p *Pool[T]) clock() int64 { return int64(time.Since(p.epoch)) }

// New checks cfg and returns a pool ready for [Pool.Submit]. It reports
// every problem of cfg at once, each naming the pool. New starts no
// goroutine: workers start with the first item and exit when idle.
func New[T any](cfg Config[T]) (*Pool[T], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pool[T]{
		name:       cfg.Name,
		ordered:    cfg.Ordered,
		maxWorkers: cfg.Workers,
		queueSize:  cfg.QueueSize,
		keyFunc:    cfg.KeyFunc,
		handler:    cfg.Handler,
		batchFunc:  cfg.BatchHandler,
		maxBatch:   cfg.MaxBatch,
		maxWait:    cfg.MaxWait,
		resultFunc: cfg.ResultFunc,
		retryFunc:  cfg.RetryFunc,
		log:        log.With("component", "pool", "class", cfg.Name),
		// pond's queue stays unbounded and, with at most Workers loops,
		// empty. Its panic recovery is off: handler panics are recovered
		// in call, and any other panic is a bug here or in ResultFunc that
		// must not leave the accounting silently stuck.
		workers: pond.NewPool(cfg.Workers, pond.WithoutPanicRecovery()),
		stopCh:  make(chan struct{}),
		epoch:   time.Now(),
	}
	p.workFn = p.work
	if cfg.Rate > 0 {
		p.limiter = rate.NewLimiter(rate.Limit(cfg.Rate), cfg.Burst)
		p.burst = cfg.Burst
	}
	p.workCtx, p.cancel = context.WithCancelCause(context.Background())
	if cfg.Ordered {
		p.keys = make(map[uint64]*entry[T])
		p.seed = maphash.MakeSeed()
	}
	if cfg.RetryFunc != nil {
		p.timers = make(map[*entry[T]]retryTimer)
	}
	if cfg.BatchHandler != nil {
		p.fill = make(chan struct{}, 1)
	}
	return p, nil
}

// Name returns the pool's class name, [Config.Name].
func (p *Pool[T]) Name() string { return p.name }

// Submit hands v to the pool.
//
// It blocks while the pool holds [Config.QueueSize] items accepted and not
// running (queued, or waiting out a retry delay), until
// there is room, ctx ends (it returns ctx.Err() and v is not accepted) or
// [Pool.Stop] begins (it returns [ErrStopped] and v is not accepted). ctx
// only bounds this wait and is not the handler's context; a Submit that
// finds room does not look at it. Waiting Submits get room first come,
// first served. Safe for concurrent use; in an Ordered pool, concurrent
// Submits of the same key are ordered as they are accepted.
//
// On a nil error the pool owns v: its handler will run, or [Pool.Stop]
// will return it.
func (p *Pool[T]) Submit(ctx context.Context, v T) error { return p.submit(ctx, v, false) }

// SubmitFirst hands v to the pool ahead of the items of every Submit and
// SubmitBatch waiting for room: for an item the caller had accepted
// before (a message saved at a stop and re-pushed by its next owner) that
// must not wait behind work accepted after it. It has a lane of its own,
// QueueSize items over the pool's bound: it blocks only while the pool
// holds 2×QueueSize items accepted and not running, until there is room,
// ctx ends (ctx.Err(), v not accepted) or [Pool.Stop] begins
// ([ErrStopped]); waiting SubmitFirsts get room first come, first served
// and before any waiting Submit. Submit and SubmitBatch still wait while
// the pool holds QueueSize items, so the lane's items are started before
// any item submitted after them. Items keep the pool's order once
// accepted: SubmitFirst does not overtake items already in the queue, and
// in an Ordered pool its item runs after the earlier accepted items of
// its key. Safe for concurrent use; on a nil error the pool owns v.
func (p *Pool[T]) SubmitFirst(ctx context.Context, v T) error { return p.submit(ctx, v, true) }

// submit is Submit, or SubmitFirst when first. It admits v at once when
// there is room for it: for a SubmitFirst up to firstBound and behind no
// waiting SubmitFirst, for a Submit up to QueueSize and behind no waiter
// of either kind. Else it queues a waiter on its kind's list and awaits
// room.
func (p *Pool[T]) submit(ctx context.Context, v T, first bool) error {
	key := p.keyOf(v)

	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return ErrStopped
	}
	e := p.newEntryLocked(v, key)
	room := p.queued < p.queueSize && p.waiters.head == nil && p.firsts.head == nil
	if first {
		room = p.queued < p.firstBound() && p.firsts.head == nil
	}
	if room {
		dispatch := p.admitLocked(e)
		p.mu.Unlock()
		if dispatch {
			p.dispatch()
		}
		return nil
	}
	w := p.newWaiterLocked(1)
	w.es[0] = e
	w.first = first
	if first {
		p.firsts.pushBack(w)
	} else {
		p.waiters.pushBack(w)
	}
	p.mu.Unlock()
	_, err := p.await(ctx, w)
	return err
}

// firstBound is how many items accepted and not running the pool may hold
// when SubmitFirst admits one: QueueSize more than Submit's bound.
func (p *Pool[T]) firstBound() int { return 2 * p.queueSize }

// await waits for the queued waiter w's entries to be admitted, until
// ctx ends or the pool stops, and frees w. It returns how many of them
// the pool owns: all of them and nil, or those admitted before it gave
// up (a prefix; the rest are recycled) and ctx.Err() or ErrStopped. An
// entry admitted while it was giving up is the pool's all the same.
func (p *Pool[T]) await(ctx context.Context, w *waiter[T]) (int, error) {
	var err error
	select {
	case <-w.ch:
		p.mu.Lock()
		n := len(w.es)
		p.freeWaiterLocked(w)
		p.mu.Unlock()
		return n, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-p.stopCh:
		err = ErrStopped
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.granted {
		<-w.ch // the grant's token
		n := len(w.es)
		p.freeWaiterLocked(w)
		return n, nil // admitted before we gave up: the pool owns them
	}
	if w.first {
		p.firsts.remove(w)
	} else {
		p.waiters.remove(w)
	}
	for _, e := range w.es[w.n:] {
		p.recycleLocked(e)
	}
	n := w.n
	p.freeWaiterLocked(w)
	return n, err
}

// newWaiterLocked returns a waiter for n entries, reusing a recycled one
// when it can: a Submit or SubmitBatch that waits for room then costs
// no allocation once the pool has served one before.
func (p *Pool[T]) newWaiterLocked(n int) *waiter[T] {
	var w *waiter[T]
	if k := len(p.freeWaiters); k > 0 {
		w = p.freeWaiters[k-1]
		p.freeWaiters[k-1] = nil
		p.freeWaiters = p.freeWaiters[:k-1]
	} else {
		w = &waiter[T]{ch: make(chan struct{}, 1)}
	}
	switch {
	case n == 1:
		w.es = w.one[:]
	case cap(w.es) >= n: // n > 1: not w.one
		w.es = w.es[:n]
	default:
		w.es = make([]*entry[T], n)
	}
	return w
}

// freeWaiterLocked keeps w, off the list and its grant's token taken,
// for a later wait. At most Workers+1 are kept.
func (p *Pool[T]) freeWaiterLocked(w *waiter[T]) {
	clear(w.es)
	w.n, w.granted, w.first, w.prev, w.next = 0, false, false, nil, nil
	if len(p.freeWaiters) <= p.maxWorkers {
		p.freeWaiters = append(p.freeWaiters, w)
	}
}

// admitLocked queues accepted e and reports whether a new worker loop must
// be dispatched for it.
func (p *Pool[T]) admitLocked(e *entry[T]) bool {
	if !p.queueLocked(e) {
		return false
	}
	if p.batchFunc != nil {
		return p.admitBatchLocked()
	}
	if p.loops < p.maxWorkers {
		p.addLoopLocked()
		return true
	}
	return false
}

// queueLocked queues accepted e and reports whether it is ready to start
// (in an Ordered pool, whether its key was free).
func (p *Pool[T]) queueLocked(e *entry[T]) bool {
	p.unstarted.pushBack(e)
	p.queued++
	if p.ordered {
		p.seq++
		e.seq = p.seq
		tail, busy := p.keys[e.key]
		p.keys[e.key] = e
		if busy {
			tail.keyNext = e
			return false
		}
		p.ready.fresh.push(e)
	}
	p.readyAddedLocked()
	return true
}

// addLoopLocked counts in a worker loop about to be dispatched.
func (p *Pool[T]) addLoopLocked() {
	p.loops++
	p.starting++
}

// readyLenLocked counts the items that may start now, hold aside.
func (p *Pool[T]) readyLenLocked() int {
	if p.ordered {
		return p.ready.fresh.n + len(p.ready.promoted)
	}
	return p.queued - p.nwaiting
}

// dispatch starts one worker loop; the caller has counted it in loops.
func (p *Pool[T]) dispatch() {
	// pond refuses a task only once stopped, and this pool never stops
	// its pond pool (see Stop).
	if err := p.workers.Go(p.workFn); err != nil {
		panic("pool: pond refused a worker: " + err.Error())
	}
}

// work is the pond task: a worker loop.
func (p *Pool[T]) work() {
	now := p.clock() // read outside mu
	p.mu.Lock()
	p.starting--
	if p.batchFunc != nil {
		p.workBatches(now)
		return
	}
	for {
		if p.limiter != nil {
			var ok bool
			if _, now, ok = p.paceLocked(1, now); !ok {
				p.loopExitLocked()
				p.mu.Unlock()
				return
			}
		}
		e, dispatch := p.startLocked(now)
		if e == nil {
			p.loopExitLocked()
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		for range dispatch {
			p.dispatch()
		}
		out, after := p.report(e, p.call(e))
		now = p.clock()
		p.mu.Lock()
		p.settleLocked(e, out, after)
	}
}

// startLocked moves the first ready item to running and gives the slot it
// frees, if that brings the pool under QueueSize (retries may have taken it
// over), to the first waiting Submit. It returns nil when nothing is ready,
// and how many new worker loops the caller must dispatch: for the waiter's
// item, and one more when items are left ready that no loop on its way
// will take (after a SubmitBatch, each loop starting an item wakes the
// next, so the submitter pays one wake-up). now, on the pool's clock, is
// recorded as the item's start.
func (p *Pool[T]) startLocked(now int64) (e *entry[T], dispatch int) {
	e = p.startOneLocked(now)
	if e == nil {
		return nil, 0
	}
	dispatch = p.grantLocked()
	if p.loops < p.maxWorkers && p.hasReadyLocked() && p.readyLenLocked() > p.starting {
		p.addLoopLocked()
		dispatch++
	}
	return e, dispatch
}

// startOneLocked moves the first ready item to running and returns it, or
// nil when none may start.
func (p *Pool[T]) startOneLocked(now int64) (e *entry[T]) {
	if !p.hold.mayStart() {
		return nil
	}
	if p.ordered {
		e = p.ready.pop()
	} else {
		e = p.unstarted.head
	}
	if e == nil {
		return nil
	}
	p.hold.started()
	p.unstarted.remove(e)
	p.running.pushBack(e)
	p.queued--
	p.nrunning++
	e.started = now
	e.state.Store(stateRunning)
	return e
}

// grantLocked admits the items of waiting SubmitFirsts while the pool is
// under its first bound, then those of waiting Submits while it is under
// QueueSize, each first come first served, and returns how many worker
// loops to dispatch for them.
func (p *Pool[T]) grantLocked() (dispatch int) {
	dispatch = p.grantListLocked(&p.firsts, p.firstBound())
	if p.firsts.head != nil {
		return dispatch // nothing overtakes a waiting SubmitFirst
	}
	return dispatch + p.grantListLocked(&p.waiters, p.queueSize)
}

// grantListLocked admits the items of the waiters on l while the pool
// holds fewer than bound items, first come first served, and returns how
// many worker loops to dispatch for them.
func (p *Pool[T]) grantListLocked(l *waitList[T], bound int) (dispatch int) {
	for w := l.head; w != nil && p.queued < bound; w = l.head {
		for w.n < len(w.es) && p.queued < bound {
			e := w.es[w.n]
			w.n++
			if p.admitLocked(e) {
				dispatch++
			}
		}
		if w.n < len(w.es) {
			break
		}
		l.remove(w)
		w.granted = true
		w.ch <- struct{}{} // buffered: the waiter takes it
	}
	return dispatch
}

// call runs e's handler, turning a panic into a *handoff.PanicError. If
// the handler calls runtime.Goexit this goroutine cannot be kept: call
// reports e itself and hands the loop over to a new one.
func (p *Pool[T]) call(e *entry[T]) (err error) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if r := recover(); r != nil {
			stack := debug.Stack()
			err = &handoff.PanicError{Value: r, Stack: stack}
			p.log.Error("handler panicked", "err", err, "stack", string(stack))
			return
		}
		err = errGoexit
		p.log.Error("handler called runtime.Goexit", "err", err, "stack", string(debug.Stack()))
		out, after := p.report(e, err)
		p.mu.Lock()
		p.settleLocked(e, out, after)
		// Hand this loop's place over to a new one if there is work.
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
	err = p.handler(p.workCtx, e.v)
	returned = true
	return err
}

// outcome is how an attempt of an item ended, as [Pool.report] decides.
type outcome uint8

const (
	outcomeSucceeded   outcome = iota // ResultFunc called with nil
	outcomeFailed                     // ResultFunc called with an error
	outcomeDropped                    // Stop returned e as a straggler
	outcomeInterrupted                // error after Stop cancelled workCtx: Stop returns e
	outcomeRetry                      // RetryFunc asked for another attempt
)

// report claims e's result from a concurrent Stop and decides the
// attempt's outcome: an error after Stop cancelled workCtx is interrupted;
// another error may be retried if RetryFunc says so; otherwise ResultFunc
// is called (settleLocked counts the result). It runs without mu.
func (p *Pool[T]) report(e *entry[T], err error) (outcome, time.Duration) {
	if !e.state.CompareAndSwap(stateRunning, stateFinishing) {
		return outcomeDropped, 0
	}
	if err != nil {
		if p.workCtx.Err() != nil {
			return outcomeInterrupted, 0
		}
		if p.retryFunc != nil {
			if after, retry := p.retryFunc(e.v, err); retry {
				p.retried.Add(1)
				return outcomeRetry, after
			}
		}
	}
	if p.resultFunc != nil {
		p.resultFunc(e.v, err)
	}
	if err != nil {
		return outcomeFailed, 0
	}
	return outcomeSucceeded, 0
}

// settleLocked acts on the outcome report gave for running e.
func (p *Pool[T]) settleLocked(e *entry[T], out outcome, after time.Duration) {
	switch out {
	case outcomeSucceeded, outcomeFailed:
		if out == outcomeSucceeded {
			p.succeeded++
		} else {
			p.failed++
		}
		p.doneLocked(e, false)
		p.recycleLocked(e)
	case outcomeInterrupted:
		p.doneLocked(e, true)
	case outcomeRetry:
		p.retryLocked(e, after)
	}
	// outcomeDropped: Stop has taken e off the running list.
}

// newEntryLocked returns an entry for v, reusing a recycled one when it
// can.
func (p *Pool[T]) newEntryLocked(v T, key uint64) *entry[T] {
	if n := len(p.free); n > 0 {
		e := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		e.v, e.key = v, key
		return e
	}
	return &entry[T]{v: v, key: key}
}

// recycleLocked keeps e, whose item was reported and which is on no list
// any more, for a later Submit: one allocation less per item. Only Submit
// and SubmitBatch reuse entries, and only before Stop began, so an entry
// Stop holds is never reused under it. At most Workers+QueueSize entries
// are kept, and as many more as the largest SubmitBatch that waited for
// room held waiting.
func (p *Pool[T]) recycleLocked(e *entry[T]) {
	if len(p.free) >= p.maxWorkers+p.queueSize+p.spare {
		return
	}
	// e's links are nil already: list.remove and fifo.pop unlink what
	// they take, doneLocked clears keyNext, and an entry a giving-up
	// SubmitBatch hands back was never linked (checkFree, in the tests).
	// Writing them again would cost a write barrier each while the GC
	// marks.
	var zero T
	e.v, e.key, e.seq = zero, 0, 0
	e.state.Store(stateQueued)
	p.free = append(p.free, e)
}

// doneLocked takes reported e off the running list and, in an Ordered
// pool, makes the next item of its key ready.
func (p *Pool[T]) doneLocked(e *entry[T], interrupted bool) {
	if interrupted {
		p.interrupted = append(p.interrupted, e.v)
	}
	p.running.remove(e)
	p.nrunning--
	if p.ordered {
		if n := e.keyNext; n == nil {
			delete(p.keys, e.key)
		} else if !p.stopped {
			p.ready.promoted.push(n) // the calling loop picks it up
			p.readyAddedLocked()
		}
		e.keyNext = nil
	}
	p.leftRunningLocked()
}

// leftRunningLocked wakes Stop and Drain callers once an item has left
// the running list.
func (p *Pool[T]) leftRunningLocked() {
	if p.stopDone != nil && p.nrunning == 0 {
		close(p.stopDone)
		p.stopDone = nil
	}
	p.noteIdleLocked()
}

// loopExitLocked counts a worker loop out.
func (p *Pool[T]) loopExitLocked() {
	p.loops--
	if p.loops == 0 && p.loopsDone != nil {
		close(p.loopsDone)
		p.loopsDone = nil
	}
}

// waitLoops blocks until no worker loop is left. Only once the pool is
// stopped can no new one start.
func (p *Pool[T]) waitLoops() {
	p.mu.Lock()
	if p.loops == 0 {
		p.mu.Unlock()
		return
	}
	if p.loopsDone == nil {
		p.loopsDone = make(chan struct{})
	}
	done := p.loopsDone
	p.mu.Unlock()
	<-done
}

func (p *Pool[T]) hasReadyLocked() bool {
	if !p.hold.mayStart() {
		return false
	}
	if p.ordered {
		return !p.ready.empty()
	}
	return p.unstarted.head != nil
}

// idleLocked reports whether nothing is running, nothing is ready to run
// and no retry is due by drainBy: what Drain waits for. Items waiting out
// a retry delay that ends later, and in an Ordered pool the items queued
// behind their key, may remain.
func (p *Pool[T]) idleLocked() bool {
	return p.nrunning == 0 && !p.hasReadyLocked() && !p.retryDueLocked()
}

// retryDueLocked reports whether an item waiting out a retry delay is due
// by drainBy. It walks the retry timers (one per waiting item whose timer
// has not fired): at most QueueSize plus Workers.
func (p *Pool[T]) retryDueLocked() bool {
	if p.drainBy == 0 || p.stopped || !p.hold.mayStart() {
		return false // a held pool would not start it anyway
	}
	for _, rt := range p.timers {
		if rt.due <= p.drainBy {
			return true
		}
	}
	return false
}

// noteIdleLocked wakes Drain callers once the pool is idle.
func (p *Pool[T]) noteIdleLocked() {
	if p.idle != nil && p.idleLocked() {
		close(p.idle)
		p.idle = nil
	}
}

// Drain blocks until no item is running or ready to run, or until ctx
// ends, when it returns context.Cause(ctx). It does not stop Submit: items
// submitted meanwhile are waited for too. An item waiting out a retry
// delay (see [Config.RetryFunc]) is waited for when its delay ends before
// ctx's deadline: it then runs, and Drain waits for it as for any other.
// Items whose delay ends later (all of them when ctx has no deadline) are
// not waited for, nor, in an Ordered pool, the items queued behind their
// key: Drain may return with them in the pool, for [Pool.Stop] to hand
// back. After [Pool.Stop], handlers still running past the grace
// (stragglers) no longer count. Safe for concurrent use; concurrent
// Drains wait for retries due by the latest of their deadlines.
func (p *Pool[T]) Drain(ctx context.Context) error {
	var by int64
	if d, ok := ctx.Deadline(); ok {
		by = max(int64(d.Sub(p.epoch)), 1)
	}
	p.mu.Lock()
	if by > p.drainBy {
		p.drainBy = by
		defer func() {
			p.mu.Lock()
			if p.drainBy == by {
				p.drainBy = 0
			}
			p.mu.Unlock()
		}()
	}
	if p.idleLocked() {
		p.mu.Unlock()
		return nil
	}
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Stats is a point-in-time view of a pool.
type Stats struct {
	// Queued counts items accepted and ready or waiting for their turn,
	// including those queued behind a busy key; Submits still waiting for
	// room are not counted, nor are items waiting out a retry delay.
	Queued int
	// Waiting counts items waiting out a retry delay (see
	// [Config.RetryFunc]). [Config.QueueSize] bounds Queued + Waiting
	// (twice QueueSize with [Pool.SubmitFirst]).
	Waiting int
	// Running counts handlers running or reporting their result, not
	// counting stragglers left behind by Stop.
	Running int
	// Succeeded counts handlers that returned nil, Failed those that
	// returned an error or panicked and were not retried; each is counted
	// after its ResultFunc. Items interrupted by Stop are in neither.
	Succeeded, Failed uint64
	// Retried counts failed attempts that RetryFunc sent back to wait and
	// run again; such an attempt is in neither Succeeded nor Failed.
	Retried uint64
}

// Stats returns the pool's counts. It does not wait for handlers and is
// safe for concurrent use. Queued, Waiting and Running are read together;
// an item that has just finished may briefly show in Succeeded, Failed or
// Retried while still counted in Running.
func (p *Pool[T]) Stats() Stats {
	p.mu.Lock()
	s := Stats{Queued: p.queued - p.nwaiting, Waiting: p.nwaiting, Running: p.nrunning,
		Succeeded: p.succeeded, Failed: p.failed}
	p.mu.Unlock()
	s.Retried = p.retried.Load()
	return s
}

// RunningTimes returns how long the handlers running now have run so far:
// in total and the longest. Stragglers left behind by Stop are not
// counted. It walks the running handlers (at most Workers) under the
// pool's lock, does not wait for them and is safe for concurrent use.
func (p *Pool[T]) RunningTimes() (total, longest time.Duration) {
	now := p.clock()
	p.mu.Lock()
	for e := p.running.head; e != nil; e = e.next {
		d := time.Duration(max(now-e.started, 0))
		total += d
		longest = max(longest, d)
	}
	p.mu.Unlock()
	return total, longest
}
