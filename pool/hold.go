package pool

// holdState is what [Pool.Hold] sets: while on, no item starts but the
// probes allowed.
type holdState struct {
	on    bool
	probe bool // one item may start although on
}

func (h *holdState) mayStart() bool { return !h.on || h.probe }

// started is told that an item starts: a probe's allowance is used up.
func (h *holdState) started() {
	if h.on {
		h.probe = false
	}
}

// Hold stops the pool from starting items until [Pool.Release]: handlers
// already running go on, accepted items keep their place (and their key's
// turn in an Ordered pool), items sent back by RetryFunc wait out their
// delay and then wait in place too, and Submit still accepts items up to
// QueueSize. [Pool.Drain] counts a held pool idle once no handler runs,
// and [Pool.Stop] hands its items back as usual. Holding a held pool
// takes back a [Pool.Probe] allowance no item has used yet, and does
// nothing else; Hold does not block.
func (p *Pool[T]) Hold() {
	p.mu.Lock()
	p.hold.on = true
	p.hold.probe = false
	p.noteIdleLocked()
	p.mu.Unlock()
}

// Release ends a [Pool.Hold]: up to Workers items start at once. It does
// nothing on a pool that is not held, and does not block.
func (p *Pool[T]) Release() {
	p.mu.Lock()
	if !p.hold.on {
		p.mu.Unlock()
		return
	}
	p.hold = holdState{}
	n := p.dispatchReadyLocked()
	p.mu.Unlock()
	for range n {
		p.dispatch()
	}
}

// Probe lets one item start although the pool is held: the first ready
// one now, or else the first to become ready. A second Probe before that
// item has started allows no more than the first. It reports whether an
// item was ready to start; it does nothing on a pool that is not held or
// stopped, and does not block.
func (p *Pool[T]) Probe() bool {
	p.mu.Lock()
	if !p.hold.on || p.stopped {
		p.mu.Unlock()
		return false
	}
	p.hold.probe = true
	ready := p.hasReadyLocked()
	n := 0
	if ready && p.loops < p.maxWorkers {
		p.addLoopLocked()
		n = 1
	}
	p.mu.Unlock()
	if n > 0 {
		p.dispatch()
	}
	return ready
}

// Held reports whether the pool is held.
func (p *Pool[T]) Held() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hold.on
}

// dispatchReadyLocked counts in loops the worker loops to dispatch for
// the ready items, at most Workers in all, and returns how many.
func (p *Pool[T]) dispatchReadyLocked() int {
	if p.stopped || !p.hasReadyLocked() {
		return 0
	}
	n := 0
	for p.loops < p.maxWorkers {
		p.addLoopLocked()
		n++
	}
	return n
}
