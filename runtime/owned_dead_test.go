package runtime

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
)

// TestDeadLetterOfMovedPartition: with the changelog, a dead letter of a
// partition that moved to another instance stays in the former owner's
// file, unused, and that owner's DeadLetters leaves it out; the new owner
// restored it and lists it as its own. The former owner must not requeue,
// discard or show it by its key (a key an operator read from a page
// loaded before the rebalance): requeued there, the message would run on
// an instance that does not own it while the new owner still holds it as
// a dead letter, to be requeued and run again.
func TestDeadLetterOfMovedPartition(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	for p := range 2 {
		b.produceValues("orders", keyOn(p, 2), "poison")
	}
	var mu sync.Mutex
	runs := map[string]map[int]int{} // instance -> partition -> calls
	handler := func(instance string) handoff.HandlerFunc {
		return func(_ context.Context, m *handoff.Message) error {
			mu.Lock()
			if runs[instance] == nil {
				runs[instance] = map[int]int{}
			}
			runs[instance][m.Origin.Partition]++
			mu.Unlock()
			return handoff.Permanent(errors.New("poison"))
		}
	}
	cfgA := b.config(handler("a"), nil)
	cfgA.Instance = "a"
	rtA, waitA := startNew(t, cfgA)
	keyOf := map[int]uint64{} // partition -> A's dead letter key
	waitFor(t, "A's two dead letters", func() bool {
		dls, _, err := rtA.DeadLetters("", "", 10)
		if err != nil || len(dls) != 2 {
			return false
		}
		for _, dl := range dls {
			keyOf[dl.Message.Origin.Partition] = dl.Key
		}
		return true
	})

	rtB, waitB := b.instance("b", b.config(handler("b"), nil))
	moved := -1
	waitFor(t, "one partition and its dead letter moved to B", func() bool {
		dlB, _, err := rtB.DeadLetters("", "", 10)
		if err != nil || len(dlB) != 1 {
			return false
		}
		dlA, _, err := rtA.DeadLetters("", "", 10)
		if err != nil || len(dlA) != 1 {
			return false
		}
		moved = dlB[0].Message.Origin.Partition
		return dlA[0].Message.Origin.Partition != moved
	})
	key := keyOf[moved]
	if _, err := rtA.GetDeadLetter(key); !errors.Is(err, ErrNotFound) {
		t.Errorf("A's GetDeadLetter of the moved partition's dead letter: %v, want ErrNotFound", err)
	}
	if err := rtA.Requeue(context.Background(), key); !errors.Is(err, ErrNotFound) {
		t.Errorf("A's Requeue of the moved partition's dead letter: %v, want ErrNotFound", err)
	}
	if err := rtA.Discard(context.Background(), key); !errors.Is(err, ErrNotFound) {
		t.Errorf("A's Discard of the moved partition's dead letter: %v, want ErrNotFound", err)
	}
	shutdownAndWait(t, rtA, waitA)
	shutdownAndWait(t, rtB, waitB)
	mu.Lock()
	defer mu.Unlock()
	if n := runs["a"][moved]; n != 1 {
		t.Errorf("A ran the moved partition's message %d times, want once (before it moved)", n)
	}
}

// TestKeyBlockedOnPartitionThatCameBack: a key of an ordered class
// blocked by a dead letter on instance A, whose partition moves to B,
// where the dead letter is requeued and succeeds, is free once the
// partition comes back to A: A's restore reads the dead letter's delete
// from the changelog. A must not keep the key blocked by what it knew of
// it before the partition left (the dead letter is gone: nothing would
// ever release the key, and every later message of it would be parked
// for good).
func TestKeyBlockedOnPartitionThatCameBack(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	keys := [2]string{keyOn(0, 2), keyOn(1, 2)}
	for p := range 2 {
		b.produceValues("orders", keys[p], "poison")
	}
	var fixed atomic.Bool
	h := func(_ context.Context, m *handoff.Message) error {
		if string(m.Value) == "poison" && !fixed.Load() {
			return handoff.Permanent(errors.New("poison"))
		}
		b.record(m)
		return nil
	}
	ordered := func(c *Class) { c.Ordered = true }
	cfgA := b.config(h, ordered)
	cfgA.Instance = "a"
	rtA, waitA := startNew(t, cfgA)
	waitFor(t, "A's two dead letters", func() bool {
		dls, _, err := rtA.DeadLetters("", "", 10)
		return err == nil && len(dls) == 2
	})
	fixed.Store(true)

	rtB, waitB := b.instance("b", b.config(h, ordered))
	var moved DeadLetter
	waitFor(t, "one partition and its dead letter moved to B", func() bool {
		dlB, _, err := rtB.DeadLetters("", "", 10)
		if err != nil || len(dlB) != 1 {
			return false
		}
		moved = dlB[0]
		return true
	})
	if err := rtB.Requeue(context.Background(), moved.Key); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B handled the requeued dead letter", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.handled[moved.Message.ID] == 1
	})
	shutdownAndWait(t, rtB, waitB)
	p := kclient.Partition{Topic: "orders", Partition: moved.Message.Origin.Partition}
	waitFor(t, "the partition back at A", func() bool {
		rtA.clog.mu.Lock()
		defer rtA.clog.mu.Unlock()
		return rtA.clog.owned[p]
	})

	b.produceValues("orders", string(moved.Message.Key), "after")
	waitFor(t, "the new message handled or parked at A", func() bool {
		unique, _ := b.counts()
		pk, err := rtA.ParkedKeys()
		return unique == 2 || err == nil && len(pk) > 0
	})
	if pk, err := rtA.ParkedKeys(); err != nil || len(pk) > 0 {
		dls, _, _ := rtA.DeadLetters("", "", 10)
		t.Errorf("A parked the key's new message: parked keys %+v (%v), A's dead letters %+v", pk, err, dls)
	}
	shutdownAndWait(t, rtA, waitA)
}
