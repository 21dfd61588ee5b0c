package runtime

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
)

// owned is how many partitions rt's group member owns.
func owned(rt *Runtime) int {
	if g := rt.kafka.gen.Load(); g != nil {
		return len(g.trackers())
	}
	return 0
}

// TestHandoverRejoinsAtOnce: a member that leaves the group, or revokes
// partitions for a new member, says so in the meta topic, and the others
// join the rebalance that follows at once instead of at their next
// heartbeat (handover.go). Here the broker's heartbeat answers are made
// "no rebalance" at the moments that matter, so a member can learn of
// the rebalance only through the handover. Without it, B never took A's
// partitions and the wait timed out. Every message is handled and
// committed.
func TestHandoverRejoinsAtOnce(t *testing.T) {
	t.Parallel()
	onlyClient(t, ClientFranzGo, "kafka-go's eager member cannot join before its heartbeat")
	classicOnly(t, "the classic protocol's heartbeat tells a member of a rebalance")
	b := setup(t, 4, "orders")
	cluster := b.broker.Cluster()
	// mute answers every heartbeat of the group "no rebalance"; armAt,
	// when not negative, sets mute at the first SyncGroup of a later
	// generation.
	var mute atomic.Bool
	var armAt atomic.Int32
	armAt.Store(-1)
	var synced atomic.Int32
	cluster.ControlKey(int16(kmsg.Heartbeat), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := kreq.(*kmsg.HeartbeatRequest)
		if req.Group != b.group || !mute.Load() {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.Version = req.Version
		return resp, nil, true
	})
	cluster.ControlKey(int16(kmsg.SyncGroup), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := kreq.(*kmsg.SyncGroupRequest)
		if req.Group == b.group {
			synced.Store(max(synced.Load(), req.Generation))
			if at := armAt.Load(); at >= 0 && req.Generation > at {
				mute.Store(true)
			}
		}
		return nil, nil, false
	})

	cfg := b.config(func(_ context.Context, m *handoff.Message) error {
		b.record(m)
		return nil
	}, nil)
	cfg.HeartbeatInterval = 200 * time.Millisecond
	produced := 0
	handledAll := func(what string) {
		t.Helper()
		waitFor(t, what, func() bool { u, _ := b.counts(); return u == produced })
	}

	// Dynamic members (no Instance): a static one does not leave.
	member := func(name string) (*Runtime, func() (*Report, error)) {
		c := cfg
		c.StatePath = filepath.Join(t.TempDir(), name+".db")
		rt, err := newRuntime(c)
		if err != nil {
			t.Fatal(err)
		}
		return rt, start(t, rt, context.Background())
	}
	rtA, waitA := member("a")
	rtB, waitB := member("b")
	waitFor(t, "a and b to own 2 partitions each", func() bool { return owned(rtA) == 2 && owned(rtB) == 2 })
	produced += b.produce(100)
	handledAll("the first 100 messages handled")

	// A leaves: with the heartbeats muted, B can only learn of it through
	// A's handover.
	mute.Store(true)
	stopAndWait(t, rtA, waitA)
	waitFor(t, "b to own a's partitions", func() bool { return owned(rtB) == 4 })
	produced += b.produce(100)
	handledAll("the next 100 messages handled by b")

	// C joins: B learns of it at a heartbeat, and revokes 2 partitions
	// in the first rebalance; C can learn of the second, which gives it
	// them, only through B's handover.
	armAt.Store(synced.Load())
	mute.Store(false)
	rtC, waitC := member("c")
	waitFor(t, "b and c to own 2 partitions each", func() bool { return owned(rtB) == 2 && owned(rtC) == 2 })
	if !mute.Load() {
		t.Fatal("the heartbeats were never muted: the test did not check what it meant to")
	}
	produced += b.produce(100)
	handledAll("the last 100 messages handled")

	mute.Store(false)
	armAt.Store(-1)
	stopAndWait(t, rtC, waitC)
	stopAndWait(t, rtB, waitB)
	unique, total := b.counts()
	if committed := b.committed(); unique != produced || committed != int64(produced) {
		t.Fatalf("produced %d, handled %d (%d times), committed %d", produced, unique, total, committed)
	}
	t.Logf("produced %d, handled %d (%d times), committed %d", produced, unique, total, produced)
}
