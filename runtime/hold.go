package runtime

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
	"github.com/handoff-go/handoff/pool"
	"github.com/handoff-go/handoff/snapshot"
)

// A class's hold is its outage detection, suspension and pause (see
// SuspendPolicy in suspend.go): while it holds, the class's pool is held
// (pool.Hold), its fetching waits, the scheduler leaves its due messages
// in the state file, and one probe at a time retries a held message.

// holdConfig is what a class's hold is built from.
type holdConfig struct {
	class  string
	policy SuspendPolicy
	// permanent is the class's classifier besides handoff.Permanent; nil
	// for none.
	permanent func(error) bool
	pool      *pool.Pool[*item]
	log       *slog.Logger
	// stopping is closed when a stop is requested: it ends a backlog
	// push.
	stopping <-chan struct{}
	// rewind makes the scheduler read again from a due time: the lift
	// calls it with the earliest due message it skipped.
	rewind func(due time.Time)
}

// itemHold is a message's part in its class's detection: the streak it
// failed in, and how many attempts it had counted in that streak (undone
// if the streak trips), and whether it runs as the probe.
type itemHold struct {
	epoch uint64
	fails int
	probe bool
}

// hold is one class's outage detection, suspension and pause. Its
// methods are safe for concurrent use; the pool's workers call starting,
// failed, succeeded and inconclusive, the fetch loops mayFetch, the
// scheduler skipDue, operators pause and resume, and the stop's quiesce
// stop.
type hold struct {
	cfg holdConfig

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
	// stopping is set by stop: no probe or warning timer is set any more
	// (the stop saves what the class holds).
	stopping bool
}

func newHold(cfg holdConfig) *hold {
	return &hold{cfg: cfg, epoch: 1, tripped: map[uint64]bool{}, changed: make(chan struct{})}
}

// signalLocked wakes the fetch loops waiting in mayFetch.
func (h *hold) signalLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// fetchOpenLocked reports whether the class's partitions may fetch.
func (h *hold) fetchOpenLocked() bool {
	return (!h.suspended && !h.paused && !h.pushing) || (h.starved && !h.paused)
}

