package runtime

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/handoff-go/handoff"
)

// TestDrainBudgetHungHandlers: one fast permanent failure teaches the
// estimator a handler time of microseconds, then every handler hangs.
// Within one DrainTimeout the class must show over budget, the watcher
// must warn and the metric must say 1. Before running handlers counted,
// the estimate stayed at microseconds and nothing warned.
func TestDrainBudgetHungHandlers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const drain = 2 * time.Second
		log, warned := countLogs(t, "queued work would not drain within DrainTimeout; a stop now would snapshot part of it")
		reg := prometheus.NewRegistry()
		rt, err := newRuntime(Config{StatePath: t.TempDir() + "/s.db", DrainTimeout: drain, HardStopGrace: time.Second,
			Logger: log, Registerer: reg,
			Classes: []Class{{Name: "hang", Workers: 2, QueueSize: 10, Handler: func(ctx context.Context, m *handoff.Message) error {
				if m.ID == "fast" {
					return handoff.Permanent(errors.New("bad input"))
				}
				<-ctx.Done() // hung until the hard stop
				return context.Cause(ctx)
			}}}})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := rt.Run(context.Background()); done <- err }()
		for !rt.Ready() {
			time.Sleep(time.Millisecond)
		}
		ctx := context.Background()
		if err := rt.Submit(ctx, "hang", &handoff.Message{ID: "fast"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for i := range 6 {
			if err := rt.Submit(ctx, "hang", &handoff.Message{ID: fmt.Sprint("m", i)}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(drain + 100*time.Millisecond) // the bubble's clock; the watcher looks every second
		synctest.Wait()
		cs := rt.Stats()[0]
		if !cs.OverBudget || cs.DrainEstimate <= drain.Seconds() {
			t.Errorf("after %s of hung handlers: estimate %.6fs, over budget %v; want over %s", drain, cs.DrainEstimate, cs.OverBudget, drain)
		}
		if cs.LongestRunning < drain.Seconds() {
			t.Errorf("LongestRunning = %.3fs, want at least %s", cs.LongestRunning, drain)
		}
		if warned.Load() == 0 {
			t.Error("no over-budget warning within one DrainTimeout")
		}
		if got := testutil.ToFloat64(rt.metrics.overBudget.WithLabelValues("hang")); got != 1 {
			t.Errorf("handoff_drain_over_budget = %v, want 1", got)
		}
		rt.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
