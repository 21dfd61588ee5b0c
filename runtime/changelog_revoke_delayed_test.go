package runtime

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestChangelogRevokedDelayedLeavesPool: a delayed message handed to its
// pool and not started yet when its partition is revoked leaves the pool,
// as a re-pushed saved message does: the partition's next owner delivers
// it from the changelog, so it runs there, and not here too.
func TestChangelogRevokedDelayedLeavesPool(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	release := make(chan struct{})
	var mu sync.Mutex
	runs := map[string]int{}
	h := func(ctx context.Context, m *handoff.Message) error {
		if m.ID == "blocker" {
			<-release
			return nil
		}
		mu.Lock()
		runs[m.ID]++
		mu.Unlock()
		return nil
	}
	cfg := b.config(h, func(c *Class) { c.Workers = 1 })
	cfg.RevokeTimeout = 100 * time.Millisecond
	rtA, waitA := startNew(t, cfg)
	waitFor(t, "A ready", rtA.Ready)
	if err := rtA.Submit(context.Background(), "orders", &handoff.Message{ID: "blocker", Key: []byte("blocker")}); err != nil {
		t.Fatal(err)
	}
	c := rtA.classes.byName["orders"]
	waitFor(t, "A's worker busy", func() bool { return c.pool.Stats().Running == 1 })
	// One delayed message of each partition, due soon: both are handed
	// to A's pool, behind the busy worker.
	due := time.Now().Add(200 * time.Millisecond)
	for p := range int32(2) {
		key := ""
		for i := 0; ; i++ {
			key = fmt.Sprintf("key-%d", i)
			if keyPartition([]byte(key), 2) == p {
				break
			}
		}
		m := &handoff.Message{ID: fmt.Sprintf("delayed-%d", p), Key: []byte(key), Value: []byte("later")}
		if err := rtA.Schedule(context.Background(), "orders", m, due); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both delayed messages queued in A's pool", func() bool { return c.pool.Stats().Queued == 2 })

	// B joins and takes a partition; it delivers that partition's
	// delayed message, restored from the changelog.
	rtB, waitB := b.instance("b", cfg)
	waitFor(t, "B ran the delayed message of its partition", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return runs["delayed-0"]+runs["delayed-1"] == 1
	})
	close(release)
	waitFor(t, "A's pool idle", func() bool {
		s := c.pool.Stats()
		return s.Running+s.Queued+s.Waiting == 0
	})
	waitFor(t, "both delayed messages ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return runs["delayed-0"] > 0 && runs["delayed-1"] > 0
	})
	stopAndWait(t, rtB, waitB)
	stopAndWait(t, rtA, waitA)
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("%s ran %d times, want once", id, n)
		}
	}
}
