package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// TestPauseFollowedByOtherInstances: with the changelog, a class paused
// through one instance's admin API is paused on every running instance
// of the group within a few seconds, not only on that one (until the
// others' next start), and a resume through another instance resumes it
// on all of them.
func TestPauseFollowedByOtherInstances(t *testing.T) {
	t.Parallel()
	noop := func(string) handoff.HandlerFunc { return func(context.Context, *handoff.Message) error { return nil } }
	rtA, rtB, _ := twoOwners(t, noop, nil)
	hold := func(rt *Runtime) ClassHold { return rt.Stats()[0].Hold }
	if err := rtA.Pause(context.Background(), "orders", "deploy freeze"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b paused through a", func() bool { return hold(rtB).State == HoldPaused })
	if h := hold(rtB); h.Reason != "deploy freeze" {
		t.Errorf("b's pause reason %q, want a's", h.Reason)
	}
	if err := rtB.Resume(context.Background(), "orders"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a resumed through b", func() bool { return hold(rtA).State == HoldRunning })
	if h := hold(rtB); h.State != HoldRunning {
		t.Errorf("b after its own resume: %s", h.State)
	}
}

// TestResumeElsewhereWinsAtRestart: a class paused through instance a,
// then resumed through another instance while a was down, runs when a
// starts again on its own disk: the resume is newer than the pause a's
// state file keeps. Before, a's file kept the class paused on a alone.
func TestResumeElsewhereWinsAtRestart(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	noop := func(context.Context, *handoff.Message) error { return nil }
	state := func(rt *Runtime) string { return rt.Stats()[0].Hold.State }
	diskA := b.state
	rt, wait := startNew(t, b.config(noop, nil))
	waitFor(t, "a ready", rt.Ready)
	if err := rt.Pause(context.Background(), "orders", "deploy freeze"); err != nil {
		t.Fatal(err)
	}
	stopAndWait(t, rt, wait)

	b.state = diskA + ".other"
	rt2, wait2 := startNew(t, b.config(noop, nil))
	waitFor(t, "the other instance ready", rt2.Ready)
	if got := state(rt2); got != HoldPaused {
		t.Fatalf("the other instance: hold %v, want paused", got)
	}
	if err := rt2.Resume(context.Background(), "orders"); err != nil {
		t.Fatal(err)
	}
	stopAndWait(t, rt2, wait2)

	b.state = diskA
	rt3, wait3 := startNew(t, b.config(noop, nil))
	waitFor(t, "a ready again", rt3.Ready)
	if got := state(rt3); got != HoldRunning {
		t.Errorf("a on its own disk after the resume elsewhere: hold %v, want running", got)
	}
	stopAndWait(t, rt3, wait3)

	// And the other way: a pause kept only in a's file (the CLI's
	// offline 'handoff pause', or a pause whose changelog write failed)
	// is newer than the resume, so a keeps it, and tells the group: an
	// instance on a new disk starts paused.
	st, err := snapshot.Open(diskA, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = st.PutPause("orders", snapshot.Pause{Reason: "offline", Since: time.Now()})
	if err := errors.Join(err, st.Close()); err != nil {
		t.Fatal(err)
	}
	rt4, wait4 := startNew(t, b.config(noop, nil))
	waitFor(t, "a ready", rt4.Ready)
	if got := state(rt4); got != HoldPaused {
		t.Errorf("a with a pause in its file newer than the resume: hold %v, want paused", got)
	}
	stopAndWait(t, rt4, wait4)
	b.state = diskA + ".third"
	rt5, wait5 := startNew(t, b.config(noop, nil))
	waitFor(t, "a third instance ready", rt5.Ready)
	if h := rt5.Stats()[0].Hold; h.State != HoldPaused || h.Reason != "offline" {
		t.Errorf("an instance on a new disk after a's offline pause: hold %v (%q), want paused (offline)", h.State, h.Reason)
	}
	stopAndWait(t, rt5, wait5)
}

// TestPauseThenResumeStaysResumed: a pause and a resume made one after
// the other through one instance leave the class running on every
// instance. The instance that made them reads its own two records back
// and applies neither (none is newer than its own last action), where
// applying them in turn paused the class again for as long as the
// follow took to reach the resume.
func TestPauseThenResumeStaysResumed(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	noop := func(context.Context, *handoff.Message) error { return nil }
	logA, repaused := countLogs(t, "class paused through another instance of the group")
	cfgA := b.config(noop, nil)
	cfgA.Logger = logA
	rtA, waitA := b.instance("a", cfgA)
	waitFor(t, "a ready", rtA.Ready)
	rtB, waitB := b.instance("b", b.config(noop, nil))
	waitFor(t, "b ready", rtB.Ready)
	hold := func(rt *Runtime) string { return rt.Stats()[0].Hold.State }
	ctx := context.Background()
	fromA, fromB := rtA.clog.metaNext.Load(), rtB.clog.metaNext.Load()
	if err := rtA.Pause(ctx, "orders", "a moment"); err != nil {
		t.Fatal(err)
	}
	if err := rtA.Resume(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both instances following a's pause and resume", func() bool {
		return rtA.clog.metaNext.Load() >= fromA+2 && rtB.clog.metaNext.Load() >= fromB+2
	})
	if hold(rtA) != HoldRunning || hold(rtB) != HoldRunning {
		t.Errorf("after a pause and a resume through a: a %s, b %s; want both running", hold(rtA), hold(rtB))
	}
	if n := repaused.Load(); n != 0 {
		t.Errorf("a paused again by its own record %d times", n)
	}
	shutdownAndWait(t, rtA, waitA)
	shutdownAndWait(t, rtB, waitB)
}

// TestResumeRightAfterAnotherInstancesPause: a resume through a made
// right after a pause through b, before a saw the pause, wins on both:
// the topic's order decides, and a does not apply b's pause, which its
// own resume follows.
func TestResumeRightAfterAnotherInstancesPause(t *testing.T) {
	t.Parallel()
	noop := func(string) handoff.HandlerFunc { return func(context.Context, *handoff.Message) error { return nil } }
	rtA, rtB, _ := twoOwners(t, noop, nil)
	hold := func(rt *Runtime) string { return rt.Stats()[0].Hold.State }
	ctx := context.Background()
	fromA, fromB := rtA.clog.metaNext.Load(), rtB.clog.metaNext.Load()
	if err := rtB.Pause(ctx, "orders", "b's"); err != nil {
		t.Fatal(err)
	}
	if err := rtA.Resume(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both instances following the pause and the resume", func() bool {
		return rtA.clog.metaNext.Load() >= fromA+2 && rtB.clog.metaNext.Load() >= fromB+2
	})
	if hold(rtA) != HoldRunning || hold(rtB) != HoldRunning {
		t.Errorf("after b's pause and then a's resume: a %s, b %s; want both running", hold(rtA), hold(rtB))
	}
}
