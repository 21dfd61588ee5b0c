package pool

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestDrainWaitsForDueRetries: a Drain with a deadline waits for the
// retries whose delay ends before it, and not for the others. Before
// Drain took its deadline into account it returned as soon as nothing ran,
// leaving the 50ms retry for Stop to hand back.
func TestDrainWaitsForDueRetries(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRuns()
		// Item 1 retries after 50ms, item 2 after 10s: with a 2s drain
		// only item 1's retry is due in time.
		h := setup(t, Config[item]{Workers: 2, Handler: r.failFirst,
			RetryFunc: func(it item, err error) (time.Duration, bool) {
				if it.id == 2 {
					return 10 * time.Second, true
				}
				return 50 * time.Millisecond, true
			}})
		h.mustSubmit(item{id: 1}, item{id: 2})
		r.next()
		r.next()
		synctest.Wait() // both failed and wait out their delays
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := h.p.Drain(ctx); err != nil {
			t.Fatalf("Drain: %v", err)
		}
		if took := time.Since(began); took != 50*time.Millisecond {
			t.Errorf("Drain took %s, want the 50ms until item 1's retry ran", took)
		}
		if err, ok := h.result(1); !ok || err != nil {
			t.Errorf("item 1: result (%v, %v), want handled by its retry during the drain", err, ok)
		}
		res := h.stop(0, nil)
		if got := ids(res.Waiting); len(got) != 1 || got[0] != 2 {
			t.Errorf("Stop's Waiting = %v, want [2]: its retry is due after the drain's deadline", got)
		}
		// Counting: 2 submitted = 1 handled + 1 handed back.
		if st := h.p.Stats(); st.Succeeded+uint64(len(res.Waiting)) != 2 {
			t.Errorf("succeeded %d + waiting %d, want 2", st.Succeeded, len(res.Waiting))
		}
	})
}

// TestDrainWithoutDeadlineSkipsRetries keeps the old rule for a Drain
// whose ctx has no deadline: it does not wait for any retry.
func TestDrainWithoutDeadlineSkipsRetries(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRuns()
		h := setup(t, Config[item]{Handler: r.failFirst, RetryFunc: retryAfter(50 * time.Millisecond)})
		h.mustSubmit(item{id: 1})
		r.next()
		synctest.Wait()
		began := time.Now()
		if err := h.p.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took != 0 {
			t.Errorf("Drain without deadline took %s, want 0", took)
		}
		r.next() // the retry runs after all
		h.drain()
	})
}

// TestRunningTimes: the running handlers are counted by the time they
// have run so far.
func TestRunningTimes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		h := setup(t, Config[item]{Workers: 2, Handler: g.handler})
		h.mustSubmit(item{id: 1})
		<-g.started
		time.Sleep(3 * time.Second) // the bubble's clock
		h.mustSubmit(item{id: 2})
		<-g.started
		time.Sleep(time.Second)
		total, longest := h.p.RunningTimes()
		if total != 5*time.Second || longest != 4*time.Second {
			t.Errorf("RunningTimes = %s, %s; want 5s, 4s", total, longest)
		}
		close(g.release)
		h.drain()
		if total, longest := h.p.RunningTimes(); total != 0 || longest != 0 {
			t.Errorf("RunningTimes when idle = %s, %s; want 0, 0", total, longest)
		}
	})
}
