package runtime

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Liveness: the loops that must keep turning while the runtime runs (the
// drain-budget watcher, the state file deleter, each generation's
// committer) beat on every turn; Alive names the ones that stopped. A
// liveness probe on it restarts a process whose loops are stuck (a
// deadlock, a write that never returns), not only one whose process is
// gone.

// aliveMinWindow is the least time a loop may go without a beat before
// Alive reports it; a loop's window is also at least aliveTurns of its
// intervals.
const (
	aliveMinWindow = 30 * time.Second
	aliveTurns     = 10
)

// ErrNotAlive is wrapped by the error [Runtime.Alive] returns when a loop
// of the runtime has stopped turning.
var ErrNotAlive = errors.New("runtime: not alive")

// liveness is the set of loops that beat. The zero value is ready.
type liveness struct {
	mu    sync.Mutex
	loops map[*loopBeat]struct{}
	// stall, when set by a test, runs in every beat with the loop's name
	// (a test blocks in it to stall a loop).
	stall func(name string)
}

// loopBeat is one running loop's heartbeat.
type loopBeat struct {
	l      *liveness
	name   string
	window time.Duration
	last   atomic.Int64 // UnixNano of the last beat
}

// start registers a loop that turns every interval; it counts as turned
// now. The loop calls beat on each turn and end when it returns.
func (l *liveness) start(name string, every time.Duration) *loopBeat {
	b := &loopBeat{l: l, name: name, window: max(aliveMinWindow, aliveTurns*every)}
	b.last.Store(time.Now().UnixNano())
	l.mu.Lock()
	if l.loops == nil {
		l.loops = map[*loopBeat]struct{}{}
	}
	l.loops[b] = struct{}{}
	l.mu.Unlock()
	return b
}

// beat records a turn of the loop.
func (b *loopBeat) beat() {
	if b.l.stall != nil {
		b.l.stall(b.name)
	}
	b.last.Store(time.Now().UnixNano())
}

// end removes the loop: it returned.
func (b *loopBeat) end() {
	b.l.mu.Lock()
	delete(b.l.loops, b)
	b.l.mu.Unlock()
}

// stale returns an error naming each loop whose last beat is older than
// its window at now, or nil.
func (l *liveness) stale(now time.Time) error {
	l.mu.Lock()
	var late []string
	for b := range l.loops {
		if since := now.Sub(time.Unix(0, b.last.Load())); since > b.window {
			late = append(late, fmt.Sprintf("%s has not turned for %s (window %s)", b.name, since.Round(time.Second), b.window))
		}
	}
	l.mu.Unlock()
	if len(late) == 0 {
		return nil
	}
	slices.Sort(late)
	return fmt.Errorf("%w: %s", ErrNotAlive, strings.Join(late, "; "))
}

// Alive reports whether the runtime's loops are turning: it returns an
// error wrapping [ErrNotAlive] that names every loop (the drain-budget
// watcher, the state file deleter, the dead-letter retention, a
// generation's committer) that has
// not turned within its window (10 of its intervals, at least 30s), and nil otherwise. Before
// Run, once a stop has begun (the stop is bounded by its own budget) and
// after Run returned it is nil. It does not block and is safe for
// concurrent use; the admin package serves it on /livez.
func (r *Runtime) Alive() error {
	if r.life.state.Load() != stateRunning {
		return nil
	}
	select {
	case <-r.life.stopCh:
		return nil
	default:
	}
	return r.alive.stale(time.Now())
}
