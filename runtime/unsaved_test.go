package runtime

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

var errDiskFull = errors.New("test: disk full")

// TestSubmittedKeptWhenSaveFails: a submitted message that fails for good
// while the state file refuses its dead-letter write has no other copy
// (no Kafka offset, no record): it is kept in memory and the write
// retried until it succeeds, or the stop's snapshot saves it to pending
// and the next start runs it.
func TestSubmittedKeptWhenSaveFails(t *testing.T) {
	t.Parallel()
	// run starts a runtime whose class fails every message for good
	// unless fixed, and whose moves fail while fail says so. It returns
	// the runtime, a function that stops it and returns its report, and
	// the count of failed writes.
	run := func(t *testing.T, state string, fail func() bool, fixed bool, handled chan<- string) (*Runtime, func() *Report, *atomic.Int64) {
		log, failedWrites := countLogs(t, "state file write failed; offset stays uncommitted")
		rt, err := newRuntime(Config{StatePath: state, Logger: log, Classes: []Class{{Name: "mail", Workers: 1,
			Handler: func(_ context.Context, m *handoff.Message) error {
				if !fixed {
					return handoff.Permanent(errors.New("template missing"))
				}
				handled <- m.ID
				return nil
			}}}})
		if err != nil {
			t.Fatal(err)
		}
		rt.state.beforeWrite = func(string, *item) error {
			if fail() {
				return errDiskFull
			}
			return nil
		}
		wait := start(t, rt, context.Background())
		waitFor(t, "running", rt.Ready)
		stop := func() *Report {
			rt.Shutdown(context.Background())
			rep, err := wait()
			if err != nil {
				t.Fatal(err)
			}
			return rep
		}
		return rt, stop, failedWrites
	}
	submit := func(t *testing.T, rt *Runtime) {
		if err := rt.Submit(context.Background(), "mail", &handoff.Message{ID: "welcome-42"}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("saved by the stop", func(t *testing.T) {
		t.Parallel()
		state := filepath.Join(t.TempDir(), "s.db")
		rt, stop, failedWrites := run(t, state, func() bool { return true }, false, nil)
		submit(t, rt)
		waitFor(t, "the dead-letter write failing", func() bool { return failedWrites.Load() > 0 })
		if rep := stop(); rep.Held != 1 || rep.Snapshotted != 1 || rep.DeadLettered != 0 {
			t.Errorf("held %d, snapshotted %d, dead lettered %d; want 1, 1, 0", rep.Held, rep.Snapshotted, rep.DeadLettered)
		}
		assertPending(t, state, 1)
		handled := make(chan string, 1)
		_, stop2, _ := run(t, state, func() bool { return false }, true, handled)
		select {
		case id := <-handled:
			if id != "welcome-42" {
				t.Errorf("handled %s", id)
			}
		case <-time.After(30 * time.Second):
			t.Error("the message was not handled after the restart")
		}
		stop2()
		assertPending(t, state, 0)
	})

	t.Run("saved when the write recovers", func(t *testing.T) {
		t.Parallel()
		state := filepath.Join(t.TempDir(), "s.db")
		var tries atomic.Int64
		rt, stop, _ := run(t, state, func() bool { return tries.Add(1) <= 3 }, false, nil)
		submit(t, rt)
		waitFor(t, "the dead letter saved", func() bool { dl, _, _ := rt.DeadLetters("mail", "", 10); return len(dl) == 1 })
		if rep := stop(); rep.Held != 1 || rep.DeadLettered != 1 || rep.Snapshotted != 0 {
			t.Errorf("held %d, dead lettered %d, snapshotted %d; want 1, 1, 0", rep.Held, rep.DeadLettered, rep.Snapshotted)
		}
		assertPending(t, state, 0)
	})
}

// TestUnsavedBlocksItsKey: in an ordered class, a submitted message that
// fails for good while the state file refuses its dead-letter write is
// kept unsaved, and its key is blocked meanwhile: a later message of the
// key, submitted while the write is retried, is parked behind it rather
// than run first, as it would be behind the dead letter once saved. When
// the write never succeeds the stop saves the first to pending, and the
// next start runs it before the parked one. Before, the key was blocked
// only once the save succeeded: the later message ran while the earlier
// one was unsaved.
func TestUnsavedBlocksItsKey(t *testing.T) {
	t.Parallel()
	key := []byte("customer-7")
	// run starts an ordered class whose handler fails "first" for good
	// unless fixed, and whose writes for "first" fail while failing is
	// set; it sends each message that succeeds to ran.
	run := func(t *testing.T, state string, fixed bool, failing *atomic.Bool, ran chan<- string) (*Runtime, func() (*Report, error)) {
		rt, err := newRuntime(Config{StatePath: state, Logger: testLogger(t),
			Classes: []Class{{Name: "mail", Workers: 2, Ordered: true,
				Handler: func(_ context.Context, m *handoff.Message) error {
					if m.ID == "first" && !fixed {
						return handoff.Permanent(errors.New("template missing"))
					}
					ran <- m.ID
					return nil
				}}}})
		if err != nil {
			t.Fatal(err)
		}
		rt.state.beforeWrite = func(_ string, it *item) error {
			if it.env().ID == "first" && failing.Load() {
				return errDiskFull
			}
			return nil
		}
		wait := start(t, rt, context.Background())
		waitFor(t, "running", rt.Ready)
		return rt, wait
	}
	// submitBoth submits "first", waits for it to be kept unsaved, then
	// submits "second" and waits for it to run or be parked.
	submitBoth := func(t *testing.T, rt *Runtime, ran chan string) {
		if err := rt.Submit(context.Background(), "mail", &handoff.Message{ID: "first", Key: key}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the first message kept unsaved", func() bool { return rt.fail.unsaved.len() == 1 })
		if err := rt.Submit(context.Background(), "mail", &handoff.Message{ID: "second", Key: key}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the second message run or parked", func() bool {
			ks, _ := rt.ParkedKeys()
			return len(ran) > 0 || len(ks) > 0
		})
		if len(ran) > 0 {
			t.Fatalf("%s ran while the first message of its key was unsaved (its dead-letter write retried)", <-ran)
		}
	}

	t.Run("saved later", func(t *testing.T) {
		t.Parallel()
		var failing atomic.Bool
		failing.Store(true)
		ran := make(chan string, 2)
		rt, wait := run(t, filepath.Join(t.TempDir(), "s.db"), false, &failing, ran)
		submitBoth(t, rt, ran)
		failing.Store(false)
		waitFor(t, "the dead letter saved", func() bool { dl, _, _ := rt.DeadLetters("mail", "", 10); return len(dl) == 1 })
		if ps, err := rt.Parked("mail", key); err != nil || len(ps) != 1 || ps[0].ID != "second" {
			t.Errorf("parked behind the dead letter: %v (err %v), want the second message", ps, err)
		}
		rep := stopAndWait(t, rt, wait)
		if rep.Held != 1 || rep.DeadLettered != 1 || rep.Succeeded != 0 {
			t.Errorf("held %d, dead lettered %d, succeeded %d; want 1, 1, 0", rep.Held, rep.DeadLettered, rep.Succeeded)
		}
	})

	t.Run("saved by the stop", func(t *testing.T) {
		t.Parallel()
		state := filepath.Join(t.TempDir(), "s.db")
		var failing atomic.Bool
		failing.Store(true)
		ran := make(chan string, 2)
		rt, wait := run(t, state, false, &failing, ran)
		submitBoth(t, rt, ran)
		if rep := stopAndWait(t, rt, wait); rep.Held != 1 || rep.Snapshotted != 1 || rep.Succeeded != 0 {
			t.Errorf("held %d, snapshotted %d, succeeded %d; want 1, 1, 0", rep.Held, rep.Snapshotted, rep.Succeeded)
		}
		failing.Store(false)
		rt, wait = run(t, state, true, &failing, ran)
		var order []string
		for range 2 {
			select {
			case id := <-ran:
				order = append(order, id)
			case <-time.After(30 * time.Second):
				t.Fatalf("after the restart ran %v, want first and second", order)
			}
		}
		if order[0] != "first" || order[1] != "second" {
			t.Errorf("after the restart ran %v, want [first second]", order)
		}
		stopAndWait(t, rt, wait)
	})
}
