package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestLifecycleProperty drives random interleavings of graceful stops and
// restarts with parking (poison messages of an ordered class, requeued
// by an operator loop), deferral (deliver-at headers), scheduling
// (Runtime.Schedule) and retries, and counts each message: every one
// handled exactly once in the end (a handler cut short by the hard stop
// does not succeed, so it is not counted), none before its due time, per
// key in offset order (deferred ones aside: a deliver-at header takes a
// record out of its key's order on purpose), and nothing left in the
// state file.
func TestLifecycleProperty(t *testing.T) {
	t.Parallel()
	for seed := range 3 {
		t.Run(strconv.Itoa(seed), func(t *testing.T) {
			t.Parallel()
			lifecycleProperty(t, uint64(seed))
		})
	}
}

func lifecycleProperty(t *testing.T, seed uint64) {
	b := setup(t, 2, "orders")
	rng := rand.New(rand.NewPCG(seed, 7))
	const n, keys, scheduled = 300, 10, 60
	start0 := time.Now()

	fate := map[string]string{}   // value -> "perm" | "flaky" | "defer" | ""
	due := map[string]time.Time{} // value -> not before
	var msgs []kafka.Message
	for i := range n {
		v := fmt.Sprintf("m%04d", i)
		m := kafka.Message{Topic: "orders", Key: fmt.Appendf(nil, "k%d", rng.IntN(keys)), Value: []byte(v)}
		switch x := rng.IntN(20); {
		case x == 0:
			fate[v] = "perm"
		case x < 3:
			fate[v] = "flaky"
		case x < 5:
			fate[v] = "defer"
			due[v] = start0.Add(time.Duration(rng.IntN(800)) * time.Millisecond)
			m.Headers = []kafka.Header{{Key: HeaderDeliverAt, Value: []byte(due[v].Format(time.RFC3339Nano))}}
		}
		msgs = append(msgs, m)
	}
	w := devbroker.NewWriter(b.broker.Addrs())
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	devbroker.CloseWriter(w)
	schedAt := map[string]time.Time{}
	for i := range scheduled {
		schedAt[fmt.Sprintf("s%03d", i)] = start0.Add(time.Duration(rng.IntN(800)) * time.Millisecond)
	}

	var mu sync.Mutex
	handled := map[string][]handoff.Origin{} // key -> origins of Kafka messages in handling order
	times := map[string]int{}
	failedOnce := map[string]bool{}
	early := 0
	all := make(chan struct{})
	var allOnce sync.Once
	handler := func(ctx context.Context, m *handoff.Message) error {
		// Some work that honours the stop.
		if d := time.Duration(rand.IntN(3000)) * time.Microsecond; d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		v := string(m.Value)
		if !failedOnce[v] && (fate[v] == "perm" || fate[v] == "flaky") {
			failedOnce[v] = true
			if fate[v] == "perm" {
				return handoff.Permanent(errors.New("poison"))
			}
			return errFlaky
		}
		if at, ok := due[v]; ok && time.Now().Before(at) {
			early++
			t.Logf("%s (%s, attempt %d, origin %+v) handled %s before due", v, fate[v], m.Attempt, m.Origin, time.Until(at))
		}
		if m.Origin.IsKafka() && fate[v] != "defer" {
			handled[string(m.Key)] = append(handled[string(m.Key)], m.Origin)
		}
		times[v]++
		if times[v] > 1 {
			t.Logf("%s (%s, attempt %d, origin %+v) handled again", v, fate[v], m.Attempt, m.Origin)
		}
		if len(times) == n+scheduled {
			allOnce.Do(func() { close(all) })
		}
		return nil
	}
	for id, at := range schedAt {
		due[id] = at
	}

	cfg := b.config(handler, func(c *Class) { c.Ordered = true; c.Workers = 4; fastRetry(c) })
	cfg.HardStopGrace = time.Second
	deadline := time.Now().Add(60 * time.Second)
	stops := 0
	for round := 0; ; round++ {
		cfg.DrainTimeout = time.Duration(rng.IntN(40)) * time.Millisecond
		rt, err := newRuntime(cfg)
		if err != nil {
			t.Fatal(err)
		}
		wait := start(t, rt, context.Background())
		waitFor(t, "ready", rt.Ready)
		if round == 0 {
			for id, at := range schedAt {
				if err := rt.Schedule(context.Background(), "orders", &handoff.Message{ID: id, Key: []byte(id), Value: []byte(id)}, at); err != nil {
					t.Fatal(err)
				}
			}
		}
		// This round lasts a random while (the last one until done),
		// requeuing dead letters as an operator would.
		last := round >= 5
		end := time.After(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		tick := time.NewTicker(10 * time.Millisecond)
		done := false
	run:
		for {
			dls, _, err := rt.DeadLetters("", "", 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, dl := range dls {
				if err := rt.Requeue(context.Background(), dl.Key); err != nil && !errors.Is(err, ErrRequeued) &&
					!errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNotRunning) {
					t.Fatal(err)
				}
			}
			select {
			case <-all:
				done = true
				break run
			case <-end:
				if !last {
					break run
				}
			case <-tick.C:
			}
			if time.Now().After(deadline) {
				break run
			}
		}
		tick.Stop()
		rt.Shutdown(context.Background())
		rep, err := wait()
		if err != nil {
			t.Fatal(err)
		}
		stops++
		t.Logf("round %d: drain %s, snapshotted %d (interrupted %d), re-pushed %d, parked %d, deferred %d, delivered %d",
			round, cfg.DrainTimeout, rep.Snapshotted, rep.Interrupted, rep.Repushed, rep.Parked, rep.Deferred, rep.Delivered)
		if done || time.Now().After(deadline) {
			break
		}
	}

	mu.Lock()
	defer mu.Unlock()
	missing, twice := 0, 0
	for i := range n {
		switch times[fmt.Sprintf("m%04d", i)] {
		case 0:
			missing++
		case 1:
		default:
			twice++
		}
	}
	for id := range schedAt {
		switch times[id] {
		case 0:
			missing++
		case 1:
		default:
			twice++
		}
	}
	if missing != 0 || twice != 0 || early != 0 {
		t.Fatalf("after %d graceful stops: %d never handled, %d handled more than once, %d handled before due", stops, missing, twice, early)
	}
	for k, origins := range handled {
		for i := 1; i < len(origins); i++ {
			a, b := origins[i-1], origins[i]
			if a.Partition == b.Partition && a.Offset >= b.Offset {
				t.Fatalf("key %s: offset %d handled after %d", k, b.Offset, a.Offset)
			}
		}
	}
	counts := snapshottest.Counts(t, b.state)
	for _, bucket := range []string{snapshot.BucketPending, snapshot.BucketDead, snapshot.BucketParked, snapshot.BucketDelayed} {
		if counts[bucket] != 0 {
			t.Errorf("records left in the state file: %v", counts)
			break
		}
	}
}
