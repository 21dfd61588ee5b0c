package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// A dependency outage is not a property of a message. When the database
// behind a class is down every message of the class fails, and retrying
// each one MaxAttempts times and then dead-lettering it only clears the
// way for the next one to fail. So the runtime watches each class's
// failures and, when they look like an outage, suspends the class as a
// whole: it takes no new messages, keeps those it holds in place with
// their attempt counts, and lets one probe at a time retry a held message
// until the dependency is back. Operators can also pause a class by hand.

// Defaults of [SuspendPolicy].
const (
	DefaultSuspendAfter    = 10
	DefaultProbeBackoff    = 250 * time.Millisecond
	DefaultProbeMaxBackoff = 5 * time.Second
	DefaultSuspendWarn     = time.Minute
)

// suspendDistinct is how many distinct messages the failures that
// suspend a class must be of (see [SuspendPolicy]).
const suspendDistinct = 3

// SuspendPolicy says when a class is suspended and how it probes.
//
// The rule: the class is suspended when After attempts (retries
// included) have failed recoverably in a row, with no success of the
// class between them, and those failures are of at least three distinct
// messages (of After, when After is less than three). Counting attempts,
// not only messages, matters when few messages can run at once (one
// worker, or an ordered class whose keys all wait behind failing ones):
// counting only distinct messages, the first messages of an outage would
// run out of attempts and become dead letters before enough others had
// failed. The three distinct messages keep one or two poison messages
// from tripping it however often they are retried: one poison message
// among healthy ones keeps failing while the others succeed, so it never
// trips the rule and becomes a dead letter after its attempts, as before.
// A low steady failure rate does not trip it either: with a fraction p of
// attempts failing independently, After failures in a row happen with
// probability about p^After, 1e-13 for p = 5% and the default 10 (one
// suspension in some thousands of years at 1,000 attempts a second); at p
// = 20% it is 1e-7. With the defaults (MaxAttempts 3) an outage is seen
// at the latest when a fourth message fails, so at most three messages of
// a one-worker class become dead letters before it. A handler that knows its
// dependency is down can say so with [handoff.Unavailable]: that suspends
// the class at once.
//
// Failures that tripped the rule, and every failure while the class is
// suspended, count toward no MaxAttempts: they never make redeliveries or
// dead letters, and never park a key. While suspended, one held message
// at a time is retried (the probe), after ProbeBackoff, doubling up to
// ProbeMaxBackoff, each wait drawn in [d/2, d]; the first success (of the
// probe or of a handler that was running when the suspension began)
// resumes the class at full concurrency. With the defaults a class whose
// outage has ended is flowing again at most 5s (plus the handler's time)
// later. A suspension is not kept across a restart: the next start
// begins unsuspended and detects again.
type SuspendPolicy struct {
	// After is how many attempts must fail recoverably in a row, with no
	// success of the class between them and across at least three
	// distinct messages, to suspend the class.
	// Zero means 10; negative turns the detection off
	// ([handoff.Unavailable] still suspends).
	After int

	// ProbeBackoff is the wait before the first probe of a suspension;
	// each failed probe doubles it up to ProbeMaxBackoff, each wait drawn
	// in [d/2, d]. Zero means 250ms.
	ProbeBackoff time.Duration

	// ProbeMaxBackoff caps the wait between probes: once the dependency is
	// back, the class flows again at most this long (plus a handler's
	// time) later. Zero means 5s.
	ProbeMaxBackoff time.Duration

	// WarnAfter is how long a suspension lasts before it is logged again
	// as a warning, and again each WarnAfter after that (its start and end
	// are always logged). Zero means one minute; negative means never.
	WarnAfter time.Duration
}

func (p *SuspendPolicy) withDefaults() {
	if p.After == 0 {
		p.After = DefaultSuspendAfter
	}
	if p.ProbeBackoff == 0 {
		p.ProbeBackoff = DefaultProbeBackoff
	}
	if p.ProbeMaxBackoff == 0 {
		p.ProbeMaxBackoff = max(DefaultProbeMaxBackoff, p.ProbeBackoff)
	}
	if p.WarnAfter == 0 {
		p.WarnAfter = DefaultSuspendWarn
	}
}

func (p *SuspendPolicy) validate(class string, bad func(string, ...any)) {
	if p.ProbeBackoff < 0 {
		bad("class %q: Suspend.ProbeBackoff must not be negative, got %s", class, p.ProbeBackoff)
	}
	if p.ProbeMaxBackoff < 0 {
		bad("class %q: Suspend.ProbeMaxBackoff must not be negative, got %s", class, p.ProbeMaxBackoff)
	}
	if p.ProbeMaxBackoff > 0 && p.ProbeBackoff > p.ProbeMaxBackoff {
		bad("class %q: Suspend.ProbeBackoff %s is above Suspend.ProbeMaxBackoff %s", class, p.ProbeBackoff, p.ProbeMaxBackoff)
	}
}