// mayFetch waits while the class is suspended or paused and reports
// whether its fetch loop may go on: false when ctx ended first.
func (h *hold) mayFetch(ctx context.Context) bool {
	if !h.held.Load() {
		h.mu.Lock()
		pushing := h.pushing
		h.mu.Unlock()
		if !pushing {
			return true
		}
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

// starting is called by the handler wrapper before it runs it: the
// attempts a tripped streak counted are undone, and in a suspended class
// the message is the probe (a held pool starts nothing else).
func (h *hold) starting(it *item) {
	if it.hold.fails == 0 && !h.held.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.uncountLocked(it)
	if h.suspended && !h.paused && h.armed {
		h.armed, h.starved = false, false
		it.hold.probe = true
	}
}

// uncount undoes the attempts it counted in a streak that tripped a
// suspension; the stop calls it for what it saves.
func (h *hold) uncount(it *item) {
	if it.hold.fails == 0 {
		return
	}
	h.mu.Lock()
	h.uncountLocked(it)
	h.mu.Unlock()
}

func (h *hold) uncountLocked(it *item) {
	if it.hold.fails == 0 || !h.tripped[it.hold.epoch] {
		return
	}
	it.msg.Attempt -= it.hold.fails
	if it.msg.Attempt <= 0 {
		it.msg.Attempt = 0
		it.firstFailed = time.Time{}
	}
	it.hold.fails = 0
}

// failed is called by the retry function for a failed attempt before it
// is counted. It reports true when the failure is not to be counted: the
// class is (or is now) suspended or paused, and the message waits in its
// held pool. Otherwise it notes the failure for the detection and the
// retry policy decides as usual.
func (h *hold) failed(it *item, err error) bool {
	permanent := handoff.IsPermanent(err) || (h.cfg.permanent != nil && h.cfg.permanent(err))
	h.mu.Lock()
	defer h.mu.Unlock()
	if it.hold.probe {
		it.hold.probe = false
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
	after := h.cfg.policy.After
	if after < 0 {
		return false
	}
	if it.hold.epoch != h.epoch || it.hold.fails == 0 {
		it.hold.epoch, it.hold.fails = h.epoch, 0
		h.streak.Add(1)
	}
	h.fails.Add(1)
	if n, m := int(h.fails.Load()), int(h.streak.Load()); n >= after && m >= min(after, suspendDistinct) {
		h.tripLocked(err, fmt.Sprintf("%d attempts of %d messages failed in a row", n, m))
		h.uncountLocked(it)
		return true
	}
	it.hold.fails++ // counted by the caller next
	return false
}

// succeeded is called for every handler that returned nil: it ends the
// streak, and a suspension.
func (h *hold) succeeded(it *item) {
	if h.streak.Load() == 0 && !h.held.Load() && !it.hold.probe {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	it.hold.probe = false
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

// inconclusive is called for a probe the handler wrapper did not run (it
// parked or delayed it): another message probes at once.
func (h *hold) inconclusive(it *item) {
	if !it.hold.probe {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	it.hold.probe = false
	if h.suspended && !h.paused {
		h.armLocked()
	}
}

// tripLocked suspends the class.
func (h *hold) tripLocked(err error, why string) {
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
	h.cfg.pool.Hold()
	h.cfg.log.Warn("class suspended: its failures look like a dependency outage; holding its messages and probing",
		"class", h.cfg.class, "why", why, "err", err)
	h.scheduleProbeLocked()
	h.scheduleWarnLocked()
	h.signalLocked()
}

// scheduleProbeLocked sets the timer of the next probe: backoff after
// the failed probes so far.
func (h *hold) scheduleProbeLocked() {
	if h.stopping {
		return
	}
	p := &h.cfg.policy
	wait := backoff(h.probes+1, p.ProbeBackoff, p.ProbeMaxBackoff, nil)
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
func (h *hold) armLocked() {
	if h.stopping {
		return
	}
	h.armed = true
	if !h.cfg.pool.Probe() {
		h.starved = true
		h.signalLocked()
	}
}

func (h *hold) scheduleWarnLocked() {
	every := h.cfg.policy.WarnAfter
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
		h.cfg.log.Warn("class still suspended", "class", h.cfg.class, "for", time.Since(since).Round(time.Millisecond),
			"probes", h.probes, "last_err", h.lastErr)
		h.warnT = time.AfterFunc(every, warn)
	}
	h.warnT = time.AfterFunc(every, warn)
}

// endSuspensionLocked ends the suspension (the pool stays held; see
// liftLocked).
func (h *hold) endSuspensionLocked(why string) {
	if !h.suspended {
		return
	}
	took := time.Since(h.since)
	h.past += took
	h.suspended, h.armed, h.starved = false, false, false
	h.stopTimersLocked()
	h.cfg.log.Warn("class resumed after a suspension", "class", h.cfg.class, "why", why,
		"suspended_for", took.Round(time.Millisecond), "probes", h.probes, "last_err", h.lastErr)
}

func (h *hold) stopTimersLocked() {
	for _, t := range []*time.Timer{h.probeT, h.warnT} {
		if t != nil {
			t.Stop()
		}
	}
	h.probeT, h.warnT = nil, nil
}

// liftLocked lets the pool run again unless the class is still suspended
// or paused, rewinds the scheduler to what it skipped, pushes a backlog
// saved while paused, and opens fetching.
func (h *hold) liftLocked() {
	if h.suspended || h.paused {
		return
	}
	h.since, h.reason = time.Time{}, ""
	h.held.Store(false)
	h.cfg.pool.Release()
	if !h.skipped.IsZero() {
		h.cfg.rewind(h.skipped) // the scheduler reads again from there
		h.skipped = time.Time{}
	}
	if len(h.backlog) > 0 {
		backlog := h.backlog
		h.backlog = nil
		h.pushing = true
		h.pushes.Go(func() { h.pushBacklog(backlog) })
	}
	h.signalLocked()
}

// pushBacklog pushes the saved messages that did not fit a class paused
// at start, before fetching resumes (they are older: per-key order). A
// stop ends it: the rest stay in the state file for the next start.
func (h *hold) pushBacklog(its []*item) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-h.cfg.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	for _, it := range its {
		if err := h.cfg.pool.Submit(ctx, it); err != nil {
			break
		}
	}
	h.mu.Lock()
	h.pushing = false
	h.signalLocked()
	h.mu.Unlock()
}

// pause pauses the class and keeps the pause in store; see
// [Runtime.Pause]. It blocks for the state-file write.
func (h *hold) pause(store *snapshot.Store, reason string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	since := h.since
	if !h.paused {
		since = time.Now()
	}
	p := snapshot.Pause{Reason: reason, Since: since}
	if err := store.Update(func(tx *snapshot.Tx) error { return tx.PutPause(h.cfg.class, p) }); err != nil {
		return fmt.Errorf("runtime: pause class %q: %w", h.cfg.class, err)
	}
	h.pauseLocked(p)
	h.cfg.log.Warn("class paused", "class", h.cfg.class, "reason", reason)
	return nil
}

func (h *hold) pauseLocked(p snapshot.Pause) {
	h.endSuspensionLocked("paused")
	h.paused = true
	h.since, h.reason = p.Since, p.Reason
	h.held.Store(true)
	h.cfg.pool.Hold()
	h.signalLocked()
}

// resume ends a pause (deleting it from store) or a suspension; see
// [Runtime.Resume].
func (h *hold) resume(store *snapshot.Store) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.paused {
		if err := store.Update(func(tx *snapshot.Tx) error { _, err := tx.DeletePause(h.cfg.class); return err }); err != nil {
			return fmt.Errorf("runtime: resume class %q: %w", h.cfg.class, err)
		}
		h.cfg.log.Warn("class resumed after a pause", "class", h.cfg.class, "paused_for", time.Since(h.since).Round(time.Millisecond),
			"reason", h.reason)
		h.paused = false
	}
	h.endSuspensionLocked("resumed by an operator")
	h.liftLocked()
	return nil
}

// restorePause applies a pause kept in the state file, at start.
func (h *hold) restorePause(p snapshot.Pause) {
	h.mu.Lock()
	h.pauseLocked(p)
	h.mu.Unlock()
	h.cfg.log.Warn("class is paused (kept in the state file); resume it through the admin API or 'handoff resume'",
		"class", h.cfg.class, "since", p.Since, "reason", p.Reason)
}

// loadPauses restores the pauses kept in the state file, before the
// recovery pushes anything. A pause of a class no longer configured is
// left in the file with a warning.
func loadPauses(store *snapshot.Store, classes map[string]*class, log *slog.Logger) error {
	var pauses map[string]snapshot.Pause
	if err := store.View(func(tx *snapshot.Tx) (err error) { pauses, err = tx.Pauses(); return err }); err != nil {
		return fmt.Errorf("runtime: read pauses: %w", err)
	}
	for name, p := range pauses {
		c := classes[name]
		if c == nil {
			log.Warn("state file keeps a pause of a class that is not configured; ignored", "class", name)
			continue
		}
		c.hold.restorePause(p)
	}
	return nil
}

// repushPaused pushes a saved message of a paused class if its held pool
// has room, and keeps it for the resume otherwise. It reports whether the
// class is paused.
func (h *hold) repushPaused(it *item) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.paused {
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a Submit that finds room does not look at it
	if err := h.cfg.pool.Submit(ctx, it); errors.Is(err, context.Canceled) {
		h.backlog = append(h.backlog, it)
	}
	return true
}

// skipDue reports whether a due delayed message of the class is to stay
// in the state file because the class is held (paused, or suspended with
// a message to probe): the scheduler does not wait on a held pool, which
// would hold back every other class's delayed messages. The lift makes
// the scheduler read again from the earliest one skipped.
func (h *hold) skipDue(due time.Time) bool {
	if !h.held.Load() {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.paused && (!h.suspended || h.starved) {
		return false
	}
	if h.skipped.IsZero() || due.Before(h.skipped) {
		h.skipped = due
	}
	return true
}

// stats returns the class's ClassHold.
func (h *hold) stats() ClassHold {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := ClassHold{State: HoldRunning, Since: h.since, Reason: h.reason, LastError: h.lastErr, Probes: h.probes,
		Suspensions: h.total, SuspendedSeconds: h.past.Seconds()}
	switch {
	case h.paused:
		s.State = HoldPaused
	case h.suspended:
		s.State = HoldSuspended
		s.SuspendedSeconds += time.Since(h.since).Seconds()
	}
	return s
}

// stop is the stop's quiesce for the hold: it joins the backlog push
// (fetching and feeding have ended) and stops the probe and warning
// timers; a suspended or paused class stays held, so the drain does not
// wait for it and the stop saves what it holds.
func (h *hold) stop() {
	h.pushes.Wait()
	h.mu.Lock()
	h.stopping = true
	for _, t := range []*time.Timer{h.probeT, h.warnT} {
		if t != nil {
			t.Stop()
		}
	}
	h.mu.Unlock()
}

// collectors are the class's suspension and pause metrics.
func (h *hold) collectors(labels prometheus.Labels) []prometheus.Collector {
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
