package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/hold"
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
// Each class's hold (package runtime/internal/hold) does all of it.

// Defaults of [SuspendPolicy].
const (
	DefaultSuspendAfter    = 10
	DefaultProbeBackoff    = 250 * time.Millisecond
	DefaultProbeMaxBackoff = 5 * time.Second
	DefaultSuspendWarn     = time.Minute
)

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
// the class at once. A failure whose error is [ErrNotRunning] once the
// stop has begun (a Submit the stop refused) is the stop's, not a
// dependency's: it counts toward nothing (see [OutcomeInterrupted]).
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
	HoldRunning   = hold.Running
	HoldSuspended = hold.Suspended
	HoldPaused    = hold.Paused
)

// Pause stops class from taking and starting messages until
// [Runtime.Resume], also across restarts: the pause is kept in the state
// file. Handlers already running finish; the messages it holds keep their
// place and attempt counts, and a stop saves them as usual. reason is
// kept with the pause and shown by the admin API. Pausing a paused class
// updates its reason. Pause returns [ErrUnknownClass], or
// [ErrNotRunning] when the state file is not open; it blocks for the
// state-file write and, with the changelog, for the meta topic's.
//
// With the changelog (Config.LocalStateOnly off) a pause is the class's
// in the whole group: it is also written to the changelog's meta topic,
// every running instance pauses the class within about a second, and an
// instance that starts later starts paused, on a new disk too.
func (r *Runtime) Pause(ctx context.Context, class, reason string) error {
	c, store, err := holdTarget(ctx, r.classes.byName, r.state, class)
	if err != nil {
		return err
	}
	err = r.clog.pauseChange(class, func() error { return c.hold.Pause(store, reason) }, func(at time.Time) (int64, error) {
		p, _ := c.hold.Paused()
		return r.clog.putPause(ctx, class, &p, at)
	})
	if errors.Is(err, errMetaWrite) {
		return fmt.Errorf("runtime: pause class %q: paused here, but not kept for the other instances: %w", class, err)
	}
	return err
}

// Resume ends a pause of class, or a suspension (the operator knows the
// dependency is back): it runs at full concurrency again and its
// fetching resumes. Resuming a running class does nothing. Errors are as
// for [Runtime.Pause]. With the changelog the resume is the group's as
// the pause is: every running instance resumes the class within about a
// second, and an instance down meanwhile lifts the pause its state file
// kept from before the resume at its next start.
func (r *Runtime) Resume(ctx context.Context, class string) error {
	c, store, err := holdTarget(ctx, r.classes.byName, r.state, class)
	if err != nil {
		return err
	}
	err = r.clog.pauseChange(class, func() error { return c.hold.Resume(store) }, func(at time.Time) (int64, error) {
		return r.clog.putPause(ctx, class, nil, at)
	})
	if errors.Is(err, errMetaWrite) {
		return fmt.Errorf("runtime: resume class %q: resumed here, but the pause is still kept for the other instances: %w", class, err)
	}
	return err
}

// holdTarget returns the class named name and the open state file, for
// Pause and Resume.
func holdTarget(ctx context.Context, classes map[string]*class, state *stateFile, name string) (*class, *snapshot.State, error) {
	c := classes[name]
	if c == nil {
		return nil, nil, fmt.Errorf("%w: %q", ErrUnknownClass, name)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	store, err := state.get()
	if err != nil {
		return nil, nil, err
	}
	return c, store, nil
}

// loadPauses restores the pauses kept in the state file, before the
// recovery pushes anything. A pause of a class no longer configured is
// left in the file with a warning.
func loadPauses(store *snapshot.State, classes map[string]*class, log *slog.Logger) error {
	pauses, err := savedPauses(store)
	if err != nil {
		return fmt.Errorf("runtime: read pauses: %w", err)
	}
	for name, p := range pauses {
		c := classes[name]
		if c == nil {
			log.Warn("state file keeps a pause of a class that is not configured; ignored", "class", name)
			continue
		}
		c.hold.RestorePause(p, true)
	}
	return nil
}
