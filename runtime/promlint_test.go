package runtime

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/handoff-go/handoff"
)

// TestMetricsLint runs Prometheus' own linter over everything the
// runtime registers, on a running runtime with a Kafka class (so the lag
// series exist) after 8 successes and 8 failures (so the histogram, which
// times one call in 8, has its outcomes), and checks the names operators
// are told about are there, and that the error counter counts every
// failed call, timed or not.
// Before, the four handoff_state_records_* names, the commit lag without
// a unit and the missing counters failed it.
func TestMetricsLint(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "lint")
	reg := prometheus.NewRegistry()
	const n = 16
	done := make(chan struct{}, n)
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		defer func() { done <- struct{}{} }()
		if m.Origin.Offset >= n/2 {
			return handoff.Permanent(errors.New("bad"))
		}
		return nil
	}, nil)
	cfg.Registerer = reg
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	b.produce(n)
	for range n {
		<-done
	}
	waitFor(t, "lag series", func() bool { return len(lagSeries(t, reg, lagMetric)) == 1 })

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	for _, want := range []string{
		"handoff_messages_total", "handoff_handler_duration_seconds", "handoff_handler_errors_total",
		"handoff_rebalances_total", "handoff_commit_failures_total", "handoff_fetch_errors_total",
		"handoff_dead_letter_publish_failures_total", "handoff_state_records", "handoff_consumer_lag_messages",
		"handoff_oldest_unsettled_age_seconds", "handoff_drain_estimate_seconds", "handoff_drain_over_budget",
		"handoff_ready", "handoff_start_time_seconds", "handoff_pool_queued", "handoff_build_info", "handoff_drain_timeout_seconds",
		"handoff_state_write_failures_total", "handoff_dead_letter_oldest_age_seconds", "handoff_dead_letters_dropped_total",
		"handoff_dead_letter_ops_total",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("metric %s not registered", want)
		}
	}
	// The handler histogram has the outcome label.
	for _, mf := range mfs {
		if mf.GetName() != "handoff_handler_duration_seconds" {
			continue
		}
		outcomes := map[string]uint64{}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					outcomes[l.GetValue()] += m.GetHistogram().GetSampleCount()
				}
			}
		}
		// The fetch loop picks its first record and every 8th after it.
		if outcomes["succeeded"] != 1 || outcomes["failed"] != 1 {
			t.Errorf("handler histogram by outcome = %v, want one succeeded and one failed (offsets 0 and 8)", outcomes)
		}
	}
	for _, mf := range mfs {
		if mf.GetName() == "handoff_handler_errors_total" {
			if got := mf.GetMetric()[0].GetCounter().GetValue(); got != n/2 {
				t.Errorf("handoff_handler_errors_total = %v, want %d", got, n/2)
			}
		}
	}
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
}
