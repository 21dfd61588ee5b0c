package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestStopRedeliverRebalance: instance A, whose class gives its Kafka
// messages back at the stop (StopRedeliver), is stopping with handlers
// blocked and a full queue when B joins the group. The rebalance ends A's
// generation during the drain: its keeper gives the queued messages back
// and waits for the running ones. The hard stop then gives those back
// too; they never settle, and the revoke must not wait its RevokeTimeout
// for them, or the stop's final commit finds the keeper busy and Run
// fails with ErrCommit although nothing is lost. Then B handles what A
// did not, and everything is committed.
//
// It runs once per group protocol (forEachProtocol): under the consumer
// protocol (KIP-848) A's revocation is the broker's, through A's
// heartbeats, and its static leave keeps its partition for its instance
// until the broker's session timeout (6s in the tests) ends it.
func TestStopRedeliverRebalance(t *testing.T) {
	t.Parallel()
	forEachProtocol(t, testStopRedeliverRebalance)
}

func testStopRedeliverRebalance(t *testing.T, proto GroupProtocol) {
	const handledByA = 40
	b := setupProtocol(t, proto, 2, "orders")
	produced := b.produce(200)

	var mu sync.Mutex
	by := map[string]string{} // message ID -> who handled it, in order
	record := func(who string, m *handoff.Message) {
		mu.Lock()
		by[m.ID] += who
		mu.Unlock()
		b.record(m)
	}
	var started atomic.Int64
	cfgA := b.config(func(ctx context.Context, m *handoff.Message) error {
		if started.Add(1) > handledByA {
			<-ctx.Done() // until the hard stop
			return context.Cause(ctx)
		}
		record("A", m)
		return nil
	}, func(c *Class) { c.StopPolicy = StopRedeliver; c.Workers = 4; c.QueueSize = 32 })
	cfgA.Instance = "a"
	cfgA.DrainTimeout = time.Minute // the test ends the drain with Close
	cfgA.HardStopGrace = 2 * time.Second
	// RevokeTimeout is its default, 5s: longer than the final commit's
	// 2s, so a revoke waiting for given-back messages is still waiting
	// when the stop commits.
	rtA, err := newRuntime(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	ctxA, stopA := context.WithCancel(context.Background())
	defer stopA()
	waitA := start(t, rtA, ctxA)
	poolA := rtA.classes.order[0].pool
	waitFor(t, "A's handlers blocked and queue full", func() bool {
		s := poolA.Stats()
		return s.Running == 4 && s.Queued == 32
	})
	stopA()
	waitFor(t, "A's stop begun", func() bool { return !rtA.Ready() })

	rtB, waitB := b.instance("b", b.config(func(ctx context.Context, m *handoff.Message) error { record("B", m); return nil }, nil))
	// During A's drain nothing else takes messages out of its queue: the
	// revoke of the partitions B's join takes does (all of A's on
	// kafka-go, whose generation ends; the one that moves on franz-go).
	// (On franz-go the partition that moves may have nothing queued: judge
	// by what A still owns.)
	waitFor(t, "A's partitions revoked", func() bool {
		g := rtA.kafka.gen.Load()
		return g != nil && len(g.trackers()) < 2
	})

	errClose := rtA.Close() // skips the rest of the drain: the hard stop
	repA, errA := waitA()
	if errA != nil || errClose != nil {
		t.Errorf("A's stop: Run %v, Close %v", errA, errClose)
	}
	waitFor(t, "B handled the rest", func() bool {
		unique, _ := b.counts()
		return unique == produced
	})
	rtB.Shutdown(context.Background())
	repB, errB := waitB()
	if errB != nil {
		t.Fatal(errB)
	}

	unique, total := b.counts()
	committed := b.committed()
	t.Logf("produced %d; A handled %d, revoked %d, gave back %d at the stop, stop phases: hard stop %s, commit %s; B handled %d; committed %d, duplicates %d",
		produced, repA.Succeeded, repA.Revoked, repA.GivenBack, repA.HardStop, repA.Commit, repB.Succeeded, committed, total-unique)
	if repA.Succeeded != handledByA || repA.Snapshotted != 0 || repA.GivenBack == 0 {
		t.Errorf("A handled %d (want %d), snapshotted %d (want 0), gave back %d at the stop (want some)",
			repA.Succeeded, handledByA, repA.Snapshotted, repA.GivenBack)
	}
	if committed != int64(produced) || unique != produced {
		t.Errorf("committed %d, handled %d distinct, want %d each", committed, unique, produced)
	}
	// A's commits stop exactly before what it gave back, so each message
	// should be handled once; but a rebalance promises at least once, and
	// one of some 70 runs saw 7 messages handled twice (not
	// reproduced since). Say who handled which.
	mu.Lock()
	for id, who := range by {
		if len(who) > 1 {
			t.Logf("duplicate: %s handled by %s", id, who)
		}
	}
	mu.Unlock()
}
