// Package hold is a message class's outage detection, suspension and
// pause: while it holds, the class's pool is held (it starts nothing but
// one probe at a time), its fetching waits, and the scheduler leaves its
// due messages in the state file. It knows the pool and the state file's
// pauses, and nothing of the runtime: the runtime hands it the class's
// pool, policy and logger, and its items carry a Mark.
package hold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// States of a Hold, the State of its Stats.
const (
	Running   = "running"
	Suspended = "suspended"
	Paused    = "paused"
)

// distinct is how many distinct messages the failures that suspend a
// class must be of (see Policy).
const distinct = 3

// Policy says when a class is suspended and how it probes; the runtime's
// SuspendPolicy with its defaults applied (see there).
type Policy struct {
	// After is how many attempts must fail recoverably in a row, across
	// at least three distinct messages, to suspend; negative turns the
	// detection off.
	After int
	// ProbeBackoff and ProbeMaxBackoff bound the waits between probes.
	ProbeBackoff, ProbeMaxBackoff time.Duration
	// WarnAfter is how often a suspension is warned about again;
	// negative means never.
	WarnAfter time.Duration
}

// Pool is what a Hold needs of its class's pool (pool.Pool has it).
type Pool[T any] interface {
	Hold()
	Release()
	Probe() bool
	Submit(ctx context.Context, v T) error
	// SubmitFirst is Submit for saved messages: ahead of waiting Submits,
	// in a lane of its own (see pool.Pool.SubmitFirst).
	SubmitFirst(ctx context.Context, v T) error
}

// Item is what a Hold needs of a pool's item: its Mark, and a way to undo
// attempts the item counted in a streak that tripped a suspension.
type Item interface {
	HoldMark() *Mark
	// Uncount takes n counted attempts back (and the first failure time
	// with them when none is left).
	Uncount(n int)
}

// Mark is an item's part in its class's detection: the streak it failed
// in, and how many attempts it had counted in that streak (undone if the
// streak trips), and whether it runs as the probe. The zero Mark is an
// item that has not failed.
type Mark struct {
	epoch uint64
	fails int32
	probe bool
}

// Stats is a Hold's state, as the runtime's ClassHold shows it.
type Stats struct {
	State            string
	Since            time.Time
	Reason           string
	LastError        string
	Probes           int
	Suspensions      uint64
	SuspendedSeconds float64
}

// Config is what a Hold is built from.
type Config[T Item] struct {
	Class  string
	Policy Policy
	// Permanent is the class's classifier besides handoff.Permanent; nil
	// for none.
	Permanent func(error) bool
	Pool      Pool[T]
	Log       *slog.Logger
	// Stopping is closed when a stop is requested: it ends a backlog
	// push.
	Stopping <-chan struct{}
	// Rewind makes the scheduler read again from a due time: the lift
	// calls it with the earliest due message it skipped.
	Rewind func(due time.Time)
	// Backoff is the wait before probe n (from 1), between initial and
	// max.
	Backoff func(n int, initial, max time.Duration) time.Duration
}

// Hold is one class's outage detection, suspension and pause. Its
// methods are safe for concurrent use; the pool's workers call Starting,
// Failed, Succeeded and Inconclusive, the fetch loops MayFetch, the
// scheduler Deliver, the recovery Repush, operators Pause and Resume, and the stop's quiesce
// Stop.
type Hold[T Item] struct {
	cfg Config[T]

	// Read without the lock on the hot path, written under it.
	streak atomic.Int32 // distinct messages failed since the last success
	fails  atomic.Int32 // attempts failed since the last success
	held   atomic.Bool  // suspended or paused: the pool is held

	mu        sync.Mutex
	epoch     uint64          // the current streak; a success or a trip ends it
	tripped   map[uint64]bool // streaks that tripped a suspension
	suspended bool
	paused    bool
	since     time.Time
	reason    string
	lastErr   string
	probes    int         // failed probes of this suspension
	armed     bool        // pool.Probe was called and no probe has started since
	starved   bool        // armed with nothing in the pool to start: fetch may submit
	probeT    *time.Timer // the next probe
	warnT     *time.Timer // the next repeated warning
	changed   chan struct{}
	total     uint64        // suspensions since start
	past      time.Duration // how long the ended suspensions lasted
	// backlog holds the saved messages the recovery kept while the
	// class was held and its pool full (see Repush); the lift pushes
	// them.
	backlog []T
	// pushing is set while the backlog is being pushed: fetching still
	// waits. Written under mu, read by MayFetch without it.
	pushing atomic.Bool
	pushes  sync.WaitGroup
	// skipped is the earliest due time of a delayed message the scheduler
	// left in the state file while the class was held; zero when none.
	skipped time.Time
	// stopping is set by Stop: no probe or warning timer is set any more
	// (the stop saves what the class holds), and no backlog push starts.
	stopping bool
	// noWait is a cancelled context: a Submit under it returns at once
	// when the pool is full.
	noWait context.Context
}

