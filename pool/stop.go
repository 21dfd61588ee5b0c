package pool

import (
	"time"
)

// StopResult is what [Pool.Stop] hands back: every accepted item that was
// not handled to the end. Each accepted item is either counted in
// [Stats] Succeeded or Failed, or in exactly one of Unstarted, Waiting and
// Interrupted.
type StopResult[T any] struct {
	// Unstarted holds the items not running and not waiting out a retry
	// delay, in submission order: those whose handler never started,
	// including those queued behind a busy key (a waiting item's key
	// too), and retried items whose delay had ended.
	Unstarted []T
	// Waiting holds the items that were waiting out a retry delay (see
	// [Config.RetryFunc]), in the order they began waiting. Each has run
	// and failed at least once; in an Ordered pool each comes before the
	// items of its key in Unstarted.
	Waiting []T
	// Interrupted holds the items whose handler was cancelled by Stop and
	// returned an error within the grace, then the stragglers.
	Interrupted []T
	// Stragglers counts the items of Interrupted whose handler had not
	// returned when the grace ran out.
	Stragglers int
}

// Stop is the hard stop. It blocks for at most grace plus the time the
// ResultFunc calls in progress take, and is safe for concurrent use.
//
// Stop makes Submit fail with [ErrStopped] (Submits already waiting
// included), starts no further item and takes out every unstarted item,
// in submission order, including those waiting behind a busy key. It
// stops the retry timers and takes out the items waiting out a retry
// delay: none of them runs again, even if its timer fires as Stop begins.
// It cancels the handlers' context with cause (nil means [ErrHardStop]),
// then waits up to grace for running handlers to return; zero or negative
// grace means it does not wait. A handler that returns nil within grace is done as
// usual (ResultFunc is called). One that returns an error once its context
// is cancelled is interrupted, not failed: ResultFunc is not called and
// the item goes into Interrupted. One still running after grace is a
// straggler: it goes into Interrupted and its result, whenever it comes,
// is dropped (ResultFunc is never called for it). RetryFunc is not called
// for interrupted items; an item that RetryFunc sends back to wait after
// Stop began goes into Waiting.
//
// Stop returns only after every ResultFunc call for handlers that returned
// within grace has completed; it must not be called from a Handler or a
// ResultFunc. It does not wait for stragglers: each keeps its pond worker
// goroutine blocked until the handler returns, and a handler that never
// returns leaks it. Without stragglers, every worker goroutine has done its
// work when Stop returns and exits at once; retry timer callbacks have
// returned.
//
// Only the first Stop does anything; later ones, even while the first is
// still running, return an empty result at once.
func (p *Pool[T]) Stop(grace time.Duration, cause error) StopResult[T] {
	if cause == nil {
		cause = ErrHardStop
	}
	began := time.Now()

	var res StopResult[T]
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return res
	}
	p.stopped = true
	close(p.stopCh)
	res.Unstarted = p.takeUnstartedLocked()
	res.Waiting = p.takeWaitingLocked(res.Waiting)
	running := p.nrunning
	var done chan struct{}
	if running > 0 {
		done = make(chan struct{})
		p.stopDone = done
	}
	p.noteIdleLocked()
	p.mu.Unlock()

	p.cancel(cause)

	var stragglers []T
	if done != nil {
		stragglers = p.awaitRunning(grace, done)
	}

	p.mu.Lock()
	res.Interrupted = append(p.interrupted, stragglers...)
	p.interrupted = nil
	res.Waiting = p.takeWaitingLocked(res.Waiting) // sent back after Stop began
	p.mu.Unlock()
	res.Stragglers = len(stragglers)
	p.timerWG.Wait() // callbacks that fired as Stop began

	if res.Stragglers == 0 {
		// No handler is running and nothing is ready: the worker loops
		// are returning. pond's Stop is not used: it runs on pond's
		// package-level pool (a goroutine shared by every pool in the
		// process) and breaks testing/synctest bubbles; an idle pond
		// pool holds nothing else.
		p.waitLoops()
	}

	// Handing items back is what a stop does: the caller saves them and
	// warns about what is an escalation (a drain that ran out of time,
	// stragglers). So this is Info, whatever it hands back.
	p.log.Info("pool stopped",
		"unstarted", len(res.Unstarted), "waiting", len(res.Waiting), "running", running, "interrupted", len(res.Interrupted),
		"stragglers", res.Stragglers, "grace", grace, "cause", cause, "took", time.Since(began))
	return res
}

// takeUnstartedLocked empties the queue of items not yet started (the
// ready index and the per-key queues with it) and returns them in queue
// order, each marked taken. p.mu must be held.
func (p *Pool[T]) takeUnstartedLocked() []T {
	var items []T
	if n := p.queued - p.nwaiting; n > 0 {
		items = make([]T, 0, n)
	}
	for e := p.unstarted.head; e != nil; {
		next := e.next
		e.prev, e.next, e.readyNext, e.keyNext = nil, nil, nil, nil
		e.state.Store(stateTaken)
		items = append(items, e.v)
		e = next
	}
	p.unstarted = list[T]{}
	p.ready.reset()
	clear(p.keys)
	p.queued -= len(items)
	return items
}

// awaitRunning waits up to grace (zero: not at all) for the running
// handlers to return, which closes done, then marks those still running
// as stragglers and returns their items; it then waits, without bound,
// for the ResultFunc calls of handlers that had returned. It is Stop's
// second step: p.stopDone is done and p.mu is not held.
func (p *Pool[T]) awaitRunning(grace time.Duration, done chan struct{}) []T {
	if grace > 0 {
		t := time.NewTimer(grace)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	var stragglers []T
	p.mu.Lock()
	for e := p.running.head; e != nil; {
		next := e.next
		// A handler that has returned is finishing: it is waited for
		// below, not counted as a straggler.
		if e.state.CompareAndSwap(stateRunning, stateStraggler) {
			p.running.remove(e)
			p.nrunning--
			stragglers = append(stragglers, e.v)
		}
		e = next
	}
	finishing := p.nrunning > 0
	if !finishing {
		p.stopDone = nil
	}
	p.noteIdleLocked()
	p.mu.Unlock()
	if finishing {
		<-done // bounded by the ResultFunc calls in progress
	}
	return stragglers
}
