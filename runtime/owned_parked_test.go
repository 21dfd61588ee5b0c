package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/handoff-go/handoff"
)

// TestParkedOfMovedPartition: with the changelog, ParkedKeys and Parked
// leave out the parked messages of partitions that moved to another
// instance, as DeadLetters and Delayed do: the former owner keeps their
// records in its file, unused, and the new owner restored them and lists
// them. Listed by both, an operator would see each parked key twice
// across the instances' admin APIs.
func TestParkedOfMovedPartition(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	var mu sync.Mutex
	partOf := map[string]int{} // key -> its partition
	h := func(_ context.Context, m *handoff.Message) error {
		if strings.HasPrefix(string(m.Value), "poison") {
			mu.Lock()
			partOf[string(m.Key)] = m.Origin.Partition
			mu.Unlock()
			return handoff.Permanent(errors.New("cannot parse"))
		}
		return nil
	}
	ordered := func(c *Class) { c.Ordered, c.Retry = true, RetryPolicy{MaxAttempts: 1} }
	rtA, waitA := startNew(t, b.config(h, ordered))
	waitFor(t, "a ready", rtA.Ready)
	const keys = 8
	for k := range keys {
		key := fmt.Sprintf("key-%d", k)
		b.produceValues("orders", key, "poison-"+key, "after-"+key)
	}
	listed := func(rt *Runtime) []string {
		pks, err := rt.ParkedKeys()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, pk := range pks {
			if pk.Count != 1 {
				t.Errorf("key %s: %d parked, want 1", pk.Key, pk.Count)
			}
			out = append(out, string(pk.Key))
		}
		return out
	}
	waitFor(t, "a parking every key", func() bool { return len(listed(rtA)) == keys })

	rtB, waitB := b.instance("b", b.config(h, ordered))
	waitFor(t, "each instance owning one partition", func() bool {
		return rtB.Ready() && len(ownedPartitions(rtA)) == 1 && len(ownedPartitions(rtB)) == 1
	})
	waitFor(t, "b listing the parked keys of its partition", func() bool { return len(listed(rtB)) > 0 })
	mineA := ownedPartitions(rtA)[0].Partition
	mu.Lock()
	var wantA, wantB []string
	for key, p := range partOf {
		if p == mineA {
			wantA = append(wantA, key)
		} else {
			wantB = append(wantB, key)
		}
	}
	if len(wantA) == 0 || len(wantB) == 0 {
		t.Fatalf("the %d keys all went to one partition: %v", keys, partOf)
	}
	mu.Unlock()
	sort.Strings(wantA)
	sort.Strings(wantB)
	if got := listed(rtA); !slices.Equal(got, wantA) {
		t.Errorf("a lists parked keys %v, want only its partition's %v", got, wantA)
	}
	if got := listed(rtB); !slices.Equal(got, wantB) {
		t.Errorf("b lists parked keys %v, want its partition's %v", got, wantB)
	}
	if ms, err := rtA.Parked("orders", []byte(wantB[0])); err != nil || len(ms) != 0 {
		t.Errorf("a's Parked of b's key %s: %d messages (err %v), want none", wantB[0], len(ms), err)
	}
	if ms, err := rtB.Parked("orders", []byte(wantB[0])); err != nil || len(ms) != 1 {
		t.Errorf("b's Parked of its key %s: %d messages (err %v), want 1", wantB[0], len(ms), err)
	}
	shutdownAndWait(t, rtA, waitA)
	shutdownAndWait(t, rtB, waitB)
}