// New returns the Hold of cfg's class, running.
func New[T Item](cfg Config[T]) *Hold[T] {
	noWait, cancel := context.WithCancel(context.Background())
	cancel()
	return &Hold[T]{cfg: cfg, epoch: 1, tripped: map[uint64]bool{}, changed: make(chan struct{}), noWait: noWait}
}

// signalLocked wakes the fetch loops waiting in MayFetch.
func (h *Hold[T]) signalLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// fetchOpenLocked reports whether the class's partitions may fetch.
func (h *Hold[T]) fetchOpenLocked() bool {
	return (!h.suspended && !h.paused && !h.pushing.Load()) || (h.starved && !h.paused)
}

// MayFetch waits while the class is suspended or paused and reports
// whether its fetch loop may go on: false when ctx ended first.
func (h *Hold[T]) MayFetch(ctx context.Context) bool {
	// Lock-free while the class is open: every fetch loop asks before
	// each record. The lift sets pushing before it clears held, so a
	// loop that sees held cleared sees a push that began with it.
	if !h.held.Load() && !h.pushing.Load() {
		return true
	}
	for {
		h.mu.Lock()
		open, ch := h.fetchOpenLocked(), h.changed
		h.mu.Unlock()
		if open {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// MayFetchNow reports at once, without waiting, whether the class may
// fetch: what MayFetch would say if it did not wait. Lock-free while the
// class is open.
func (h *Hold[T]) MayFetchNow() bool {
	if !h.held.Load() && !h.pushing.Load() {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fetchOpenLocked()
}

// Starting is called by the handler wrapper before it runs it: the
// attempts a tripped streak counted are undone, and in a suspended class
// the message is the probe (a held pool starts nothing else).
func (h *Hold[T]) Starting(it T) {
	m := it.HoldMark()
	if m.fails == 0 && !h.held.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.uncountLocked(it)
	if h.suspended && !h.paused && h.armed {
		h.armed, h.starved = false, false
		m.probe = true
	}
}

// Uncount undoes the attempts it counted in a streak that tripped a
// suspension; the stop calls it for what it saves.
func (h *Hold[T]) Uncount(it T) {
	if it.HoldMark().fails == 0 {
		return
	}
	h.mu.Lock()
	h.uncountLocked(it)
	h.mu.Unlock()
}

func (h *Hold[T]) uncountLocked(it T) {
	m := it.HoldMark()
	if m.fails == 0 || !h.tripped[m.epoch] {
		return
	}
	it.Uncount(int(m.fails))
	m.fails = 0
}

// Failed is called by the retry function for a failed attempt before it
// is counted. It reports true when the failure is not to be counted: the
// class is (or is now) suspended or paused, and the message waits in its
// held pool. Otherwise it notes the failure for the detection and the
// retry policy decides as usual.
func (h *Hold[T]) Failed(it T, err error) bool {
	permanent := handoff.IsPermanent(err) || (h.cfg.Permanent != nil && h.cfg.Permanent(err))
	m := it.HoldMark()
	h.mu.Lock()
	defer h.mu.Unlock()
	if m.probe {
		m.probe = false
		if h.suspended && !h.paused {
			if permanent {
				// The message is bad, whatever the dependency's state:
				// it becomes a dead letter and another one probes.
				h.armLocked()
				return false
			}
			h.probes++
			h.lastErr = err.Error()
			h.scheduleProbeLocked()
			return true
		}
	}
	if permanent {
		return false
	}
	if h.suspended || h.paused {
		if h.suspended {
			h.lastErr = err.Error()
		}
		return true
	}
	if handoff.IsUnavailable(err) {
		h.tripLocked(err, "handler returned handoff.Unavailable")
		return true
	}
	after := h.cfg.Policy.After
	if after < 0 {
		return false
	}
	if m.epoch != h.epoch || m.fails == 0 {
		m.epoch, m.fails = h.epoch, 0
		h.streak.Add(1)
	}
	h.fails.Add(1)
	if n, k := int(h.fails.Load()), int(h.streak.Load()); n >= after && k >= min(after, distinct) {
		h.tripLocked(err, fmt.Sprintf("%d attempts of %d messages failed in a row", n, k))
		h.uncountLocked(it)
		return true
	}
	m.fails++ // counted by the caller next
	return false
}

// Succeeded is called for every handler that returned nil: it ends the
// streak, and a suspension.
func (h *Hold[T]) Succeeded(it T) {
	m := it.HoldMark()
	if h.streak.Load() == 0 && !h.held.Load() && !m.probe {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	m.probe = false
	if h.streak.Load() != 0 {
		h.streak.Store(0)
		h.fails.Store(0)
		h.epoch++
	}
	if h.suspended && !h.paused {
		h.endSuspensionLocked("a handler succeeded")
		h.liftLocked()
	}
}

// Inconclusive is called for a probe the handler wrapper did not run (it
// parked or delayed it): another message probes at once.
func (h *Hold[T]) Inconclusive(it T) {
	m := it.HoldMark()
	if !m.probe {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	m.probe = false
	if h.suspended && !h.paused {
		h.armLocked()
	}
}

// tripLocked suspends the class.
func (h *Hold[T]) tripLocked(err error, why string) {
	h.suspended = true
	h.since = time.Now()
	h.reason = why
	h.lastErr = err.Error()
	h.probes = 0
	h.total++
	h.tripped[h.epoch] = true
	h.epoch++
	h.streak.Store(0)
	h.fails.Store(0)
	h.held.Store(true)
	h.cfg.Pool.Hold()
	h.cfg.Log.Warn("class suspended: its failures look like a dependency outage; holding its messages and probing",
		"class", h.cfg.Class, "why", why, "err", err)
	h.scheduleProbeLocked()
	h.scheduleWarnLocked()
	h.signalLocked()
}

// scheduleProbeLocked sets the timer of the next probe: backoff after
// the failed probes so far.
func (h *Hold[T]) scheduleProbeLocked() {
	if h.stopping {
		return
	}
	p := &h.cfg.Policy
	wait := h.cfg.Backoff(h.probes+1, p.ProbeBackoff, p.ProbeMaxBackoff)
	if h.probeT != nil {
		h.probeT.Stop()
	}
	h.probeT = time.AfterFunc(wait, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.suspended && !h.paused {
			h.armLocked()
		}
	})
}

// armLocked lets one held message start as the probe; when the pool has
// none to start, fetching may bring one.
func (h *Hold[T]) armLocked() {
	if h.stopping {
		return
	}
	h.armed = true
	if h.cfg.Pool.Probe() {
		return
	}
	if len(h.backlog) > 0 && !h.pushing.Load() {
		// Nothing in the pool to probe with, but saved messages wait for
		// the lift: the oldest one probes.
		if err := h.cfg.Pool.SubmitFirst(h.noWait, h.backlog[0]); err == nil {
			h.backlog = h.backlog[1:]
			if h.cfg.Pool.Probe() {
				return
			}
		}
	}
	h.starved = true
	h.signalLocked()
}

func (h *Hold[T]) scheduleWarnLocked() {
	every := h.cfg.Policy.WarnAfter
	if every < 0 || h.stopping {
		return
	}
	since := h.since
	var warn func()
	warn = func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.suspended || h.since != since || h.stopping {
			return
		}
		h.cfg.Log.Warn("class still suspended", "class", h.cfg.Class, "for", time.Since(since).Round(time.Millisecond),
			"probes", h.probes, "last_err", h.lastErr)
		h.warnT = time.AfterFunc(every, warn)
	}
	h.warnT = time.AfterFunc(every, warn)
}

// endSuspensionLocked ends the suspension (the pool stays held; see
// liftLocked).
func (h *Hold[T]) endSuspensionLocked(why string) {
	if !h.suspended {
		return
	}
	took := time.Since(h.since)
	h.past += took
	h.suspended, h.armed, h.starved = false, false, false
	h.stopTimersLocked()
	h.cfg.Log.Warn("class resumed after a suspension", "class", h.cfg.Class, "why", why,
		"suspended_for", took.Round(time.Millisecond), "probes", h.probes, "last_err", h.lastErr)
}

func (h *Hold[T]) stopTimersLocked() {
	for _, t := range []*time.Timer{h.probeT, h.warnT} {
		if t != nil {
			t.Stop()
		}
	}
	h.probeT, h.warnT = nil, nil
}

// liftLocked lets the pool run again unless the class is still suspended
// or paused, rewinds the scheduler to what it skipped, pushes a backlog
// saved while paused (not once Stop ran: the quiesce has ended what feeds
// the pools and joined the pushes, and the backlog stays in the state
// file for the next start), and opens fetching.
func (h *Hold[T]) liftLocked() {
	if h.suspended || h.paused {
		return
	}
	h.since, h.reason = time.Time{}, ""
	// A push under way takes what was added meanwhile. pushing is set
	// before held is cleared: see MayFetch.
	push := len(h.backlog) > 0 && !h.pushing.Load() && !h.stopping
	if push {
		h.pushing.Store(true)
	}
	h.held.Store(false)
	h.cfg.Pool.Release()
	if !h.skipped.IsZero() {
		h.cfg.Rewind(h.skipped) // the scheduler reads again from there
		h.skipped = time.Time{}
	}
	if push {
		backlog := h.backlog
		h.backlog = nil
		h.pushes.Go(func() { h.pushBacklog(backlog) })
	}
	h.signalLocked()
}

// pushBacklog pushes the saved messages the recovery kept for the lift
// (see Repush), and those it adds meanwhile, before fetching resumes
// (they are older: per-key order). It blocks while the pool is full (a
// class held again waits for its next lift). A Stop ends it: the rest
// stay in the state file for the next start.
func (h *Hold[T]) pushBacklog(its []T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-h.cfg.Stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		for _, it := range its {
			if err := h.cfg.Pool.SubmitFirst(ctx, it); err != nil {
				its = nil
				break
			}
		}
		h.mu.Lock()
		its, h.backlog = h.backlog, nil
		if len(its) == 0 || ctx.Err() != nil {
			h.pushing.Store(false)
			h.signalLocked()
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
	}
}

// Pauses is where a pause is kept: the state file ([snapshot.State]).
// Each method blocks for its write.
type Pauses interface {
	PutPause(class string, p snapshot.Pause) error
	DeletePause(class string) (bool, error)
}

// Pause pauses the class and keeps the pause in store (the runtime's
// Pause says what a pause does). It blocks for the state-file write.
func (h *Hold[T]) Pause(store Pauses, reason string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	since := h.since
	if !h.paused {
		since = time.Now()
	}
	p := snapshot.Pause{Reason: reason, Since: since}
	if err := store.PutPause(h.cfg.Class, p); err != nil {
		return fmt.Errorf("runtime: pause class %q: %w", h.cfg.Class, err)
	}
	h.pauseLocked(p)
	h.cfg.Log.Warn("class paused", "class", h.cfg.Class, "reason", reason)
	return nil
}

func (h *Hold[T]) pauseLocked(p snapshot.Pause) {
	h.endSuspensionLocked("paused")
	h.paused = true
	h.since, h.reason = p.Since, p.Reason
	h.held.Store(true)
	h.cfg.Pool.Hold()
	h.signalLocked()
}

// PauseFrom applies p, a pause made through another instance of the
// group, to a class not paused here, and keeps it in store. It blocks
// for the state-file write.
func (h *Hold[T]) PauseFrom(store Pauses, p snapshot.Pause) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.paused {
		return nil
	}
	if err := store.PutPause(h.cfg.Class, p); err != nil {
		return fmt.Errorf("runtime: pause class %q: %w", h.cfg.Class, err)
	}
	h.pauseLocked(p)
	h.cfg.Log.Warn("class paused through another instance of the group", "class", h.cfg.Class, "since", p.Since, "reason", p.Reason)
	return nil
}

// Resume ends a pause (deleting it from store) or a suspension. It
// blocks for the state-file write.
func (h *Hold[T]) Resume(store Pauses) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.paused {
		if _, err := store.DeletePause(h.cfg.Class); err != nil {
			return fmt.Errorf("runtime: resume class %q: %w", h.cfg.Class, err)
		}
		h.cfg.Log.Warn("class resumed after a pause", "class", h.cfg.Class, "paused_for", time.Since(h.since).Round(time.Millisecond),
			"reason", h.reason)
		h.paused = false
	}
	h.endSuspensionLocked("resumed by an operator")
	h.liftLocked()
	return nil
}

// Paused returns the class's pause, if it is paused.
func (h *Hold[T]) Paused() (snapshot.Pause, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return snapshot.Pause{Reason: h.reason, Since: h.since}, h.paused
}

// RestorePause applies a pause kept in the state file (inFile) or in the
// changelog's meta topic, at start.
func (h *Hold[T]) RestorePause(p snapshot.Pause, inFile bool) {
	h.mu.Lock()
	h.pauseLocked(p)
	h.mu.Unlock()
	msg := "class is paused (kept in the state file); resume it through the admin API or 'handoff resume'"
	if !inFile {
		msg = "class is paused (kept in the changelog's meta topic, paused through an instance of the group); resume it through the admin API"
	}
	h.cfg.Log.Warn(msg, "class", h.cfg.Class, "since", p.Since, "reason", p.Reason)
}

// Repush hands a saved message to the class's pool during the recovery,
// ahead of the class's fresh records waiting for room (pool.SubmitFirst),
// so a restore does not wait behind work fetched after it. While the class is held (suspended or paused) and its pool is full, it
// keeps the message in the backlog instead of waiting for room, and so
// every later one until the backlog has been pushed (per-key order): the
// lift pushes them, before fetching resumes. A class that is not held is
// waited for while its pool is full, until ctx ends or the class becomes
// held. So one class's outage during a restart does not hold back the
// recovery of the others. It returns ctx's error when ctx ended first,
// and the pool's once it is stopped.
func (h *Hold[T]) Repush(ctx context.Context, it T) error {
	for {
		h.mu.Lock()
		if h.pushing.Load() || len(h.backlog) > 0 {
			h.backlog = append(h.backlog, it)
			h.mu.Unlock()
			return nil
		}
		// A Submit that finds room does not look at its ctx.
		if err := h.cfg.Pool.SubmitFirst(h.noWait, it); !errors.Is(err, context.Canceled) {
			h.mu.Unlock()
			return err
		}
		if h.suspended || h.paused {
			h.backlog = append(h.backlog, it)
			h.mu.Unlock()
			return nil
		}
		changed := h.changed
		h.mu.Unlock()
		if handed, err := h.submitUntil(ctx, h.cfg.Pool.SubmitFirst, it, changed); handed || err != nil {
			return err
		}
	}
}

// submitUntil waits for room in the pool through submit (the pool's
// Submit or SubmitFirst), until ctx ends or the hold changes (changed is
// closed: the class may be held now). It reports whether it handed it
// over; the error is ctx's or the pool's, nil when the hold changed first.
func (h *Hold[T]) submitUntil(ctx context.Context, submit func(context.Context, T) error, it T, changed <-chan struct{}) (bool, error) {
	wait, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-changed:
			cancel()
		case <-wait.Done():
		}
	}()
	err := submit(wait, it)
	if err == nil {
		return true, nil
	}
	if ctx.Err() != nil || !errors.Is(err, context.Canceled) {
		return false, err
	}
	return false, nil
}

