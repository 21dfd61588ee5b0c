package pool

import "time"

// retryLocked takes e, whose attempt RetryFunc sent back, off the running
// list and has it wait out after without a worker. It counts against
// QueueSize again, even if that takes the pool over it (a retry never waits
// for room). In an Ordered pool its key stays busy: the items behind it
// stay queued. Once Stop has begun no timer is set: Stop returns e in
// Waiting.
func (p *Pool[T]) retryLocked(e *entry[T], after time.Duration) {
	p.running.remove(e)
	p.nrunning--
	p.waiting.pushBack(e)
	p.queued++
	p.nwaiting++
	e.state.Store(stateWaiting)
	if p.stopped {
		e.keyNext = nil // Stop has taken the items behind it
	} else {
		p.timerWG.Add(1)
		p.timers[e] = retryTimer{t: time.AfterFunc(after, func() { p.wake(e) }), due: p.clock() + int64(after)}
	}
	p.leftRunningLocked()
}

// wake is e's retry timer callback: e is ready again, ahead of the items
// accepted after it, and a worker loop is dispatched if one may start.
// Once Stop has begun it does nothing: e belongs to Stop's result.
func (p *Pool[T]) wake(e *entry[T]) {
	defer p.timerWG.Done()
	if p.testHookWake != nil {
		p.testHookWake()
	}
	p.mu.Lock()
	if p.stopped || e.state.Load() != stateWaiting {
		// Stop has begun, or Remove has taken e.
		p.mu.Unlock()
		return
	}
	delete(p.timers, e)
	p.waiting.remove(e)
	p.nwaiting--
	e.state.Store(stateQueued)
	if p.ordered {
		p.requeueLocked(e)
		p.ready.promoted.push(e) // still its key's head; its seq puts it first
	} else {
		// Every other unstarted item was accepted after e started, but
		// for other woken ones.
		p.unstarted.insertBefore(e, p.unstarted.head)
	}
	p.readyAddedLocked()
	dispatch := p.loops < p.maxWorkers && (p.batchFunc == nil || !p.filling)
	if dispatch {
		p.addLoopLocked()
	}
	p.mu.Unlock()
	if dispatch {
		p.dispatch()
	}
}

// requeueLocked puts woken e back on the unstarted list of an Ordered pool
// in acceptance order, so that Stop hands items back in submission order,
// and in any case before the next item of its key, even if seq has wrapped
// past what before can compare.
func (p *Pool[T]) requeueLocked(e *entry[T]) {
	at := p.unstarted.head
	for at != nil && at != e.keyNext && before(at.seq, e.seq) {
		at = at.next
	}
	p.unstarted.insertBefore(e, at)
}

// takeWaitingLocked is for Stop: it stops the retry timers and appends the
// waiting items to dst, in the order they began waiting. A timer callback
// already running finds the pool stopped and leaves its item alone.
func (p *Pool[T]) takeWaitingLocked(dst []T) []T {
	for e := p.waiting.head; e != nil; {
		next := e.next
		if t := p.timers[e].t; t != nil && t.Stop() {
			p.timerWG.Done() // its callback will never run
		}
		e.prev, e.next, e.keyNext = nil, nil, nil
		e.state.Store(stateTaken)
		dst = append(dst, e.v)
		e = next
	}
	clear(p.timers)
	p.waiting = list[T]{}
	p.queued -= p.nwaiting
	p.nwaiting = 0
	return dst
}
