package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestRescheduleThenStop: a handler reschedules its own ID (the
// recurring-job pattern), then fails and waits out a backoff when the
// stop comes. Its delayed record was replaced by the new schedule, so
// the snapshot must save it as a record of its own: the new schedule's
// record is not its source. A message of another class, interrupted at
// the hard stop, is saved in the same transaction and must not be lost
// with it.
func TestRescheduleThenStop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// fail: the rescheduled run fails and waits out a backoff;
		// otherwise it blocks until the hard stop interrupts it.
		fail bool
	}{{"backoff", true}, {"interrupted", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			state := t.TempDir() + "/s.db"
			rescheduled := make(chan struct{})
			blocked := make(chan struct{})
			var rt *Runtime
			jobs := Class{Name: "jobs", Workers: 1, QueueSize: 4,
				Retry: RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Hour, MaxBackoff: time.Hour},
				Handler: func(ctx context.Context, m *handoff.Message) error {
					next := &handoff.Message{ID: m.ID, Value: []byte("next")}
					if err := rt.Schedule(ctx, "jobs", next, time.Now().Add(time.Hour)); err != nil {
						return handoff.Permanent(err)
					}
					close(rescheduled)
					if tc.fail {
						return errors.New("job failed")
					}
					<-ctx.Done()
					return context.Cause(ctx)
				}}
			slow := Class{Name: "slow", Workers: 1, QueueSize: 4, Handler: func(ctx context.Context, m *handoff.Message) error {
				close(blocked)
				<-ctx.Done()
				return context.Cause(ctx)
			}}
			var err error
			rt, err = newRuntime(Config{StatePath: state, Classes: []Class{jobs, slow}, Logger: testLogger(t),
				DrainTimeout: 50 * time.Millisecond, HardStopGrace: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			wait := start(t, rt, context.Background())
			waitFor(t, "running", rt.Ready)
			if err := rt.Submit(context.Background(), "slow", &handoff.Message{ID: "sub-1"}); err != nil {
				t.Fatal(err)
			}
			<-blocked
			if err := rt.Schedule(context.Background(), "jobs", &handoff.Message{ID: "job", Value: []byte("first")}, time.Now().Add(20*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			<-rescheduled
			if tc.fail {
				waitFor(t, "the failed run backing off", func() bool { return rt.classes.byName["jobs"].pool.Stats().Waiting == 1 })
			}
			rt.Shutdown(context.Background())
			rep, err := wait()
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if rep.Snapshotted != 2 {
				t.Errorf("snapshotted %d, want 2 (the failed run of job, sub-1)", rep.Snapshotted)
			}
			pending, delayed := snapshottest.Pending(t, state), snapshottest.Delayed(t, state)
			got := map[string]string{}
			for _, e := range pending {
				got[e.Record.Message.ID] = string(e.Record.Message.Value)
			}
			if got["job"] != "first" || len(got) != 2 || got["sub-1"] != "" {
				t.Errorf("pending: %v, want job (first) and sub-1", got)
			}
			if len(delayed) != 1 || string(delayed[0].Record.Message.Value) != "next" {
				t.Errorf("delayed: %d records, want the next run of job", len(delayed))
			}
		})
	}
}

// TestRequeuedRedeliveryLeavesNoDeadLetter: a requeued dead letter of a
// class with redeliveries fails again and is redelivered later; once
// that redelivery succeeds, the dead letter is gone: not listed, and a
// second Requeue finds nothing to run again.
func TestRequeuedRedeliveryLeavesNoDeadLetter(t *testing.T) {
	t.Parallel()
	state := t.TempDir() + "/s.db"
	fixed := make(chan struct{})
	var calls, successes atomic.Int64
	var failedOnce atomic.Bool
	done := make(chan struct{}, 8)
	c := Class{Name: "jobs", Workers: 1, QueueSize: 4,
		Retry: RetryPolicy{MaxAttempts: 1, Redeliveries: 1, RedeliveryDelay: 20 * time.Millisecond},
		Handler: func(ctx context.Context, m *handoff.Message) error {
			calls.Add(1)
			select {
			case <-fixed:
				if failedOnce.CompareAndSwap(false, true) {
					// The requeued run fails once more: it gets the
					// redelivery its policy gives.
					return errors.New("still broken")
				}
				successes.Add(1)
				done <- struct{}{}
				return nil
			default:
				return errors.New("broken")
			}
		}}
	rt, wait := startNew(t, Config{StatePath: state, Classes: []Class{c}, Logger: testLogger(t),
		DrainTimeout: time.Second, HardStopGrace: time.Second})
	waitFor(t, "running", rt.Ready)
	if err := rt.Submit(context.Background(), "jobs", &handoff.Message{ID: "m"}); err != nil {
		t.Fatal(err)
	}
	var dls []DeadLetter
	waitFor(t, "a dead letter", func() bool {
		dls, _, _ = rt.DeadLetters("", "", 10)
		return len(dls) == 1
	})
	close(fixed)
	if err := rt.Requeue(context.Background(), dls[0].Key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the requeued message's redelivery did not run")
	}
	// The requeue's claim ends once its message left the pool; then
	// the dead letter must be gone.
	var err error
	waitFor(t, "the requeue to finish", func() bool {
		err = rt.Requeue(context.Background(), dls[0].Key)
		return !errors.Is(err, ErrRequeued)
	})
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("Requeue of the done dead letter: %v, want ErrNotFound", err)
	}
	left, _, lerr := rt.DeadLetters("", "", 10)
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(left) != 0 {
		t.Errorf("%d dead letters listed after the requeued message succeeded, want 0", len(left))
	}
	stopAndWait(t, rt, wait)
	if n := successes.Load(); n != 1 {
		t.Errorf("succeeded %d times, want 1 (calls %d)", n, calls.Load())
	}
}