// ClassHold is the suspension and pause state of a class, in
// [ClassStats].
type ClassHold struct {
	// State is "running", "suspended" (an outage was detected) or
	// "paused" (by [Runtime.Pause]).
	State string
	// Since is when the current suspension or pause began; zero while
	// running.
	Since time.Time
	// Reason is the pause's reason, or for a suspension what tripped it.
	Reason string
	// LastError is the last handler error of the current suspension, or
	// of the last one once it ended.
	LastError string
	// Probes counts the failed probes of the current suspension.
	Probes int
	// Suspensions counts the suspensions since start; SuspendedSeconds is
	// how long they lasted, the current one included.
	Suspensions      uint64
	SuspendedSeconds float64
}

// Hold states.
const (
	HoldRunning   = "running"
	HoldSuspended = "suspended"
	HoldPaused    = "paused"
)

// itemHold is a message's part in its class's detection: the streak it
// failed in, and how many attempts it had counted in that streak (undone
// if the streak trips), and whether it runs as the probe.
type itemHold struct {
	epoch uint64
	fails int
	probe bool
}

// suspension is a class's outage detection, suspension and pause.
type suspension struct {
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
	// backlog holds the saved messages of a class paused at start that
	// did not fit its held pool; they are pushed when it is resumed.
	backlog []*item
	pushing bool // the backlog is being pushed: fetching still waits
	pushes  sync.WaitGroup
	// skipped is the earliest due time of a delayed message the scheduler
	// left in the state file while the class was held; zero when none.
	skipped time.Time
	// stopping is set at the stop's quiesce: no probe or warning timer is
	// set any more (the stop saves what the class holds).
	stopping bool
}

func (s *suspension) init() {
	s.epoch = 1
	s.tripped = map[uint64]bool{}
	s.changed = make(chan struct{})
}

// signalLocked wakes the fetch loops waiting in mayFetch.
func (s *suspension) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// fetchOpenLocked reports whether the class's partitions may fetch.
func (s *suspension) fetchOpenLocked() bool {
	return (!s.suspended && !s.paused && !s.pushing) || (s.starved && !s.paused)
}