// Deliver hands a due delayed message to the pool and reports whether it
// did. It never waits on a held pool, which would hold back every other
// class's delayed messages: a suspended class takes it only to probe
// with (its probe found nothing ready) and only into room; a paused one
// never. A message not taken stays in the state file, and the lift makes
// the scheduler read again from the earliest one (Config.Rewind). A
// class that runs is waited for while its pool is full, until ctx ends
// (ctx's error) or the class becomes held.
func (h *Hold[T]) Deliver(ctx context.Context, it T, due time.Time) (bool, error) {
	for {
		h.mu.Lock()
		if h.suspended || h.paused {
			handed := !h.paused && h.starved && h.cfg.Pool.Submit(h.noWait, it) == nil
			if !handed && (h.skipped.IsZero() || due.Before(h.skipped)) {
				h.skipped = due
			}
			h.mu.Unlock()
			return handed, nil
		}
		if err := h.cfg.Pool.Submit(h.noWait, it); !errors.Is(err, context.Canceled) {
			h.mu.Unlock()
			return err == nil, err
		}
		changed := h.changed
		h.mu.Unlock()
		if handed, err := h.submitUntil(ctx, h.cfg.Pool.Submit, it, changed); handed || err != nil {
			return handed, err
		}
	}
}

// Stats returns the hold's state.
func (h *Hold[T]) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := Stats{State: Running, Since: h.since, Reason: h.reason, LastError: h.lastErr, Probes: h.probes,
		Suspensions: h.total, SuspendedSeconds: h.past.Seconds()}
	switch {
	case h.paused:
		s.State = Paused
	case h.suspended:
		s.State = Suspended
		s.SuspendedSeconds += time.Since(h.since).Seconds()
	}
	return s
}

