package runtime

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
)

// failFetches makes the broker answer every fetch of topic with errCode
// for each partition asked for while on is set.
func failFetches(c *kfake.Cluster, topic string, errCode int16, on *atomic.Bool) {
	id := c.TopicInfo(topic).TopicID
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.FetchRequest)
		if !on.Load() {
			return nil, nil, false
		}
		ours := false
		for _, rt := range req.Topics {
			if rt.Topic == topic || rt.TopicID == id {
				ours = true
			}
		}
		if !ours {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = errCode
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// TestPartitionStuck: a partition whose fetches fail for good. Before,
// the runtime stayed ready (so did /readyz), no metric but the error
// counter showed it and nothing said which partition was stuck. Now,
// past StuckAfter, Ready is false, handoff_stuck_partitions is 1 with
// handoff_partition_stuck_seconds for the partition, one ERROR names it;
// the failed fetches back off (a handful a second, not a loop); and once
// the fetches succeed again all of it clears and the messages produced
// meanwhile are handled.
func TestPartitionStuck(t *testing.T) {
	t.Parallel()
	b, cfg, reg, stuckLines := stuckSetup(t, "fetch has failed")
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	const before, during = 10, 7
	b.produce(before)
	waitFor(t, "the first messages handled", func() bool { u, _ := b.counts(); return u == before })
	waitFor(t, "ready", rt.Ready)

	var failing atomic.Bool
	failing.Store(true)
	failFetches(b.broker.Cluster(), "orders", kerr.UnknownServerError.Code, &failing)
	b.produce(during)
	errs := func() float64 {
		v, _ := metricValue(t, reg, "handoff_fetch_errors_total", "topic", "orders")
		return v
	}
	waitFor(t, "the first failed fetch", func() bool { return errs() > 0 })
	first, firstAt := errs(), time.Now()
	waitFor(t, "not ready", func() bool { return !rt.Ready() })
	// The failed fetches back off: their rate over the time to stuck.
	if n, d := errs()-first, time.Since(firstAt); n > 20*d.Seconds()+5 {
		t.Errorf("%v failed fetches in %v: no backoff", n, d.Round(time.Millisecond))
	}
	if n := plainGauge(t, reg, "handoff_stuck_partitions"); n != 1 {
		t.Errorf("handoff_stuck_partitions = %v, want 1", n)
	}
	if s, ok := metricValue(t, reg, "handoff_partition_stuck_seconds", "partition", "0"); !ok || s < cfg.StuckAfter.Seconds() {
		t.Errorf("handoff_partition_stuck_seconds{partition=\"0\"} = %v (present %v), want at least %v", s, ok, cfg.StuckAfter.Seconds())
	}
	if n := stuckLines.Load(); n != 1 {
		t.Errorf("%d ERROR lines for the stuck partition, want 1", n)
	}
	if u, _ := b.counts(); u != before {
		t.Errorf("%d messages handled while no fetch succeeded, want %d", u, before)
	}

	failing.Store(false)
	waitFor(t, "ready again", rt.Ready)
	if n := plainGauge(t, reg, "handoff_stuck_partitions"); n != 0 {
		t.Errorf("handoff_stuck_partitions = %v after the fetches succeeded, want 0", n)
	}
	if _, ok := metricValue(t, reg, "handoff_partition_stuck_seconds", "partition", "0"); ok {
		t.Error("handoff_partition_stuck_seconds still has the partition's series")
	}
	waitFor(t, "the messages produced meanwhile handled", func() bool { u, _ := b.counts(); return u == before+during })
	if n := stuckLines.Load(); n != 1 {
		t.Errorf("%d ERROR lines for the stuck partition, want 1", n)
	}
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if got := b.committed(); got != before+during {
		t.Errorf("committed %d, want %d", got, before+during)
	}
}

// plainGauge returns the value of the gauge name, which has no labels;
// -1 when it is not there.
func plainGauge(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// TestPartitionStuckInRestore: the changelog's bounds cannot be read, so
// the assigned partition's state is not restored and it is never
// fetched. Before, nothing but the restore's ERROR at each retry said so:
// no metric, and a later rebalance's restore left the runtime ready. Now,
// past StuckAfter, handoff_stuck_partitions is 1, one ERROR says the
// partition is stuck in its restore, and once the changelog answers
// again the partition is restored, ready, and its messages handled.
func TestPartitionStuckInRestore(t *testing.T) {
	t.Parallel()
	b, cfg, reg, stuckLines := stuckSetup(t, "restore from the changelog has failed")
	c := b.broker.Cluster()
	var failing atomic.Bool
	failing.Store(true)
	c.ControlKey(int16(kmsg.ListOffsets), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.ListOffsetsRequest)
		if !failing.Load() || len(req.Topics) == 0 || !strings.HasSuffix(req.Topics[0].Topic, ".orders.handoff-changelog") {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.UnknownServerError.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	const n = 6
	b.produce(n)
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "the partition stuck in its restore", func() bool { return plainGauge(t, reg, "handoff_stuck_partitions") == 1 })
	if s, ok := metricValue(t, reg, "handoff_partition_stuck_seconds", "topic", "orders"); !ok || s < cfg.StuckAfter.Seconds() {
		t.Errorf("handoff_partition_stuck_seconds{topic=\"orders\"} = %v (present %v), want at least %v", s, ok, cfg.StuckAfter.Seconds())
	}
	waitFor(t, "the stuck ERROR", func() bool { return stuckLines.Load() > 0 })
	if rt.Ready() {
		t.Error("ready with the partition stuck in its restore")
	}
	if u, _ := b.counts(); u != 0 {
		t.Errorf("%d messages handled before the partition's restore, want 0", u)
	}
	failing.Store(false)
	waitFor(t, "ready", rt.Ready)
	waitFor(t, "the messages handled", func() bool { u, _ := b.counts(); return u == n })
	if got := plainGauge(t, reg, "handoff_stuck_partitions"); got != 0 {
		t.Errorf("handoff_stuck_partitions = %v after the restore, want 0", got)
	}
	if got := stuckLines.Load(); got != 1 {
		t.Errorf("%d stuck ERROR lines, want 1", got)
	}
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if got := b.committed(); got != n {
		t.Errorf("committed %d, want %d", got, n)
	}
}

// stuckSetup is the start of the stuck tests: a broker with topic orders
// of one partition, a config whose handler records each message, with
// StuckAfter 1s and a registry, and the count of the ERROR lines saying
// a partition is stuck because its what ("fetch has failed") did.
func stuckSetup(t *testing.T, what string) (*bundle, Config, *prometheus.Registry, *atomic.Int64) {
	t.Helper()
	b := setup(t, 1, "orders")
	reg := prometheus.NewRegistry()
	log, stuckLines := countLogs(t, "partition stuck: its "+what+" for longer than StuckAfter with no success since; the instance is not ready until it succeeds")
	cfg := b.config(func(_ context.Context, m *handoff.Message) error {
		b.record(m)
		return nil
	}, nil)
	cfg.Registerer = reg
	cfg.Logger = log
	cfg.StuckAfter = time.Second
	return b, cfg, reg, stuckLines
}
