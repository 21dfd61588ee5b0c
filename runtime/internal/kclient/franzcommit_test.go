package kclient

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff/devbroker"
)

// TestFranzCommitRefusals: franz-go's Commit sends its OffsetCommit
// itself (it does not wait for a join in progress, see Commit). A commit
// the broker refuses REBALANCE_IN_PROGRESS (between a join's answer and
// its sync) is sent again until it gets through; one refused
// ILLEGAL_GENERATION while the member still holds that generation (it
// was fenced) fails after staleTries more tries, well within
// CommitTimeout, naming the error.
func TestFranzCommitRefusals(t *testing.T) {
	t.Parallel()
	b, err := devbroker.Start(devbroker.Config{Topics: []string{"orders"}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := Config{Client: FranzGo, Brokers: b.Addrs(), ClientID: "test", Group: "g",
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second, FetchMaxWait: 100 * time.Millisecond,
		FetchQueue: 10, Log: slog.New(slog.DiscardHandler), WarnFunc: warnNow, FetchErrorFunc: func(string) {}}
	cl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(time.Now().Add(time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := &commitKeeper{assigned: make(chan struct{}, 1)}
	if err := cl.Join(ctx, []string{"orders"}, func(_ context.Context, s Session) Keeper { k.s = s; return k }); err != nil {
		t.Fatal(err)
	}
	defer cl.Wait()
	defer cancel()
	select {
	case <-k.assigned:
	case <-time.After(30 * time.Second):
		t.Fatal("no assignment")
	}

	var sent, refuse atomic.Int64
	var code atomic.Int32
	cluster := b.Cluster()
	cluster.ControlKey(int16(kmsg.OffsetCommit), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := kreq.(*kmsg.OffsetCommitRequest)
		if req.Group != "g" {
			return nil, nil, false
		}
		sent.Add(1)
		if refuse.Add(-1) < 0 {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		resp.Version = req.Version
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = int16(code.Load())
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	// Refused twice during a "sync", then through.
	code.Store(int32(kerr.RebalanceInProgress.Code))
	refuse.Store(2)
	if err := k.s.Commit(map[string]map[int]int64{"orders": {0: 5, 1: 7}}); err != nil {
		t.Fatalf("commit refused REBALANCE_IN_PROGRESS twice: %v, want it sent again until it gets through", err)
	}
	if n := sent.Load(); n != 3 {
		t.Errorf("sent %d times, want 3", n)
	}
	got, err := cl.Committed(context.Background(), []Partition{{"orders", 0}, {"orders", 1}})
	if err != nil || got[Partition{"orders", 0}] != 5 || got[Partition{"orders", 1}] != 7 {
		t.Errorf("committed %v (%v), want orders/0 at 5 and orders/1 at 7", got, err)
	}

	// Fenced: ILLEGAL_GENERATION every time, the generation unchanged.
	code.Store(int32(kerr.IllegalGeneration.Code))
	refuse.Store(1 << 20)
	sent.Store(0)
	began := time.Now()
	err = k.s.Commit(map[string]map[int]int64{"orders": {0: 9}})
	took := time.Since(began)
	if !errors.Is(err, kerr.IllegalGeneration) {
		t.Errorf("fenced commit: %v, want ILLEGAL_GENERATION", err)
	}
	if n := sent.Load(); n != staleTries+1 || took >= CommitTimeout/2 {
		t.Errorf("fenced commit sent %d times in %s, want %d, within %s", n, took, staleTries+1, CommitTimeout/2)
	}
	refuse.Store(0)
}

// commitKeeper is a Keeper that only says when partitions were assigned.
type commitKeeper struct {
	s        Session
	assigned chan struct{}
}

func (k *commitKeeper) Keep(end context.Context) { <-end.Done() }

func (k *commitKeeper) Assign(_ int32, ps []Assigned) {
	if len(ps) > 0 {
		select {
		case k.assigned <- struct{}{}:
		default:
		}
	}
}

func (k *commitKeeper) Revoke([]Partition, bool) {}
func (k *commitKeeper) Quiesce()                 {}
