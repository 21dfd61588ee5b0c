package runtime

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestRecoveryIntoSuspendedClass: the state file holds saved messages of
// a class whose dependency is still down at the restart, ahead of those
// of another class. The class suspends during the recovery and its held
// pool fills; the recovery keeps the rest of its messages for the
// suspension's end instead of waiting on the pool, so the other class's
// messages run and the runtime gets ready during the outage. Once the
// dependency is back every message runs, in save order per key.
func TestRecoveryIntoSuspendedClass(t *testing.T) {
	t.Parallel()
	for _, pause := range []bool{false, true} {
		name := "suspended"
		if pause {
			name = "paused"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			state := t.TempDir() + "/s.db"
			const down, up, keys = 40, 5, 3
			var recs []snapshot.Record
			for i := range down {
				recs = append(recs, snapshot.Record{Message: handoff.Message{ID: fmt.Sprintf("d-%02d", i), Class: "down",
					Key: fmt.Appendf(nil, "k-%d", i%keys)}, Reason: reasonUnstarted})
			}
			for i := range up {
				recs = append(recs, snapshot.Record{Message: handoff.Message{ID: fmt.Sprintf("u-%d", i), Class: "up"}, Reason: reasonUnstarted})
			}
			snapshottest.SeedPending(t, state, recs...)

			back := make(chan struct{})
			var mu sync.Mutex
			var order []string
			upDone := make(chan string, up)
			var rt *Runtime
			downClass := Class{Name: "down", Workers: 2, QueueSize: 2, Ordered: true,
				Suspend: SuspendPolicy{ProbeBackoff: 5 * time.Millisecond, ProbeMaxBackoff: 20 * time.Millisecond},
				Handler: func(ctx context.Context, m *handoff.Message) error {
					if pause {
						<-back // slow, not failing: the operator pauses it
					} else {
						select {
						case <-back:
						default:
							return handoff.Unavailable(fmt.Errorf("database down"))
						}
					}
					mu.Lock()
					order = append(order, m.ID)
					mu.Unlock()
					return nil
				}}
			upClass := Class{Name: "up", Workers: 2, QueueSize: 2, Handler: func(ctx context.Context, m *handoff.Message) error {
				upDone <- m.ID
				return nil
			}}
			cfg := Config{StatePath: state, Classes: []Class{downClass, upClass}, Logger: testLogger(t),
				DrainTimeout: 5 * time.Second, HardStopGrace: time.Second}
			var err error
			rt, err = newRuntime(cfg)
			if err != nil {
				t.Fatal(err)
			}
			wait := start(t, rt, context.Background())
			if pause {
				// The pause comes while the recovery waits on the full
				// pool of a slow class.
				waitFor(t, "the recovery waiting on the full pool", func() bool {
					s := rt.classes.byName["down"].pool.Stats()
					return s.Queued+s.Running+s.Waiting >= 4
				})
				if err := rt.Pause(context.Background(), "down", "test"); err != nil {
					t.Fatal(err)
				}
			}
			for range up {
				select {
				case <-upDone:
				case <-time.After(10 * time.Second):
					t.Fatalf("the other class's saved messages did not run while class down is held (stats %+v)", rt.classes.byName["down"].pool.Stats())
				}
			}
			waitFor(t, "ready during the outage", rt.Ready)
			close(back)
			if pause {
				if err := rt.Resume(context.Background(), "down"); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "every saved message of class down", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(order) == down
			})
			rep := stopAndWait(t, rt, wait)
			if rep.Repushed != down+up {
				t.Errorf("re-pushed %d, want %d", rep.Repushed, down+up)
			}
			mu.Lock()
			defer mu.Unlock()
			last := map[byte]string{}
			for _, id := range order {
				var i int
				fmt.Sscanf(id, "d-%d", &i)
				k := byte(i % keys)
				if prev, ok := last[k]; ok && prev > id {
					t.Errorf("key k-%d: %s ran after %s", k, id, prev)
				}
				last[k] = id
			}
			assertCount(t, state, snapshot.BucketPending, 0)
		})
	}
}

// TestUndecodableDeadAndDelayedWithOrderedClass: with an ordered class
// configured (restoring its blocked keys reads the dead and delayed
// buckets), one undecodable dead letter and one undecodable delayed
// record do not fail the start: the delayed one is quarantined, the dead
// letter reported and left in place, and the start goes on.
func TestUndecodableDeadAndDelayedWithOrderedClass(t *testing.T) {
	t.Parallel()
	state := t.TempDir() + "/s.db"
	snapshottest.SeedDead(t, state, snapshot.Record{Message: handoff.Message{ID: "dead-ok", Class: "orders", Key: []byte("k1")}, Reason: reasonFailed})
	snapshottest.SeedDelayed(t, state, snapshot.Delayed{Due: time.Now().Add(time.Hour),
		Record: snapshot.Record{Message: handoff.Message{ID: "later-ok", Class: "orders", Key: []byte("k2")}, Reason: reasonScheduled}})
	snapshottest.Damage(t, state, snapshot.BucketDead, snapshottest.SeqKey(9), []byte{0xff, 0x01})
	snapshottest.Damage(t, state, snapshot.BucketDelayed, snapshottest.DelayedKey(time.Now().Add(2*time.Hour), "bad-id"), []byte{0xff, 0x02})

	rt, err := newRuntime(Config{StatePath: state, Logger: testLogger(t), Classes: []Class{{Name: "orders", Ordered: true,
		Handler: func(context.Context, *handoff.Message) error { return nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait := start(t, rt, ctx)
	waitFor(t, "running or stopped", func() bool {
		if rt.Ready() {
			return true
		}
		select {
		case <-rt.life.done:
			return true
		default:
			return false
		}
	})
	cancel()
	if _, err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	counts := snapshottest.Counts(t, state)
	// The bad delayed record is quarantined; a bad dead letter is only
	// reported (the start quarantines no dead letter: it leaves them in place).
	if counts[snapshot.BucketQuarantine] != 1 || counts[snapshot.BucketDead] != 2 || counts[snapshot.BucketDelayed] != 1 {
		t.Errorf("counts %v, want the bad delayed record quarantined, the good one and both dead letters kept", counts)
	}
}
