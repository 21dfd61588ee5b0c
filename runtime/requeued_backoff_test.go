package runtime

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestStopKeepsBlockerOfRequeued: in an ordered class, a dead letter
// requeued offline (a pending record with Reason "requeued") is older
// than the message parked behind its key, so at the start it blocks its
// key and the parked message waits for its success. It fails and waits
// out a backoff when the stop comes: its record is updated with its
// attempt count, and must stay what it was, a requeued dead letter. The
// stop saved it with Reason "backoff", so the next start did not make
// it its key's blocker and released the parked message to run while the
// older one was still failing: the key's order broken.
func TestStopKeepsBlockerOfRequeued(t *testing.T) {
	t.Parallel()
	state := t.TempDir() + "/s.db"
	key := []byte("k")
	snapshottest.SeedPending(t, state, snapshot.Record{Message: handoff.Message{ID: "r", Class: "jobs", Key: key}, Reason: snapshot.ReasonRequeued})
	snapshottest.SeedParked(t, state, "jobs", key, snapshot.Record{Message: handoff.Message{ID: "p", Class: "jobs", Key: key}, Reason: reasonParked})

	var mu sync.Mutex
	var handled []string
	jobs := Class{Name: "jobs", Workers: 2, QueueSize: 4, Ordered: true,
		Retry: RetryPolicy{MaxAttempts: 10, InitialBackoff: time.Hour, MaxBackoff: time.Hour},
		Handler: func(ctx context.Context, m *handoff.Message) error {
			if m.ID == "r" {
				return errors.New("still failing")
			}
			mu.Lock()
			handled = append(handled, m.ID)
			mu.Unlock()
			return nil
		}}
	for run := 1; run <= 2; run++ {
		rt, err := newRuntime(Config{StatePath: state, Classes: []Class{jobs}, Logger: testLogger(t),
			DrainTimeout: 50 * time.Millisecond, HardStopGrace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		wait := start(t, rt, context.Background())
		c := rt.classes.byName["jobs"]
		waitFor(t, "r waiting out its backoff", func() bool { return c.pool.Stats().Waiting == 1 })
		c.keys.mu.Lock()
		st := c.keys.keys[string(key)]
		blocked := st != nil && st.blocker == "r"
		c.keys.mu.Unlock()
		rep := stopAndWait(t, rt, wait)
		mu.Lock()
		h := handled
		mu.Unlock()
		if !blocked || len(h) != 0 {
			t.Fatalf("run %d: key blocked by r: %v; handled %v while r still fails (released %d)", run, blocked, h, rep.Released)
		}
	}
}

// TestStopKeepsDeadLetterError: a dead letter requeued while running
// fails again and waits out a backoff when the stop comes. It stays a
// dead letter, its record updated with its attempt count; the record
// must keep the error it is a dead letter for. The stop saved it with
// none, so the dead-letter listings (admin API, CLI) showed no reason.
func TestStopKeepsDeadLetterError(t *testing.T) {
	t.Parallel()
	state := t.TempDir() + "/s.db"
	ids := snapshottest.SeedDead(t, state, snapshot.Record{Message: handoff.Message{ID: "d", Class: "jobs", Attempt: 3}, Reason: reasonFailed, Err: "boom"})
	jobs := Class{Name: "jobs", Workers: 1, QueueSize: 4,
		Retry:   RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Hour, MaxBackoff: time.Hour},
		Handler: func(ctx context.Context, m *handoff.Message) error { return errors.New("still failing") }}
	rt, err := newRuntime(Config{StatePath: state, Classes: []Class{jobs}, Logger: testLogger(t),
		DrainTimeout: 50 * time.Millisecond, HardStopGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "ready", rt.Ready)
	// A file without the changelog: a dead letter's ID is its key.
	if err := rt.Requeue(context.Background(), ids[0].String()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the requeued dead letter waiting out its backoff", func() bool {
		return rt.classes.byName["jobs"].pool.Stats().Waiting == 1
	})
	stopAndWait(t, rt, wait)

	var rec snapshot.Record
	var ok bool
	for _, d := range snapshottest.Dead(t, state) {
		if d.ID == ids[0] {
			rec, ok = d.Record, true
		}
	}
	if !ok || rec.Err == "" || rec.Message.Attempt != 1 {
		t.Errorf("dead letter after the stop: found %v, attempt %d, error %q; want attempt 1 and its error", ok, rec.Message.Attempt, rec.Err)
	}
}
