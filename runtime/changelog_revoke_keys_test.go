package runtime

import (
	"context"
	"errors"
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
