package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

var errFlaky = errors.New("flaky")

// fastRetry makes retries quick for tests.
func fastRetry(c *Class) {
	c.Retry.InitialBackoff = time.Millisecond
	c.Retry.MaxBackoff = 5 * time.Millisecond
}

// TestRetryInPlace: a recoverable failure is retried with its attempt
// counted, and a message that keeps failing does not hold up the rest of
// its partition: with one worker, later messages run while it backs off.
func TestRetryInPlace(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	produced := b.produce(30)
	var mu sync.Mutex
	attempts := map[string][]int{}
	var poisonDone atomic.Bool
	handledAfterPoison := 0
	all := make(chan struct{})
	finished := 0
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		mu.Lock()
		defer mu.Unlock()
		v := string(m.Value)
		attempts[v] = append(attempts[v], m.Attempt)
		switch {
		case v == "orders-0": // poison: always fails
			if m.Attempt+1 == 4 {
				poisonDone.Store(true)
				finished++
				if finished == produced {
					close(all)
				}
			}
			return fmt.Errorf("poison %w", errFlaky)
		case v == "orders-1" && m.Attempt < 2: // flaky: fails twice
			return errFlaky
		}
		if !poisonDone.Load() {
			handledAfterPoison++
		}
		finished++
		if finished == produced {
			close(all)
		}
		return nil
	}, func(c *Class) {
		c.Workers = 1
		c.Retry = RetryPolicy{MaxAttempts: 4, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 40 * time.Millisecond}
	})
	rt, wait := startNew(t, cfg)
	<-all
	rep := stopAndWait(t, rt, wait)
	if got := fmt.Sprint(attempts["orders-1"]); got != "[0 1 2]" {
		t.Errorf("flaky message saw attempts %s, want [0 1 2]", got)
	}
	if got := fmt.Sprint(attempts["orders-0"]); got != "[0 1 2 3]" {
		t.Errorf("poison message saw attempts %s, want [0 1 2 3]", got)
	}
	// The poison message's backoffs (~20+40+40ms) hold no worker: the
	// single worker handled the others meanwhile.
	if handledAfterPoison < produced-2 {
		t.Errorf("only %d messages ran while the poison message backed off", handledAfterPoison)
	}
	if rep.Retried != 5 || rep.DeadLettered != 1 || rep.Succeeded != uint64(produced-1) {
		t.Errorf("report: %v", rep)
	}
	if got := b.committed(); got != int64(produced) {
		t.Errorf("committed %d, want %d: the dead letter's offset counts as persisted", got, produced)
	}
}

// TestStopDuringBackoff: a message waiting out a backoff at the stop is
// saved with its attempt count, and the restart continues from it.
func TestStopDuringBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	b.produce(1)
	failed := make(chan struct{})
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		close(failed)
		return errFlaky
	}, func(c *Class) {
		c.Retry = RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Hour, MaxBackoff: time.Hour}
	})
	cfg.DrainTimeout = time.Minute // the backoff is not waited for
	rt, _ := newRuntime(cfg)
	wait := start(t, rt, context.Background())
	<-failed
	rt.Shutdown(context.Background())
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Waiting != 1 || rep.Snapshotted != 1 || rep.DrainTimedOut {
		t.Errorf("report: %v", rep)
	}
	if b.committed() != 0 {
		t.Error("saved message's offset committed: Kafka keeps it until its re-push is done")
	}
	got := make(chan int, 1)
	rt2, _ := newRuntime(b.config(func(ctx context.Context, m *handoff.Message) error { got <- m.Attempt; return nil }, nil))
	wait2 := start(t, rt2, context.Background())
	if a := <-got; a != 1 {
		t.Errorf("after restart attempt %d, want 1", a)
	}
	rt2.Shutdown(context.Background())
	if _, err := wait2(); err != nil {
		t.Fatal(err)
	}
}

// TestRedelivery: once retries in place are exhausted, the message is
// stored for delayed redeliveries; a stop while it waits loses nothing
// and keeps its counts; the restart delivers it when due.
func TestRedelivery(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	b.produce(1)
	type seen struct {
		attempt int
		at      time.Time
	}
	runs := make(chan seen, 10)
	stored := make(chan struct{})
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		runs <- seen{m.Attempt, time.Now()}
		return errFlaky
	}, func(c *Class) {
		c.Retry = RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
			Redeliveries: 2, RedeliveryDelay: 300 * time.Millisecond}
	})
	rt, _ := newRuntime(cfg)
	wait := start(t, rt, context.Background())
	<-runs
	<-runs // two attempts in place, then stored for redelivery
	waitFor(t, "redelivery stored", func() bool { return rt.tally.total(evRedelivered) == 1 })
	close(stored)
	rt.Shutdown(context.Background())
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Redelivered != 1 || rep.DeadLettered != 0 {
		t.Errorf("report: %v", rep)
	}
	if b.committed() != 1 {
		t.Error("stored message's offset not committed")
	}
	rt2, _ := newRuntime(cfg)
	wait2 := start(t, rt2, context.Background())
	first := <-runs  // redelivery 1 (due 300ms after the failure)
	second := <-runs // redelivery 2, 600ms later
	waitFor(t, "dead letter", func() bool { return rt2.tally.total(evDeadLettered) == 1 })
	rt2.Shutdown(context.Background())
	if _, err := wait2(); err != nil {
		t.Fatal(err)
	}
	if first.attempt != 2 || second.attempt != 3 {
		t.Errorf("redeliveries saw attempts %d, %d; want 2, 3", first.attempt, second.attempt)
	}
	// Not a speed assertion: a redelivery must not come before it is due.
	if gap := second.at.Sub(first.at); gap < 600*time.Millisecond {
		t.Errorf("second redelivery %s after the first, want at least 600ms", gap)
	}
	dead := snapshottest.Dead(t, b.state)
	if len(dead) != 1 || dead[0].Record.Message.Attempt != 4 || dead[0].Record.Redeliveries != 2 {
		t.Errorf("dead letters: %+v", dead)
	}
	if n := snapshottest.Counts(t, b.state)[snapshot.BucketDelayed]; n != 0 {
		t.Errorf("delayed records left: %d", n)
	}
}

