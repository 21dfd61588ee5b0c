package runtime

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoff-go/handoff"
)

// lagSeries returns the consumer lag series gathered from reg, by
// partition label.
func lagSeries(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "partition" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// metricValue returns the value of gauge or counter name's series whose
// label is value, or of its only series when label is "".
func metricValue(t *testing.T, reg prometheus.Gatherer, name, label, value string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetName() == label && l.GetValue() == value
			}
			if match {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

const lagMetric = "handoff_consumer_lag_messages"

// TestConsumerLag: the first 50 messages (or none) are handled, then
// every handler hangs with 1,000 messages backed up. The lag series of both partitions
// are there and add up to produced minus what the group committed (read
// from the broker), although no commit moves; the oldest unsettled
// message's age is above zero. A second instance joining takes one
// partition: its series leaves the first instance's metrics. At the stop
// the rest go. Before, the only lag metric was set when a commit moved an
// offset and was never removed: with the handlers hung there was no
// series at all.
func TestConsumerLag(t *testing.T) {
	t.Parallel()
	for _, okFirst := range []int64{0, 50} {
		t.Run(fmt.Sprintf("%d handled first", okFirst), func(t *testing.T) {
			t.Parallel()
			testConsumerLag(t, okFirst)
		})
	}
}

func testConsumerLag(t *testing.T, okFirst int64) {
	b := setup(t, 2, "lag")
	produced := b.produce(1000)
	release := make(chan struct{})
	var n atomic.Int64
	reg := prometheus.NewRegistry()
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		if n.Add(1) > okFirst {
			select {
			case <-release:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		return nil
	}, nil)
	cfg.Registerer = reg
	cfg.RevokeTimeout = 200 * time.Millisecond
	cfg.Instance = "a"
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "ready", rt.Ready)
	waitFor(t, "handlers hung", func() bool { return n.Load() > okFirst })
	var lag map[string]float64
	var committed int64
	waitFor(t, "lag of both partitions = produced - committed", func() bool {
		committed = b.committed()
		lag = lagSeries(t, reg, lagMetric)
		sum := 0.0
		for _, v := range lag {
			sum += v
		}
		return len(lag) == 2 && (committed > 0) == (okFirst > 0) && int64(sum) == int64(produced)-committed
	})
	t.Logf("produced %d, committed %d, lag %v", produced, committed, lag)
	if age, ok := metricValue(t, reg, "handoff_oldest_unsettled_age_seconds", "class", "lag"); !ok || age <= 0 {
		t.Errorf("oldest unsettled age = %v (present %v), want > 0 with hung handlers", age, ok)
	}

	// A second instance takes a partition.
	cfgB := b.config(func(context.Context, *handoff.Message) error { return nil }, nil)
	cfgB.RevokeTimeout = cfg.RevokeTimeout
	rtB, waitB := b.instance("b", cfgB)
	waitFor(t, "one partition left on instance a", func() bool {
		lag = lagSeries(t, reg, lagMetric)
		return len(lag) == 1 && rtB.Ready()
	})
	t.Logf("after the rebalance, instance a's lag series: %v", lag)

	close(release)
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if lag := lagSeries(t, reg, lagMetric); len(lag) != 0 {
		t.Errorf("lag series after the stop: %v", lag)
	}
	rtB.Shutdown(context.Background())
	if _, err := waitB(); err != nil {
		t.Fatal(err)
	}
}

// TestLagAfterRestartIdle: 10 messages are handled and committed, the
// instance stops and starts again with nothing new to read. Its lag is
// 0 on every partition. Before, on franz-go, the trackers of the
// restarted instance knew no committed offset (franz-go resumes from the
// group's, unseen by the runtime) and, no commit ever coming on an idle
// partition, the lag sampler counted from the partitions' first offsets:
// lag 10 for 10 messages all committed. kafka-go's trackers start at the
// committed offset its generation reports.
func TestLagAfterRestartIdle(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "idle")
	produced := b.produce(10)
	cfg := b.config(func(_ context.Context, m *handoff.Message) error {
		b.record(m)
		return nil
	}, nil)
	cfg.Registerer = prometheus.NewRegistry()
	rt, wait := startNew(t, cfg)
	waitFor(t, "all handled", func() bool { _, n := b.counts(); return n == produced })
	waitFor(t, "all committed", func() bool { return b.committed() == int64(produced) })
	shutdownAndWait(t, rt, wait)

	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	rt, wait = startNew(t, cfg)
	var lag map[string]float64
	waitFor(t, "lag series of both partitions", func() bool {
		lag = lagSeries(t, reg, lagMetric)
		return len(lag) == 2
	})
	for p, v := range lag {
		if v != 0 {
			t.Errorf("partition %s: lag %v after a restart with all %d messages committed, want 0", p, v, produced)
		}
	}
	shutdownAndWait(t, rt, wait)
	if _, total := b.counts(); total != produced {
		t.Errorf("handled %d times, want %d", total, produced)
	}
}
