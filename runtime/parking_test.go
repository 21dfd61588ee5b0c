package runtime

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// TestReleaseSkipsUndeletedParked: when the record of a released parked
// message that is done cannot be deleted, its key's release does not
// push it again: each parked message runs once, the key is freed, and
// the delete is retried until the record is gone.
func TestReleaseSkipsUndeletedParked(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	b.produceValues("orders", "k", "poison", "v1", "v2")
	var mu sync.Mutex
	runs := map[string]int{}
	cfg := b.config(func(_ context.Context, m *handoff.Message) error {
		if string(m.Value) == "poison" {
			return handoff.Permanent(errors.New("poison"))
		}
		mu.Lock()
		runs[string(m.Value)]++
		mu.Unlock()
		return nil
	}, func(c *Class) { c.Ordered = true })
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var failDeletes atomic.Bool
	failDeletes.Store(true)
	rt.state.beforeWrite = func(op string, _ *item) error {
		if op == "delete done parked message" && failDeletes.Load() {
			return errDiskFull
		}
		return nil
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "two parked", func() bool { return rt.tally.total(evParked) == 2 })
	dead, _, err := rt.DeadLetters("orders", "", 10)
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters %v, %v", dead, err)
	}
	if err := rt.Discard(context.Background(), dead[0].Key); err != nil {
		t.Fatal(err)
	}
	c := rt.classes.byName["orders"]
	keyFree := func() bool {
		return c.keys.free("k")
	}
	maxRuns := func() int {
		mu.Lock()
		defer mu.Unlock()
		return max(runs["v1"], runs["v2"])
	}
	waitFor(t, "the key freed, or a parked message run again", func() bool { return keyFree() || maxRuns() > 1 })
	mu.Lock()
	if runs["v1"] != 1 || runs["v2"] != 1 {
		t.Errorf("runs %v, want each parked message once", runs)
	}
	mu.Unlock()
	if !keyFree() {
		t.Error("key not freed")
	}
	failDeletes.Store(false)
	waitFor(t, "the parked records deleted", func() bool {
		es, _, err := rt.state.store.Parked("orders", []byte("k"))
		return err == nil && len(es) == 0
	})
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	assertCount(t, b.state, snapshot.BucketParked, 0)
	if runs["v1"] != 1 || runs["v2"] != 1 {
		t.Errorf("runs %v after the stop, want each parked message once", runs)
	}
}
