package runtime

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/pool"
	"github.com/handoff-go/handoff/runtime/internal/hold"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestSchedulerDueOrder builds the scheduler on a real state file and a
// real pool, without a Runtime, under a fake clock: scheduled messages
// reach their pool at their due time, in due order whatever the order
// they were scheduled in, a message scheduled behind the scheduler's
// cursor is not missed, and a message of a class no longer configured
// becomes a dead letter.
func TestSchedulerDueOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		at := func(d time.Duration) time.Time { return start.Add(d) }
		// An orphan: a delayed record of a class no longer configured, in
		// the file as an older run left it.
		_, state := openState(t, func(path string) {
			snapshottest.SeedDelayed(t, path, snapshot.Delayed{Due: at(1500 * time.Millisecond),
				Record: snapshot.Record{Message: handoff.Message{ID: "gone", Class: "retired"}, Reason: reasonScheduled}})
		})
		log := slog.New(slog.DiscardHandler)
		var mu sync.Mutex
		type delivery struct {
			id string
			at time.Duration
		}
		var got []delivery
		p, err := pool.New(pool.Config[*item]{Name: "jobs", Workers: 2, QueueSize: 16,
			Handler: func(_ context.Context, it *item) error {
				mu.Lock()
				got = append(got, delivery{it.env().ID, time.Since(start)})
				mu.Unlock()
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		c := &class{cfg: Class{Name: "jobs"}, pool: p}
		c.hold = hold.New(hold.Config[*item]{Class: "jobs", Pool: p, Log: log, Rewind: func(time.Time) {}, Backoff: probeBackoff})
		tl := &tally{classes: []*class{c}}
		var accepting atomic.Bool
		fail := newFailures(failuresConfig{state: state, tally: tl, classes: map[string]*class{"jobs": c}, accepting: &accepting, log: log})
		s := newScheduler(schedulerConfig{state: state, tally: tl, classes: map[string]*class{"jobs": c}, fail: fail, log: log})
		state.sched = s
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { s.run(ctx) })

		for _, m := range []struct {
			id  string
			due time.Duration
		}{{"c", 3 * time.Second}, {"a", time.Second}, {"b", 2 * time.Second}} {
			if err := s.schedule(c, handoff.Message{ID: m.id, Class: "jobs"}, at(m.due)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		// Behind the cursor (b at 2s has been read): due at once.
		if err := s.schedule(c, handoff.Message{ID: "late", Class: "jobs"}, at(2200*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		cancel()
		wg.Wait()
		p.Stop(time.Second, context.Canceled)

		mu.Lock()
		defer mu.Unlock()
		want := []delivery{{"a", time.Second}, {"b", 2 * time.Second}, {"late", 2500 * time.Millisecond}, {"c", 3 * time.Second}}
		if len(got) != len(want) {
			t.Fatalf("delivered %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("delivery %d: %v, want %v", i, got[i], want[i])
			}
		}
		if orphans := tl.total(evDeadLettered); orphans != 1 || tl.total(evDelivered) != 4 || tl.total(evScheduled) != 4 {
			t.Errorf("orphans %d, delivered %d, scheduled %d; want 1, 4, 4", orphans, tl.total(evDelivered), tl.total(evScheduled))
		}
	})
}