// mayFetch waits while c is suspended or paused and reports whether its
// fetch loop may go on: false when ctx ended first.
func (r *Runtime) mayFetch(ctx context.Context, c *class) bool {
	s := &c.susp
	if !s.held.Load() {
		s.mu.Lock()
		pushing := s.pushing
		s.mu.Unlock()
		if !pushing {
			return true
		}
	}
	for {
		s.mu.Lock()
		open, ch := s.fetchOpenLocked(), s.changed
		s.mu.Unlock()
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

// starting is called by the handler wrapper before it runs it: the
// attempts a tripped streak counted are undone, and in a suspended class
// the message is the probe (a held pool starts nothing else).
func (r *Runtime) starting(c *class, it *item) {
	s := &c.susp
	if it.hold.fails == 0 && !s.held.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uncountLocked(it)
	if s.suspended && !s.paused && s.armed {
		s.armed, s.starved = false, false
		it.hold.probe = true
	}
}

// uncount undoes the attempts it counted in a streak that tripped a
// suspension; the stop calls it for what it saves.
func (r *Runtime) uncount(it *item) {
	if it.hold.fails == 0 {
		return
	}
	c := r.classes[it.msg.Class]
	if c == nil {
		return
	}
	c.susp.mu.Lock()
	c.susp.uncountLocked(it)
	c.susp.mu.Unlock()
}

func (s *suspension) uncountLocked(it *item) {
	if it.hold.fails == 0 || !s.tripped[it.hold.epoch] {
		return
	}
	it.msg.Attempt -= it.hold.fails
	if it.msg.Attempt <= 0 {
		it.msg.Attempt = 0
		it.firstFailed = time.Time{}
	}
	it.hold.fails = 0
}

// heldFailure is called by the retry function for a failed attempt
// before it is counted. It reports true when the failure is not to be
// counted: the class is (or is now) suspended or paused, and the message
// waits in its held pool. Otherwise it notes the failure for the
// detection and the retry policy decides as usual.
func (r *Runtime) heldFailure(c *class, it *item, err error) bool {
	s := &c.susp
	permanent := handoff.IsPermanent(err) || (c.cfg.Retry.PermanentFunc != nil && c.cfg.Retry.PermanentFunc(err))
	s.mu.Lock()
	defer s.mu.Unlock()
	if it.hold.probe {
		it.hold.probe = false
		if s.suspended && !s.paused {
			if permanent {
				// The message is bad, whatever the dependency's state:
				// it becomes a dead letter and another one probes.
				r.armLocked(c)
				return false
			}
			s.probes++
			s.lastErr = err.Error()
			r.scheduleProbeLocked(c)
			return true
		}
	}
	if permanent {
		return false
	}
	if s.suspended || s.paused {
		if s.suspended {
			s.lastErr = err.Error()
		}
		return true
	}
	if handoff.IsUnavailable(err) {
		r.tripLocked(c, err, "handler returned handoff.Unavailable")
		return true
	}
	after := c.cfg.Suspend.After
	if after < 0 {
		return false
	}
	if it.hold.epoch != s.epoch || it.hold.fails == 0 {
		it.hold.epoch, it.hold.fails = s.epoch, 0
		s.streak.Add(1)
	}
	s.fails.Add(1)
	if n, m := int(s.fails.Load()), int(s.streak.Load()); n >= after && m >= min(after, suspendDistinct) {
		r.tripLocked(c, err, fmt.Sprintf("%d attempts of %d messages failed in a row", n, m))
		s.uncountLocked(it)
		return true
	}
	it.hold.fails++ // counted by the caller next
	return false
}

// succeeded is called for every handler that returned nil: it ends the
// streak, and a suspension.
func (r *Runtime) succeeded(c *class, it *item) {
	s := &c.susp
	if s.streak.Load() == 0 && !s.held.Load() && !it.hold.probe {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	it.hold.probe = false
	if s.streak.Load() != 0 {
		s.streak.Store(0)
		s.fails.Store(0)
		s.epoch++
	}
	if s.suspended && !s.paused {
		r.endSuspensionLocked(c, "a handler succeeded")
		r.releaseLocked(c)
	}
}

// inconclusive is called for a probe the handler wrapper did not run (it
// parked or delayed it): another message probes at once.
func (r *Runtime) inconclusive(c *class, it *item) {
	if !it.hold.probe {
		return
	}
	s := &c.susp
	s.mu.Lock()
	defer s.mu.Unlock()
	it.hold.probe = false
	if s.suspended && !s.paused {
		r.armLocked(c)
	}
}

// tripLocked suspends c.
func (r *Runtime) tripLocked(c *class, err error, why string) {
	s := &c.susp
	s.suspended = true
	s.since = time.Now()
	s.reason = why
	s.lastErr = err.Error()
	s.probes = 0
	s.total++
	s.tripped[s.epoch] = true
	s.epoch++
	s.streak.Store(0)
	s.fails.Store(0)
	s.held.Store(true)
	c.pool.Hold()
	r.log.Warn("class suspended: its failures look like a dependency outage; holding its messages and probing",
		"class", c.cfg.Name, "why", why, "err", err)
	r.scheduleProbeLocked(c)
	r.scheduleWarnLocked(c)
	s.signalLocked()
}

// scheduleProbeLocked sets the timer of the next probe: backoff after
// the failed probes so far.
func (r *Runtime) scheduleProbeLocked(c *class) {
	s := &c.susp
	if s.stopping {
		return
	}
	p := &c.cfg.Suspend
	wait := backoff(s.probes+1, p.ProbeBackoff, p.ProbeMaxBackoff, nil)
	if s.probeT != nil {
		s.probeT.Stop()
	}
	s.probeT = time.AfterFunc(wait, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.suspended && !s.paused {
			r.armLocked(c)
		}
	})
}

// armLocked lets one held message of c start as the probe; when the pool
// has none to start, fetching may bring one.
func (r *Runtime) armLocked(c *class) {
	s := &c.susp
	if s.stopping {
		return
	}
	s.armed = true
	if !c.pool.Probe() {
		s.starved = true
		s.signalLocked()
	}
}

func (r *Runtime) scheduleWarnLocked(c *class) {
	s := &c.susp
	every := c.cfg.Suspend.WarnAfter
	if every < 0 || s.stopping {
		return
	}
	since := s.since
	var warn func()
	warn = func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.suspended || s.since != since || s.stopping {
			return
		}
		r.log.Warn("class still suspended", "class", c.cfg.Name, "for", time.Since(since).Round(time.Millisecond),
			"probes", s.probes, "last_err", s.lastErr)
		s.warnT = time.AfterFunc(every, warn)
	}
	s.warnT = time.AfterFunc(every, warn)
}

// endSuspensionLocked ends c's suspension (the pool stays held; see
// releaseLocked).
func (r *Runtime) endSuspensionLocked(c *class, why string) {
	s := &c.susp
	if !s.suspended {
		return
	}
	took := time.Since(s.since)
	s.past += took
	s.suspended, s.armed, s.starved = false, false, false
	for _, t := range []*time.Timer{s.probeT, s.warnT} {
		if t != nil {
			t.Stop()
		}
	}
	s.probeT, s.warnT = nil, nil
	r.log.Warn("class resumed after a suspension", "class", c.cfg.Name, "why", why,
		"suspended_for", took.Round(time.Millisecond), "probes", s.probes, "last_err", s.lastErr)
}

// releaseLocked lets c's pool run again unless it is still suspended or
// paused, pushes a backlog saved while paused, and opens fetching.
func (r *Runtime) releaseLocked(c *class) {
	s := &c.susp
	if s.suspended || s.paused {
		return
	}
	s.since, s.reason = time.Time{}, ""
	s.held.Store(false)
	c.pool.Release()
	if !s.skipped.IsZero() {
		r.sched.wake(s.skipped) // the scheduler reads again from there
		s.skipped = time.Time{}
	}
	if len(s.backlog) > 0 {
		backlog := s.backlog
		s.backlog = nil
		s.pushing = true
		s.pushes.Go(func() { r.pushBacklog(c, backlog) })
	}
	s.signalLocked()
}

// pushBacklog pushes the saved messages that did not fit a class paused
// at start, before fetching resumes (they are older: per-key order). A
// stop ends it: the rest stay in the state file for the next start.
func (r *Runtime) pushBacklog(c *class, its []*item) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.life.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	for _, it := range its {
		if err := c.pool.Submit(ctx, it); err != nil {
			break
		}
	}
	s := &c.susp
	s.mu.Lock()
	s.pushing = false
	s.signalLocked()
	s.mu.Unlock()
}