// TestHandlerTimeout: a handler past its class Timeout has failed
// recoverably, with ErrHandlerTimeout as its context's cause.
func TestHandlerTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	b.produce(1)
	causes := make(chan error, 5)
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}, func(c *Class) {
		c.Timeout = 20 * time.Millisecond
		c.Retry = RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	})
	rt, _ := newRuntime(cfg)
	wait := start(t, rt, context.Background())
	for range 2 {
		if c := <-causes; !errors.Is(c, ErrHandlerTimeout) {
			t.Errorf("cause %v", c)
		}
	}
	waitFor(t, "dead letter", func() bool { return rt.tally.total(evDeadLettered) == 1 })
	rt.Shutdown(context.Background())
	if rep, err := wait(); err != nil || rep.Retried != 1 || rep.Interrupted != 0 {
		t.Fatalf("%v %v", rep, err)
	}
}

// TestOrderedParkingProperty: in an ordered class, for random failure
// patterns (permanent failures that park the key, recoverable ones that
// retry in place), after every dead letter is requeued until none is left,
// each key's messages were handled exactly once, in offset order, and
// other keys were never held up by a parked one.
func TestOrderedParkingProperty(t *testing.T) {
	t.Parallel()
	for seed := range 3 {
		t.Run(strconv.Itoa(seed), func(t *testing.T) {
			t.Parallel()
			b := setup(t, 2, "orders")
			rng := rand.New(rand.NewPCG(uint64(seed), 99))
			const n, keys = 400, 12
			w := devbroker.NewWriter(b.broker.Addrs())
			var msgs []kafka.Message
			fate := map[string]string{} // value -> "perm" | "flaky" | ""
			for i := range n {
				v := fmt.Sprintf("m%04d", i)
				switch x := rng.IntN(20); {
				case x == 0:
					fate[v] = "perm"
				case x < 3:
					fate[v] = "flaky"
				}
				msgs = append(msgs, kafka.Message{Topic: "orders", Key: fmt.Appendf(nil, "k%d", rng.IntN(keys)), Value: []byte(v)})
			}
			if err := w.WriteMessages(context.Background(), msgs...); err != nil {
				t.Fatal(err)
			}
			devbroker.CloseWriter(w)

			var mu sync.Mutex
			handled := map[string][]handoff.Origin{} // key -> origins in handling order
			count := 0
			failedOnce := map[string]bool{}
			times := map[string]int{}
			all := make(chan struct{})
			cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
				mu.Lock()
				defer mu.Unlock()
				v := string(m.Value)
				if !failedOnce[v] && fate[v] != "" {
					failedOnce[v] = true
					if fate[v] == "perm" {
						return handoff.Permanent(errors.New("poison"))
					}
					return errFlaky
				}
				handled[string(m.Key)] = append(handled[string(m.Key)], m.Origin)
				if times[v]++; times[v] > 1 {
					t.Errorf("%s handled twice", v)
				}
				count++
				if count == n {
					close(all)
				}
				return nil
			}, func(c *Class) { c.Ordered = true; c.Workers = 4; fastRetry(c) })
			rt, err := newRuntime(cfg)
			if err != nil {
				t.Fatal(err)
			}
			wait := start(t, rt, context.Background())
			waitFor(t, "ready", rt.Ready)
			// Requeue dead letters until everything is handled, looking
			// for new ones every 10ms.
			deadline := time.After(30 * time.Second)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
		loop:
			for {
				dls, _, err := rt.DeadLetters("", "", 100)
				if err != nil {
					t.Fatal(err)
				}
				for _, dl := range dls {
					if err := rt.Requeue(context.Background(), dl.Key); err != nil && !errors.Is(err, ErrRequeued) && !errors.Is(err, ErrNotFound) {
						t.Fatal(err)
					}
				}
				select {
				case <-all:
					break loop
				case <-deadline:
					mu.Lock()
					defer mu.Unlock()
					t.Fatalf("handled %d of %d", count, n)
				case <-tick.C:
				}
			}
			rt.Shutdown(context.Background())
			rep, err := wait()
			if err != nil {
				t.Fatal(err)
			}
			for k, origins := range handled {
				for i := 1; i < len(origins); i++ {
					a, b := origins[i-1], origins[i]
					if a.Partition == b.Partition && a.Offset >= b.Offset {
						t.Fatalf("key %s: offset %d handled after %d", k, b.Offset, a.Offset)
					}
				}
			}
			if count != n {
				t.Errorf("handled %d, want %d", count, n)
			}
			counts := snapshottest.Counts(t, b.state)
			if counts[snapshot.BucketDead] != 0 || counts[snapshot.BucketParked] != 0 || counts[snapshot.BucketPending] != 0 {
				t.Errorf("records left after the run: %v", counts)
			}
			t.Logf("seed %d: %v", seed, rep)
			// A parked message may be released more than once when its key
			// is blocked again while it waits in the pool.
			if rep.Parked == 0 || rep.Released < rep.Parked || rep.Requeued == 0 {
				t.Errorf("no parking exercised or not all released: %v", rep)
			}
			if got := b.committed(); got != n {
				t.Errorf("committed %d, want %d", got, n)
			}
		})
	}
}
