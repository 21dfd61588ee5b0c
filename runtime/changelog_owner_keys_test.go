package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// TestNonOwnerHoldsNoKeyBlock (issue 43, case 5): in an ordered class, a
// submitted message that fails for good on instance a, which does not own
// its key's partition, is a dead letter of that partition, b's. b blocks
// the key; a does not (only a partition's owner blocks its keys). Once b
// requeued the dead letter and it ran, later submits of the key through a
// run, none parks: before, a kept the key blocked in memory and parked
// every later message of it, for good. Counted: the dead letter runs once
// after its requeue, each later submit once, nothing is parked anywhere.
func TestNonOwnerHoldsNoKeyBlock(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	runs := map[string]int{}
	fail := map[string]bool{"sub-0": true}
	h := func(ctx context.Context, m *handoff.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if !strings.HasPrefix(m.ID, "sub-") {
			return nil
		}
		if fail[m.ID] {
			return handoff.Permanent(errors.New("bad input"))
		}
		runs[m.ID]++
		return nil
	}
	ran := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return runs[id]
	}
	rtA, rtB, stop := twoOwners(t, func(string) handoff.HandlerFunc { return h }, func(c *Class) {
		c.Ordered, c.Retry = true, RetryPolicy{MaxAttempts: 1}
	})
	other := int32(ownedPartitions(rtB)[0].Partition)
	key := []byte(keyFor("k", other, 2, 0))
	if err := rtA.Submit(context.Background(), "orders", &handoff.Message{ID: "sub-0", Key: key, Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	var dead string
	waitFor(t, "b listing the dead letter a wrote to b's partition", func() bool {
		ds, _, err := rtB.DeadLetters("orders", "", 10)
		if err != nil || len(ds) != 1 {
			return false
		}
		dead = ds[0].Key
		return ds[0].Message.ID == "sub-0"
	})
	if n := rtA.classes.byName["orders"].keys.count(); n != 0 {
		t.Errorf("a holds %d key blocks after a dead letter of b's partition, want none", n)
	}
	mu.Lock()
	fail["sub-0"] = false
	mu.Unlock()
	if err := rtB.Requeue(context.Background(), dead); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the requeued dead letter run", func() bool { return ran("sub-0") == 1 })
	const later = 3
	for i := 1; i <= later; i++ {
		m := &handoff.Message{ID: fmt.Sprintf("sub-%d", i), Key: key, Value: []byte("v")}
		if err := rtA.Submit(context.Background(), "orders", m); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every later submit of the key through a run", func() bool {
		for i := 1; i <= later; i++ {
			if ran(fmt.Sprintf("sub-%d", i)) != 1 {
				return false
			}
		}
		return true
	})
	for _, rt := range []*Runtime{rtA, rtB} {
		if pk, err := rt.ParkedKeys(); err != nil || len(pk) != 0 {
			t.Errorf("parked keys %v (err %v), want none", pk, err)
		}
	}
	stop()
	for i := 0; i <= later; i++ {
		if n := ran(fmt.Sprintf("sub-%d", i)); n != 1 {
			t.Errorf("sub-%d ran %d times, want 1", i, n)
		}
	}
}

// TestFollowedParkedWithoutBlockerReleased (issue 43, case 5): a parked
// record that another instance wrote to the changelog of a partition b
// owns, for a key nothing blocks on b (parked behind a block that
// instance held, as a non-owner did before), is released by b: it runs
// once, on b, and leaves no parked record. Before, b applied it and left
// it parked for good.
func TestFollowedParkedWithoutBlockerReleased(t *testing.T) {
	t.Parallel()
	runs := newInstanceRuns("parked-")
	rtA, rtB, stop := twoOwners(t, runs.handler, func(c *Class) { c.Ordered = true })
	other := int32(ownedPartitions(rtB)[0].Partition)
	key := []byte(keyFor("k", other, 2, 0))
	const n = 3
	for i := range n {
		// Parked through a's State, as a Kafka message of the key (nothing
		// to delete), with its changelog write.
		rec := snapshot.Record{Message: handoff.Message{ID: fmt.Sprintf("parked-%d", i), Class: "orders", Key: key, Value: []byte("v")},
			Reason: reasonParked, SavedAt: time.Now()}
		if err := rtA.state.store.MoveToParked(snapshot.Move{Alone: true}, "orders", key, rec); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "b running the parked records a wrote to b's partition", func() bool { got, _ := runs.ran(); return got == n })
	waitFor(t, "b's parked records gone", func() bool {
		pk, err := rtB.ParkedKeys()
		return err == nil && len(pk) == 0
	})
	stop()
	_, ranOn := runs.ran()
	for i := range n {
		if got := ranOn[fmt.Sprintf("parked-%d", i)]; len(got) != 1 || got[0] != "b" {
			t.Errorf("parked-%d ran on %v, want once, on b", i, got)
		}
	}
}
