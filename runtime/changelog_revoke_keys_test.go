package runtime

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestChangelogRevokedKeyNotLeftBlocked: a key of an ordered class is
// blocked by a dead letter on A; its partition moves to B, where the dead
// letter is requeued and succeeds; the partition comes back to A. The key
// is no longer blocked: A restores the partition with the dead letter
// gone, and a new message of the key runs rather than being parked
// behind a blocker that is not there any more.
func TestChangelogRevokedKeyNotLeftBlocked(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	keys := []string{keyOn(0, 2), keyOn(1, 2)}
	var fixed atomic.Bool
	h := func(ctx context.Context, m *handoff.Message) error {
		if string(m.Value) == "poison" && !fixed.Load() {
			return handoff.Permanent(errors.New("poison"))
		}
		b.record(m)
		return nil
	}
	cfg := b.config(h, func(c *Class) { c.Ordered = true })
	cfg.RevokeTimeout = 100 * time.Millisecond
	rtA, waitA := startNew(t, cfg)
	for _, k := range keys {
		b.produceValues("orders", k, "poison")
	}
	waitFor(t, "A's two dead letters", func() bool {
		dl, _, err := rtA.DeadLetters("", "", 10)
		return err == nil && len(dl) == 2
	})

	// B takes a partition, with its dead letter, and requeues it there:
	// it succeeds now.
	fixed.Store(true)
	rtB, waitB := b.instance("b", cfg)
	var moved DeadLetter
	waitFor(t, "B restored a dead letter", func() bool {
		dl, _, err := rtB.DeadLetters("", "", 10)
		if err != nil || len(dl) != 1 {
			return false
		}
		moved = dl[0]
		return true
	})
	if err := rtB.Requeue(context.Background(), moved.Key); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the requeued dead letter handled on B", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.handled[moved.Message.ID] == 1
	})
	// B leaves: the partition comes back to A, and a new message of the
	// key with it.
	stopAndWait(t, rtB, waitB)
	key := string(moved.Message.Key)
	b.produceValues("orders", key, "after")
	var parked int
	waitFor(t, "the new message handled or parked", func() bool {
		pk, err := rtA.ParkedKeys()
		if err != nil {
			return false
		}
		for _, p := range pk {
			if string(p.Key) == key {
				parked = p.Count
				return true
			}
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.handled) == 2
	})
	stopAndWait(t, rtA, waitA)
	if parked > 0 {
		t.Errorf("key %s: %d message(s) parked behind the dead letter B requeued and finished", key, parked)
	}
}

// TestChangelogRevokedReleaseStops: a key of an ordered class is being
// released on A (its dead letter was requeued and succeeded; its first
// parked message runs, the second waits) when its partition moves to B,
// which restores the parked messages and releases the key itself. A's
// release stops there: the parked message it had not started runs on B
// only.
func TestChangelogRevokedReleaseStops(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	keys := []string{keyOn(0, 2), keyOn(1, 2)}
	var fixed atomic.Bool
	release := make(chan struct{})
	var mu sync.Mutex
	runs := map[string]int{} // key/value -> runs
	handler := func(blockFirst bool) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error {
			v := string(m.Value)
			if v == "poison" && !fixed.Load() {
				return handoff.Permanent(errors.New("poison"))
			}
			if v == "p1" && blockFirst {
				<-release
			}
			mu.Lock()
			runs[string(m.Key)+"/"+v]++
			mu.Unlock()
			return nil
		}
	}
	cfg := func(blockFirst bool) Config {
		cfg := b.config(handler(blockFirst), func(c *Class) { c.Ordered = true; c.Workers = 4 })
		cfg.RevokeTimeout = 100 * time.Millisecond
		cfg.HardStopGrace = 100 * time.Millisecond
		return cfg
	}
	rtA, waitA := startNew(t, cfg(true))
	for _, k := range keys {
		b.produceValues("orders", k, "poison", "p1", "p2")
	}
	waitFor(t, "two dead letters, four parked", func() bool {
		dl, _, err := rtA.DeadLetters("", "", 10)
		if err != nil || len(dl) != 2 {
			return false
		}
		pk, err := rtA.ParkedKeys()
		n := 0
		for _, p := range pk {
			n += p.Count
		}
		return err == nil && n == 4
	})
	fixed.Store(true)
	dl, _, err := rtA.DeadLetters("", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dl {
		if err := rtA.Requeue(context.Background(), d.Key); err != nil {
			t.Fatal(err)
		}
	}
	c := rtA.classes.byName["orders"]
	waitFor(t, "each key's first parked message running on A, its second queued", func() bool {
		s := c.pool.Stats()
		return s.Running == 2 && s.Queued == 2
	})

	rtB, waitB := b.instance("b", cfg(false))
	waitFor(t, "B released the key of its partition", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return runs[keys[0]+"/p2"]+runs[keys[1]+"/p2"] == 1
	})
	close(release)
	waitFor(t, "A's pool idle", func() bool {
		s := c.pool.Stats()
		return s.Running+s.Queued+s.Waiting == 0
	})
	waitFor(t, "both keys released", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return runs[keys[0]+"/p2"] > 0 && runs[keys[1]+"/p2"] > 0
	})
	stopAndWait(t, rtB, waitB)
	stopAndWait(t, rtA, waitA)
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		// The first parked message ran on A when the partition moved,
		// past RevokeTimeout: B may run it again (a running handler of
		// a revoked partition). The second had not started.
		if n := runs[k+"/p2"]; n != 1 {
			t.Errorf("key %s: its second parked message ran %d times, want once", k, n)
		}
	}
}
