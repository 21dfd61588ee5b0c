package runtime

import (
	"context"
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

// TestDivertedAtHardStop: a message the handler wrapper parks or defers
// (saves elsewhere and settles) just as the hard stop cancels the handler
// contexts comes back from the pool as interrupted. The stop must not save
// it again: a second copy in pending would run after the restart (a parked
// message twice, a deferred one early). Issue 11, item 2.
func TestDivertedAtHardStop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		ordered bool
		// records to produce, one key, in order
		records []kafka.Message
		// the state file after the stop: records per bucket
		want map[string]int
	}{
		{
			name:    "deferred",
			records: []kafka.Message{{Value: []byte("later"), Headers: []kafka.Header{{Key: HeaderDeliverAt, Value: []byte(time.Now().Add(time.Hour).Format(time.RFC3339Nano))}}}},
			want:    map[string]int{snapshot.BucketPending: 0, snapshot.BucketDelayed: 1},
		},
		{
			name:    "parked",
			ordered: true,
			records: []kafka.Message{{Value: []byte("poison")}, {Value: []byte("behind")}},
			want:    map[string]int{snapshot.BucketPending: 0, snapshot.BucketDead: 1, snapshot.BucketParked: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 1, "orders")
			w := devbroker.NewWriter(b.broker.Addrs())
			for i := range tc.records {
				tc.records[i].Topic, tc.records[i].Key = "orders", []byte("k")
			}
			if err := w.WriteMessages(context.Background(), tc.records...); err != nil {
				t.Fatal(err)
			}
			devbroker.CloseWriter(w)

			var ran atomic.Int64
			cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
				if string(m.Value) == "poison" {
					return handoff.Permanent(context.Canceled)
				}
				ran.Add(1)
				return nil
			}, func(c *Class) { c.Ordered = tc.ordered; c.Workers = 1 })
			cfg.DrainTimeout = 20 * time.Millisecond
			cfg.HardStopGrace = 5 * time.Second
			rt, err := newRuntime(cfg)
			if err != nil {
				t.Fatal(err)
			}
			diverting := make(chan struct{})
			var once sync.Once
			rt.handling.testHookDiverted = func(ctx context.Context) {
				once.Do(func() { close(diverting) })
				<-ctx.Done() // returns only once the hard stop cancelled it
			}
			ctx, cancel := context.WithCancel(context.Background())
			wait := start(t, rt, ctx)
			<-diverting
			cancel()
			rep, err := wait()
			if err != nil {
				t.Fatal(err)
			}
			if rep.Interrupted != 0 || rep.Snapshotted != 0 {
				t.Errorf("stop: interrupted %d, snapshotted %d; want 0 and 0 (the message was saved elsewhere)", rep.Interrupted, rep.Snapshotted)
			}
			counts := snapshottest.Counts(t, b.state)
			for bucket, n := range tc.want {
				if counts[bucket] != n {
					t.Errorf("bucket %s has %d records, want %d (all: %v)", bucket, counts[bucket], n, counts)
				}
			}

			// The restart re-pushes nothing: the message waits where it was
			// saved (behind its key, or until its due time).
			rt2, err := newRuntime(b.config(func(ctx context.Context, m *handoff.Message) error {
				ran.Add(1)
				return nil
			}, func(c *Class) { c.Ordered = tc.ordered }))
			if err != nil {
				t.Fatal(err)
			}
			wait2 := start(t, rt2, context.Background())
			waitFor(t, "restart ready", rt2.Ready)
			rt2.Shutdown(context.Background())
			rep2, err := wait2()
			if err != nil {
				t.Fatal(err)
			}
			if rep2.Repushed != 0 || ran.Load() != 0 {
				t.Errorf("restart re-pushed %d, handler ran %d times; want 0 and 0", rep2.Repushed, ran.Load())
			}
		})
	}
}