// Pause stops class from taking and starting messages until
// [Runtime.Resume], also across restarts: the pause is kept in the state
// file. Handlers already running finish; the messages it holds keep their
// place and attempt counts, and a stop saves them as usual. reason is
// kept with the pause and shown by the admin API. Pausing a paused class
// updates its reason. Pause returns [ErrUnknownClass], or
// [ErrNotRunning] when the state file is not open; it blocks only for
// the state-file write.
func (r *Runtime) Pause(ctx context.Context, class, reason string) error {
	c := r.classes[class]
	if c == nil {
		return fmt.Errorf("%w: %q", ErrUnknownClass, class)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	store, err := r.openStore()
	if err != nil {
		return err
	}
	s := &c.susp
	s.mu.Lock()
	defer s.mu.Unlock()
	since := s.since
	if !s.paused {
		since = time.Now()
	}
	p := snapshot.Pause{Reason: reason, Since: since}
	if err := store.Update(func(tx *snapshot.Tx) error { return tx.PutPause(class, p) }); err != nil {
		return fmt.Errorf("runtime: pause class %q: %w", class, err)
	}
	r.pauseLocked(c, p)
	r.log.Warn("class paused", "class", class, "reason", reason)
	return nil
}

func (r *Runtime) pauseLocked(c *class, p snapshot.Pause) {
	s := &c.susp
	r.endSuspensionLocked(c, "paused")
	s.paused = true
	s.since, s.reason = p.Since, p.Reason
	s.held.Store(true)
	c.pool.Hold()
	s.signalLocked()
}

// Resume ends a pause of class, or a suspension (the operator knows the
// dependency is back): it runs at full concurrency again and its
// fetching resumes. Resuming a running class does nothing. Errors are as
// for [Runtime.Pause].
func (r *Runtime) Resume(ctx context.Context, class string) error {
	c := r.classes[class]
	if c == nil {
		return fmt.Errorf("%w: %q", ErrUnknownClass, class)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	store, err := r.openStore()
	if err != nil {
		return err
	}
	s := &c.susp
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused {
		if err := store.Update(func(tx *snapshot.Tx) error { _, err := tx.DeletePause(class); return err }); err != nil {
			return fmt.Errorf("runtime: resume class %q: %w", class, err)
		}
		r.log.Warn("class resumed after a pause", "class", class, "paused_for", time.Since(s.since).Round(time.Millisecond),
			"reason", s.reason)
		s.paused = false
	}
	r.endSuspensionLocked(c, "resumed by an operator")
	r.releaseLocked(c)
	return nil
}

// loadPauses restores the pauses kept in the state file, before the
// recovery pushes anything. A pause of a class no longer configured is
// left in the file with a warning.
func (r *Runtime) loadPauses(store *snapshot.Store) error {
	var pauses map[string]snapshot.Pause
	if err := store.View(func(tx *snapshot.Tx) (err error) { pauses, err = tx.Pauses(); return err }); err != nil {
		return fmt.Errorf("runtime: read pauses: %w", err)
	}
	for name, p := range pauses {
		c := r.classes[name]
		if c == nil {
			r.log.Warn("state file keeps a pause of a class that is not configured; ignored", "class", name)
			continue
		}
		c.susp.mu.Lock()
		r.pauseLocked(c, p)
		c.susp.mu.Unlock()
		r.log.Warn("class is paused (kept in the state file); resume it through the admin API or 'handoff resume'",
			"class", name, "since", p.Since, "reason", p.Reason)
	}
	return nil
}

// repushPaused pushes a saved message of a paused class if its held pool
// has room, and keeps it for the resume otherwise. It reports whether c
// is paused.
func (r *Runtime) repushPaused(c *class, it *item) bool {
	s := &c.susp
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.paused {
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a Submit that finds room does not look at it
	if err := c.pool.Submit(ctx, it); errors.Is(err, context.Canceled) {
		s.backlog = append(s.backlog, it)
	}
	return true
}

// skipHeld reports whether a due delayed message of c is to stay in the
// state file because c is held (paused, or suspended with a message to
// probe): the scheduler does not wait on a held pool, which would hold
// back every other class's delayed messages. The release makes the
// scheduler read again from the earliest one skipped.
func (r *Runtime) skipHeld(c *class, due time.Time) bool {
	s := &c.susp
	if !s.held.Load() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.paused && (!s.suspended || s.starved) {
		return false
	}
	if s.skipped.IsZero() || due.Before(s.skipped) {
		s.skipped = due
	}
	return true
}

// holdStats returns c's ClassHold.
func (c *class) holdStats() ClassHold {
	s := &c.susp
	s.mu.Lock()
	defer s.mu.Unlock()
	h := ClassHold{State: HoldRunning, Since: s.since, Reason: s.reason, LastError: s.lastErr, Probes: s.probes,
		Suspensions: s.total, SuspendedSeconds: s.past.Seconds()}
	switch {
	case s.paused:
		h.State = HoldPaused
	case s.suspended:
		h.State = HoldSuspended
		h.SuspendedSeconds += time.Since(s.since).Seconds()
	}
	return h
}

// quiesceHolds is the stop's quiesce for suspensions and pauses: it
// joins the backlog pushes (fetching and feeding have ended) and stops
// the probe and warning timers; a suspended or paused class stays held,
// so the drain does not wait for it and the stop saves what it holds.
func (r *Runtime) quiesceHolds() {
	for _, c := range r.order {
		s := &c.susp
		s.pushes.Wait()
		s.mu.Lock()
		s.stopping = true
		for _, t := range []*time.Timer{s.probeT, s.warnT} {
			if t != nil {
				t.Stop()
			}
		}
		s.mu.Unlock()
	}
}

// holdCollectors are c's suspension and pause metrics.
func (c *class) holdCollectors(labels prometheus.Labels) []prometheus.Collector {
	s := &c.susp
	read := func(f func() float64) func() float64 {
		return func() float64 { s.mu.Lock(); defer s.mu.Unlock(); return f() }
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_class_suspended",
			Help: "1 while the class is suspended by a detected dependency outage (or handoff.Unavailable).", ConstLabels: labels},
			read(func() float64 { return b2f(s.suspended) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_class_paused",
			Help: "1 while the class is paused by an operator.", ConstLabels: labels},
			read(func() float64 { return b2f(s.paused) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "handoff_class_suspensions_total",
			Help: "Suspensions of the class since start.", ConstLabels: labels},
			read(func() float64 { return float64(s.total) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_class_suspended_seconds",
			Help: "How long the class's current suspension has lasted; 0 when it is not suspended.", ConstLabels: labels},
			read(func() float64 {
				if !s.suspended {
					return 0
				}
				return time.Since(s.since).Seconds()
			})),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "handoff_class_suspended_seconds_total",
			Help: "How long the class's suspensions since start have lasted, the current one included.", ConstLabels: labels},
			read(func() float64 {
				d := s.past
				if s.suspended {
					d += time.Since(s.since)
				}
				return d.Seconds()
			})),
	}
}
