package kclient

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/testio"
)

// TestConsumerProtocolCommit: a franz-go member of the consumer group
// protocol (KIP-848) joins through ConsumerGroupHeartbeat, and its
// Commit sends its member epoch as the OffsetCommit's generation. A
// commit refused STALE_MEMBER_EPOCH (the heartbeat that moved the epoch
// on was answered after the commit was sent: Kafka before 4.3 refuses
// it) is sent again and gets through; one refused every time fails
// after staleTries more tries, within CommitTimeout, and is Fenced: the
// stop's final commit counts it as a generation that ended.
func TestConsumerProtocolCommit(t *testing.T) {
	t.Parallel()
	b, err := devbroker.Start(devbroker.Config{Topics: []string{"orders"}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	testio.ConsumerGroupTimers(t, b.Addrs())
	var heartbeats atomic.Int64
	cluster := b.Cluster()
	cluster.ControlKey(int16(kmsg.ConsumerGroupHeartbeat), func(kmsg.Request) (kmsg.Response, error, bool) {
		heartbeats.Add(1)
		return nil, nil, false
	})
	cfg := Config{Client: FranzGo, Consumer: true, Brokers: b.Addrs(), ClientID: "test", Group: "g",
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
	if heartbeats.Load() == 0 {
		t.Fatal("the member joined without a ConsumerGroupHeartbeat: not the consumer protocol")
	}
	_, epoch := cl.(*franzGo).cl.GroupMetadata()

	var sent, refuse atomic.Int64
	var mu sync.Mutex
	var gens []int32 // of the commits sent, under mu
	cluster.ControlKey(int16(kmsg.OffsetCommit), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := kreq.(*kmsg.OffsetCommitRequest)
		if req.Group != "g" {
			return nil, nil, false
		}
		sent.Add(1)
		mu.Lock()
		gens = append(gens, req.Generation)
		mu.Unlock()
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
				sp.ErrorCode = kerr.StaleMemberEpoch.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	// Refused once, then through.
	refuse.Store(1)
	if err := k.s.Commit(map[string]map[int]int64{"orders": {0: 5, 1: 7}}); err != nil {
		t.Fatalf("commit refused STALE_MEMBER_EPOCH once: %v, want it sent again until it gets through", err)
	}
	if n := sent.Load(); n != 2 {
		t.Errorf("sent %d times, want 2", n)
	}
	mu.Lock()
	for _, g := range gens {
		if g != epoch || g <= 0 {
			t.Errorf("commit sent in generation %d, want the member epoch %d", g, epoch)
		}
	}
	mu.Unlock()
	got, err := cl.Committed(context.Background(), []Partition{{"orders", 0}, {"orders", 1}})
	if err != nil || got[Partition{"orders", 0}] != 5 || got[Partition{"orders", 1}] != 7 {
		t.Errorf("committed %v (%v), want orders/0 at 5 and orders/1 at 7", got, err)
	}

	// Refused every time, the epoch unchanged.
	refuse.Store(1 << 20)
	sent.Store(0)
	began := time.Now()
	err = k.s.Commit(map[string]map[int]int64{"orders": {0: 9}})
	took := time.Since(began)
	if !errors.Is(err, kerr.StaleMemberEpoch) || !Fenced(err) {
		t.Errorf("commit refused STALE_MEMBER_EPOCH for good: %v (Fenced %v), want STALE_MEMBER_EPOCH, fenced", err, Fenced(err))
	}
	if n := sent.Load(); n != staleTries+1 || took >= CommitTimeout/2 {
		t.Errorf("refused commit sent %d times in %s, want %d, within %s", n, took, staleTries+1, CommitTimeout/2)
	}
	refuse.Store(0)
}

// TestConsumerProtocolRefused: kafka-go has no consumer group protocol,
// and New says so, naming the client it needs; and a franz-go member
// asked for it by brokers that do not serve ConsumerGroupHeartbeat
// version 1 fails its Join (kgo would join with the classic protocol
// without a word).
func TestConsumerProtocolRefused(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Client: KafkaGo, Consumer: true, Log: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "consumer group protocol") || !strings.Contains(err.Error(), FranzGo) {
		t.Errorf("New(kafka-go, consumer protocol) = %v, want an error naming the protocol and %s", err, FranzGo)
	}

	b, err := devbroker.Start(devbroker.Config{Topics: []string{"orders"}, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cluster := b.Cluster()
	cluster.ControlKey(int16(kmsg.ApiVersions), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := kreq.(*kmsg.ApiVersionsRequest)
		resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
		resp.Version = req.Version
		for _, k := range []kmsg.Key{kmsg.Metadata, kmsg.ApiVersions, kmsg.FindCoordinator} {
			v := kmsg.NewApiVersionsResponseApiKey()
			v.ApiKey, v.MinVersion, v.MaxVersion = int16(k), 0, k.Request().MaxVersion()
			resp.ApiKeys = append(resp.ApiKeys, v)
		}
		return resp, nil, true
	})
	cl, err := New(Config{Client: FranzGo, Consumer: true, Brokers: b.Addrs(), ClientID: "test", Group: "g",
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second, FetchMaxWait: 100 * time.Millisecond,
		FetchQueue: 10, Log: slog.New(slog.DiscardHandler), WarnFunc: warnNow, FetchErrorFunc: func(string) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(time.Now().Add(time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = cl.Join(ctx, []string{"orders"}, func(_ context.Context, s Session) Keeper {
		return &commitKeeper{assigned: make(chan struct{}, 1)}
	})
	if err == nil || !strings.Contains(err.Error(), "GroupProtocol consumer") || !strings.Contains(err.Error(), "ConsumerGroupHeartbeat") {
		t.Errorf("Join against brokers without the consumer protocol = %v, want an error naming GroupProtocol consumer", err)
	}
	cl.Wait()
}

// TestConsumerProtocolFallbackLogged: brokers that list
// ConsumerGroupHeartbeat version 1 but answer it UNSUPPORTED_VERSION (the
// protocol is not enabled) make kgo join with the classic protocol; the
// member works, and says so at Error, naming the option.
func TestConsumerProtocolFallbackLogged(t *testing.T) {
	t.Parallel()
	b, err := devbroker.Start(devbroker.Config{Topics: []string{"orders"}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cluster := b.Cluster()
	cluster.ControlKey(int16(kmsg.ConsumerGroupHeartbeat), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		resp := kreq.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		resp.Version = kreq.GetVersion()
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		return resp, nil, true
	})
	var logs testio.SyncBuffer
	cfg := Config{Client: FranzGo, Consumer: true, Brokers: b.Addrs(), ClientID: "test", Group: "g",
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second, FetchMaxWait: 100 * time.Millisecond,
		FetchQueue: 10, Log: slog.New(slog.NewTextHandler(&logs, nil)), WarnFunc: warnNow, FetchErrorFunc: func(string) {}}
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
		t.Fatal("no assignment after the fallback to the classic protocol")
	}
	out := logs.String()
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "GroupProtocol consumer") || !strings.Contains(out, "joined with the classic protocol") {
		t.Errorf("the fallback to the classic protocol was not logged at Error naming the option:\n%s", out)
	}
}
