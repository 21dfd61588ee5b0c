package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
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
	rt, err := New(cfg)
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
