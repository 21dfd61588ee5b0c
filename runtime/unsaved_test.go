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
