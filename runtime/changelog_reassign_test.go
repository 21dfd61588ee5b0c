package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestChangelogReassignedRunsSavedOnce: a partition revoked and given
// back to the same instance at once (kafka-go's eager rebalance, when
// another member joins the group) is restored again. A saved message of
// it that is still running then must not be re-pushed a second time:
// it runs once.
func TestChangelogReassignedRunsSavedOnce(t *testing.T) {
	t.Parallel()
	onlyClient(t, ClientKafkaGo, "an eager rebalance gives a member its partitions again; franz-go's cooperative one keeps them unrevoked")
	b := setup(t, 1, "orders", "other")
	produced := b.produceValues("orders", "k", "a", "b", "c", "d", "e")
	class := func(topic string, h handoff.HandlerFunc) Class {
		return Class{Name: topic, Topics: []string{topic}, Handler: h, Workers: 1, QueueSize: 8}
	}
	cfg := func(c Class) Config {
		cfg := b.config(nil, nil)
		cfg.Classes = []Class{c}
		cfg.DrainTimeout = 50 * time.Millisecond
		cfg.HardStopGrace = time.Second
		cfg.RevokeTimeout = 100 * time.Millisecond
		return cfg
	}

	// The first run saves all five: one interrupted, four unstarted.
	rt1, wait1 := startNew(t, cfg(class("orders", func(ctx context.Context, m *handoff.Message) error {
		<-ctx.Done()
		return context.Cause(ctx)
	})))
	snapshotAll(t, rt1, wait1, produced)

	// The second run, on the same disk, holds the first saved message
	// running while another member joins: the partition is revoked and
	// given back, and restored again.
	rebalanced := make(chan struct{})
	first := true
	rt2, wait2 := startNew(t, cfg(class("orders", func(ctx context.Context, m *handoff.Message) error {
		if first { // one worker: no race
			first = false
			<-rebalanced
		}
		b.record(m)
		return nil
	})))
	waitFor(t, "the first saved message running", func() bool {
		return rt2.classes.order[0].pool.Stats().Running == 1
	})
	rtB, waitB := b.instance("b", cfg(class("other", func(ctx context.Context, m *handoff.Message) error { return nil })))
	waitFor(t, "the partition restored again", func() bool { return rt2.clog.restoredParts.Load() == 2 })
	close(rebalanced)
	waitFor(t, "every message handled", func() bool {
		unique, _ := b.counts()
		return unique == produced
	})
	waitFor(t, "the pool idle", func() bool {
		s := rt2.classes.order[0].pool.Stats()
		return s.Running+s.Queued+s.Waiting == 0
	})
	stopAndWait(t, rtB, waitB)
	stopAndWait(t, rt2, wait2)
	unique, total := b.counts()
	if unique != produced || total != produced {
		t.Errorf("produced %d: handled %d unique, %d in all (%d twice)", produced, unique, total, total-unique)
	}
}
