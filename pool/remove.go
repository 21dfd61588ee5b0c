package pool

// Remove takes out of the pool every item that has not started, or is
// waiting out a retry delay, and for which match returns true, and returns
// them: waiting ones first, in the order they began waiting, then
// unstarted ones in submission order. Their handlers will not run; neither
// ResultFunc nor RetryFunc is called for them, and they are counted
// nowhere in [Stats]. Running items are never taken. match is called with
// the pool's lock held: it must be quick and must not call the pool.
//
// In an Ordered pool the items left keep their per-key order: an item
// whose predecessors of its key were all removed becomes ready. Room freed
// goes to waiting Submits. Remove does not block on handlers and is safe
// for concurrent use; after [Pool.Stop] it returns nil.
func (p *Pool[T]) Remove(match func(T) bool) []T {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return nil
	}
	var gone []*entry[T]
	for e := p.waiting.head; e != nil; e = e.next {
		if match(e.v) {
			gone = append(gone, e)
		}
	}
	nwaiting := len(gone)
	for e := p.unstarted.head; e != nil; e = e.next {
		if match(e.v) {
			gone = append(gone, e)
		}
	}
	if len(gone) == 0 {
		p.mu.Unlock()
		return nil
	}
	ready := 0
	if p.ordered {
		ready = p.unlinkKeysLocked(gone)
	}
	out := make([]T, len(gone))
	for i, e := range gone {
		if i < nwaiting {
			if t := p.timers[e].t; t != nil && t.Stop() {
				p.timerWG.Done() // its callback will never run
			}
			delete(p.timers, e)
			p.waiting.remove(e)
			p.nwaiting--
		} else {
			p.unstarted.remove(e)
		}
		p.queued--
		e.keyNext, e.readyNext = nil, nil
		e.state.Store(stateTaken)
		out[i] = e.v
	}
	dispatch := 0
	for ; ready > 0 && p.loops < p.maxWorkers; ready-- {
		p.addLoopLocked()
		dispatch++
	}
	if ready > 0 || dispatch > 0 {
		p.readyAddedLocked()
	}
	dispatch += p.grantLocked()
	p.noteIdleLocked()
	p.mu.Unlock()
	for range dispatch {
		p.dispatch()
	}
	return out
}

// unlinkKeysLocked takes gone out of their keys' chains and out of the
// ready set of an Ordered pool, and makes ready each item that becomes the
// head of its key. It returns how many it made ready.
func (p *Pool[T]) unlinkKeysLocked(gone []*entry[T]) int {
	isGone := make(map[*entry[T]]bool, len(gone))
	keys := map[uint64]bool{}
	for _, e := range gone {
		isGone[e] = true
		keys[e.key] = true
	}
	// The items of the affected keys, and which of them follow another:
	// the others head their key's chain.
	var members []*entry[T]
	follows := map[*entry[T]]bool{}
	for _, l := range []*list[T]{&p.running, &p.waiting, &p.unstarted} {
		for e := l.head; e != nil; e = e.next {
			if keys[e.key] {
				members = append(members, e)
				if e.keyNext != nil {
					follows[e.keyNext] = true
				}
			}
		}
	}
	var newHeads []*entry[T]
	for _, head := range members {
		if follows[head] {
			continue
		}
		var last *entry[T]
		for e := head; e != nil; {
			next := e.keyNext
			if isGone[e] {
				e = next
				continue
			}
			if last != nil {
				last.keyNext = e
			} else if isGone[head] && e.state.Load() == stateQueued {
				newHeads = append(newHeads, e)
			}
			e.keyNext = nil
			last = e
			e = next
		}
		if last == nil {
			delete(p.keys, head.key)
		} else {
			p.keys[head.key] = last
		}
	}
	// Rebuild the ready set without the gone items.
	fresh, promoted := p.ready.fresh, p.ready.promoted
	p.ready.fresh = fifo[T]{}
	p.ready.promoted = nil
	for e := fresh.head; e != nil; {
		next := e.readyNext
		if !isGone[e] {
			p.ready.fresh.push(e)
		}
		e = next
	}
	for _, it := range promoted {
		if !isGone[it.e] {
			p.ready.promoted.push(it.e)
		}
	}
	for _, e := range newHeads {
		p.ready.promoted.push(e)
	}
	return len(newHeads)
}
