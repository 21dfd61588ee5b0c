package runtime

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/handoff-go/handoff"
)

// TestDrainBudget: with handlers of ~20ms on 2 workers, 100 queued
// messages need about 1s to drain; with a 200ms DrainTimeout the class is
// over budget, and the estimate follows queue ÷ rate. Once the queue is
// small it is within budget again. The metrics say the same.
func TestDrainBudget(t *testing.T) {
	t.Parallel()
	state := t.TempDir() + "/s.db"
	release := make(chan struct{})
	reg := prometheus.NewRegistry()
	const work = 20 * time.Millisecond
	cfg := Config{StatePath: state, DrainTimeout: 200 * time.Millisecond, Logger: testLogger(t), Registerer: reg,
		Classes: []Class{{Name: "mail", Workers: 2, QueueSize: 200, Handler: func(ctx context.Context, m *handoff.Message) error {
			if m.ID >= "hold" {
				<-release
			}
			time.Sleep(work) // simulated work: what the estimate measures
			return nil
		}}}}
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "ready", rt.Ready)
	// 40 messages teach the estimator the handler time.
	for i := range 40 {
		rt.Submit(context.Background(), "mail", &handoff.Message{ID: "a" + string(rune('0'+i/10)) + string(rune('0'+i%10))})
	}
	waitFor(t, "warm-up", func() bool { return rt.Stats()[0].Succeeded == 40 })
	// Now block the workers and queue 100.
	for i := range 102 {
		rt.Submit(context.Background(), "mail", &handoff.Message{ID: "hold" + string(rune('0'+i/100)) + string(rune('0'+i/10%10)) + string(rune('0'+i%10))})
	}
	cs := rt.Stats()[0]
	// 102 in flight × ~20ms / 2 workers ≈ 1.02s; the measured handler
	// time is at least 20ms, so the estimate is at least that.
	lower := 102 * work.Seconds() / 2
	if !cs.OverBudget || cs.DrainEstimate < lower*0.95 || cs.DrainEstimate > lower*5 {
		t.Errorf("estimate %.3fs (rate %.1f/s), over budget %v; want about %.2fs and over budget", cs.DrainEstimate, cs.Rate, cs.OverBudget, lower)
	}
	if cs.Rate <= 0 || cs.Rate > 2/work.Seconds()*1.05 {
		t.Errorf("rate %.1f/s, want at most %.1f/s", cs.Rate, 2/work.Seconds())
	}
	// The watcher publishes it within a second or two.
	waitFor(t, "over-budget metric", func() bool {
		return testutil.ToFloat64(rt.metrics.overBudget.WithLabelValues("mail")) == 1
	})
	close(release)
	waitFor(t, "drained", func() bool { s := rt.Stats()[0]; return s.Queued+s.Running == 0 })
	if cs := rt.Stats()[0]; cs.OverBudget || cs.DrainEstimate != 0 {
		t.Errorf("idle class: %+v", cs)
	}
	// The state file's buckets, counted once per scrape.
	scraped, err := testutil.CollectAndFormat(reg, expfmt.TypeTextPlain, "handoff_state_records")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`handoff_state_records{bucket="pending"} 0`, `handoff_state_records{bucket="dead"} 0`, `handoff_state_records{bucket="parked"} 0`, `handoff_state_records{bucket="delayed"} 0`} {
		if !strings.Contains(string(scraped), want) {
			t.Errorf("metrics lack %s:\n%s", want, scraped)
		}
	}
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	// Metrics of the stop and of outcomes are there.
	out, err := testutil.CollectAndFormat(reg, expfmt.TypeTextPlain, "handoff_messages_total", "handoff_stop_phase_duration_seconds", "handoff_snapshot_messages")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`handoff_messages_total{class="mail",outcome="succeeded"} 142`, `phase="drain"`, `phase="snapshot"`, "handoff_snapshot_messages 0"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("metrics lack %s:\n%s", want, out)
		}
	}
}

// TestDrainEstimateLearnsFirstCalls: the first calls of a class are all
// timed for the drain estimate, whatever the 1-in-8 sample picks: after
// learnSamples submitted messages the estimate knows the handler time.
// With the sample alone, 16 calls left it unknown in (7/8)^16 ≈ 12% of
// runs (and TestDrainBudget's 40 in 0.5%).
func TestDrainEstimateLearnsFirstCalls(t *testing.T) {
	t.Parallel()
	const work = 5 * time.Millisecond
	cfg := Config{StatePath: t.TempDir() + "/s.db", Logger: testLogger(t), Registerer: prometheus.NewRegistry(),
		Classes: []Class{{Name: "mail", Workers: 1, QueueSize: 32, Handler: func(ctx context.Context, m *handoff.Message) error {
			time.Sleep(work)
			return nil
		}}}}
	rt, wait := startNew(t, cfg)
	waitFor(t, "ready", rt.Ready)
	for i := range learnSamples {
		rt.Submit(context.Background(), "mail", &handoff.Message{ID: fmt.Sprintf("m%02d", i)})
	}
	waitFor(t, "all handled", func() bool { return rt.Stats()[0].Succeeded == learnSamples })
	stopAndWait(t, rt, wait)
	if m := rt.classes.order[0].meanTime(0, 0); m < work.Seconds() {
		t.Errorf("handler time learned %.4fs after %d calls, want at least %s", m, learnSamples, work)
	}
}
