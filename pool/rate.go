package pool

import "time"

// paceLocked is a worker loop's wait for the tokens of the items it is
// about to start, in a pool with a Rate (Config.Rate), entered and left
// with mu held. It reserves tokens for up to most ready items (no more
// than Burst, one while the pool is held, and none of the ready items
// that loops already waiting for their tokens will take) and waits for
// them with mu released, the items still queued. It returns how many
// items the loop may start and the clock after the wait (their start
// time: the wait is not running time). ok false means the loop exits:
// nothing is ready for it, or Stop began during the wait (the tokens are
// given back as far as the limiter can, and the items stay for Stop to
// hand back as unstarted).
func (p *Pool[T]) paceLocked(most int, now int64) (n int, at int64, ok bool) {
	if !p.hasReadyLocked() {
		return 0, now, false
	}
	if p.hold.on {
		most = 1 // a held pool starts one probe
	}
	n = min(most, p.burst, p.readyLenLocked()-p.paced)
	if n <= 0 {
		return 0, now, false // the loops waiting for tokens take them
	}
	r := p.limiter.ReserveN(time.Now(), n) // n <= Burst: always OK
	d := r.Delay()
	if d <= 0 {
		return n, now, true
	}
	p.paced += n
	p.mu.Unlock()
	t := time.NewTimer(d)
	stopped := false
	select {
	case <-t.C:
	case <-p.stopCh:
		t.Stop()
		r.Cancel()
		stopped = true
	}
	p.mu.Lock()
	p.paced -= n
	if stopped {
		return 0, now, false
	}
	return n, p.clock(), true
}
