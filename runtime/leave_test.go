package runtime

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
)

// TestStopDuringJoin: a runtime stopped while its JoinGroup is parked in
// the broker (the group waits for another member to rejoin) must not
// return before it has left the group. Before, the stop gave up leaving
// after 1s; the process then exited, the join completed without it, and
// the generation it formed gave partitions to a member that was gone (they
// stalled until its session expired, or, on the embedded broker, for
// good). Issue 11, item 4.
func TestStopDuringJoin(t *testing.T) {
	t.Parallel()
	classicOnly(t, "a stop while its JoinGroup is parked in the broker")
	b := setup(t, 2, "orders")
	cluster := b.broker.Cluster()
	var joins, leaves atomic.Int64
	cluster.ControlKey(int16(kmsg.JoinGroup), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if kreq.(*kmsg.JoinGroupRequest).Group == b.group {
			joins.Add(1)
		}
		return nil, nil, false
	})
	cluster.ControlKey(int16(kmsg.LeaveGroup), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if kreq.(*kmsg.LeaveGroupRequest).Group == b.group {
			leaves.Add(1)
		}
		return nil, nil, false
	})

	// Member A holds the group and is slow to rejoin: its generation's
	// work returns only once released, and kafka-go rejoins only after it.
	cgA, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID: b.group, Brokers: b.broker.Addrs(), Topics: []string{"orders"},
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 20 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
		Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	releaseA := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(releaseA) }) }
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		for {
			gen, err := cgA.Next(context.Background())
			if err != nil {
				return
			}
			gen.Start(func(context.Context) { <-releaseA })
		}
	}()
	t.Cleanup(func() { release(); cgA.Close(); <-aDone })
	waitFor(t, "A joined", func() bool { return joins.Load() >= 1 })
	waitFor(t, "A's generation", func() bool {
		gi := cluster.GroupInfo(b.group)
		return gi != nil && gi.State == "Stable"
	})

	cfg := b.config(func(context.Context, *handoff.Message) error { return nil }, nil)
	cfg.RebalanceTimeout = 20 * time.Second
	cfg.DrainTimeout = 5 * time.Second
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait := start(t, rt, ctx)
	// Parked: the group waits for A to rejoin. (franz-go's first join is
	// answered MEMBER_ID_REQUIRED, KIP-394, and does not count.)
	waitFor(t, "the runtime's join parked", func() bool {
		gi := cluster.GroupInfo(b.group)
		return joins.Load() >= 2 && gi != nil && gi.State == "PreparingRebalance"
	})
	cancel()
	// A rejoins 1.5s after the stop began, later than the old fixed wait.
	time.AfterFunc(1500*time.Millisecond, release)
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if leaves.Load() == 0 {
		t.Fatalf("Run returned (leave phase %s) before the runtime left the group", rep.Leave)
	}
	t.Logf("stop %s, leave phase %s; joins %d, leaves %d", rep.Stop.Round(time.Millisecond), rep.Leave.Round(time.Millisecond), joins.Load(), leaves.Load())
}

// TestStopLeaveCoordinatorLookupFails: the stop's leave finds the group's
// coordinator unavailable once (a broker restarting, a coordinator
// moving). The runtime still leaves: right after Run returns the group
// has no member. Before, on kafka-go, its leave logged "Leaving group"
// and then failed in its coordinator lookup without a word; the member
// watch took the line for a leave, sent none of its own, and the broker
// kept the member (giving it partitions) until its session expired.
func TestStopLeaveCoordinatorLookupFails(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	cluster := b.broker.Cluster()
	cfg := b.config(func(context.Context, *handoff.Message) error { return nil }, nil)
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	rt, wait := startNew(t, cfg)
	waitFor(t, "ready", rt.Ready)
	waitFor(t, "one stable member", func() bool {
		gi := cluster.GroupInfo(b.group)
		return gi != nil && gi.State == "Stable" && len(gi.Members) == 1
	})
	// The lag sampler has asked the group's committed offsets (its one
	// coordinator lookup): the next lookup of the group is the leave's.
	waitFor(t, "lag sampled", func() bool { return len(lagSeries(t, reg, lagMetric)) == 2 })
	var refused atomic.Int64
	cluster.ControlKey(int16(kmsg.FindCoordinator), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.FindCoordinatorRequest)
		resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
		unavailable := kerr.CoordinatorNotAvailable.Code
		switch {
		case req.CoordinatorKey == b.group && len(req.CoordinatorKeys) == 0:
			resp.ErrorCode = unavailable
		case slices.Contains(req.CoordinatorKeys, b.group):
			for _, k := range req.CoordinatorKeys {
				c := kmsg.NewFindCoordinatorResponseCoordinator()
				c.Key, c.ErrorCode, c.NodeID = k, unavailable, -1
				resp.Coordinators = append(resp.Coordinators, c)
			}
		default:
			cluster.KeepControl() // not the group's: wait for its lookup
			return nil, nil, false
		}
		refused.Add(1)
		return resp, nil, true
	})
	stopAndWait(t, rt, wait)
	if gi := cluster.GroupInfo(b.group); gi != nil && len(gi.Members) > 0 {
		t.Errorf("after the stop (coordinator lookups refused: %d) the group still has %d member(s), want none", refused.Load(), len(gi.Members))
	}
	// franz-go keeps the coordinator it found: its leave asks none.
	if testClient() == ClientKafkaGo && refused.Load() == 0 {
		t.Error("no coordinator lookup of the group was refused: the test did not reach kafka-go's leave")
	}
	t.Logf("coordinator lookups refused: %d", refused.Load())
}