// Stop is the stop's quiesce for the hold: it joins the backlog push
// (fetching and feeding have ended) and stops the probe and warning
// timers; a suspended or paused class stays held, so the drain does not
// wait for it and the stop saves what it holds. A Resume after it
// releases the pool but pushes no backlog.
func (h *Hold[T]) Stop() {
	h.mu.Lock()
	h.stopping = true // before the join: a lift meanwhile starts no push
	h.mu.Unlock()
	h.pushes.Wait()
	h.mu.Lock()
	for _, t := range []*time.Timer{h.probeT, h.warnT} {
		if t != nil {
			t.Stop()
		}
	}
	if h.armed {
		// A probe allowed and not started yet would start during the
		// stop, and the drain would wait for it: holding the pool again
		// takes the allowance back.
		h.armed, h.starved = false, false
		h.cfg.Pool.Hold()
	}
	h.mu.Unlock()
}

// Collectors are the class's suspension and pause metrics.
func (h *Hold[T]) Collectors(labels prometheus.Labels) []prometheus.Collector {
	read := func(f func() float64) func() float64 {
		return func() float64 { h.mu.Lock(); defer h.mu.Unlock(); return f() }
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_class_suspended",
			Help: "1 while the class is suspended by a detected dependency outage (or handoff.Unavailable).", ConstLabels: labels},
			read(func() float64 { return b2f(h.suspended) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_class_paused",
			Help: "1 while the class is paused by an operator.", ConstLabels: labels},
			read(func() float64 { return b2f(h.paused) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "handoff_class_suspensions_total",
			Help: "Suspensions of the class since start.", ConstLabels: labels},
			read(func() float64 { return float64(h.total) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_class_suspended_seconds",
			Help: "How long the class's current suspension has lasted; 0 when it is not suspended.", ConstLabels: labels},
			read(func() float64 {
				if !h.suspended {
					return 0
				}
				return time.Since(h.since).Seconds()
			})),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "handoff_class_suspended_seconds_total",
			Help: "How long the class's suspensions since start have lasted, the current one included.", ConstLabels: labels},
			read(func() float64 {
				d := h.past
				if h.suspended {
					d += time.Since(h.since)
				}
				return d.Seconds()
			})),
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
