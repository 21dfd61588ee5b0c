package runtime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime/internal/changelog"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// queuedIn returns the messages of class held by rt's pool (queued,
// waiting behind their key, running).
func queuedIn(rt *Runtime, class string) int {
	for _, s := range rt.Stats() {
		if s.Name == class {
			return s.Queued + s.Waiting + s.Running
		}
	}
	return 0
}

// TestChangelogUpdatedRecordKeepsOrder: instance A saves v0..v9 of one
// key at its stop; B restores them on a new disk, v0 fails and waits for
// its retry when B stops, so B's stop updates v0's record (its attempt
// count). The next owner runs the key in order, v0..v9, whether it
// starts on a new disk or on A's or B's old one: the update kept v0's
// identity and its place in its key's order.
func TestChangelogUpdatedRecordKeepsOrder(t *testing.T) {
	t.Parallel()
	for _, next := range []string{"new disk", "A's disk", "B's disk"} {
		t.Run(next, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 1, "orders")
			var values []string
			for i := range 10 {
				values = append(values, fmt.Sprintf("v%d", i))
			}
			produced := b.produceValues("orders", "key", values...)
			ordered := func(c *Class) {
				c.Ordered = true
				c.Retry = RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Minute, MaxBackoff: time.Minute}
			}
			disks := map[string]string{"A": filepath.Join(t.TempDir(), "a.db"), "B": filepath.Join(t.TempDir(), "b.db"),
				"C": filepath.Join(t.TempDir(), "c.db")}

			// A: every handling waits for the stop.
			block := func(ctx context.Context, m *handoff.Message) error {
				<-ctx.Done()
				return ctx.Err()
			}
			b.state = disks["A"]
			cfg := b.config(block, ordered)
			cfg.Instance, cfg.DrainTimeout = "A", 200*time.Millisecond
			rt, wait := startNew(t, cfg)
			waitFor(t, "A holding the 10 messages", func() bool { return queuedIn(rt, "orders") == produced })
			rep := stopAndWait(t, rt, wait)
			if rep.Snapshotted != produced {
				t.Fatalf("A's stop saved %d of %d", rep.Snapshotted, produced)
			}

			// B: v0 fails and waits a minute for its retry; the rest wait
			// behind it.
			var failed atomic.Int32
			failV0 := func(ctx context.Context, m *handoff.Message) error {
				if string(m.Value) == "v0" {
					failed.Add(1)
					return errors.New("not yet")
				}
				<-ctx.Done()
				return ctx.Err()
			}
			b.state = disks["B"]
			cfg = b.config(failV0, ordered)
			cfg.Instance, cfg.DrainTimeout = "B", 200*time.Millisecond
			rt, wait = startNew(t, cfg)
			waitFor(t, "B's v0 failed, the key's messages held", func() bool {
				return failed.Load() == 1 && queuedIn(rt, "orders") == produced
			})
			rep = stopAndWait(t, rt, wait)
			if rep.Repushed != produced || rep.Waiting != 1 || rep.Unstarted != produced-1 {
				t.Fatalf("B restored %d of %d, its stop kept %d waiting (v0) and %d unstarted: %+v", rep.Repushed, produced, rep.Waiting, rep.Unstarted, rep)
			}

			// The next owner: every message succeeds.
			var mu sync.Mutex
			var runs []string
			var v0Attempt int
			ok := func(ctx context.Context, m *handoff.Message) error {
				mu.Lock()
				runs = append(runs, string(m.Value))
				if string(m.Value) == "v0" {
					v0Attempt = m.Attempt
				}
				mu.Unlock()
				b.record(m)
				return nil
			}
			switch next {
			case "new disk":
				b.state = disks["C"]
			case "A's disk":
				b.state = disks["A"]
			default:
				b.state = disks["B"]
			}
			cfg = b.config(ok, ordered)
			cfg.Instance, cfg.DrainTimeout = "next", 200*time.Millisecond
			rt, wait = startNew(t, cfg)
			waitFor(t, "every message handled", func() bool {
				unique, _ := b.counts()
				return unique == produced
			})
			waitFor(t, "everything committed", func() bool { return b.committed() == int64(produced) })
			stopAndWait(t, rt, wait)
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(runs, values) {
				t.Errorf("the key ran %v, want %v", runs, values)
			}
			if v0Attempt < 1 {
				t.Errorf("v0 ran with attempt %d, want B's failure counted (1)", v0Attempt)
			}
			if unique, total := b.counts(); unique != produced || total != produced {
				t.Errorf("produced %d: handled %d unique, %d total", produced, unique, total)
			}
		})
	}
}

// TestChangelogDuplicateScheduleAcrossInstances: the same ID is
// scheduled through the two instances of a group, first through one
// (due in 5 s), then through the other (due in 2 s, earlier). It runs
// once, at the first schedule's time (never early), the later schedule's
// record is tombstoned in the changelog, and a new instance restoring
// the partition afterwards neither lists nor runs it again.
func TestChangelogDuplicateScheduleAcrossInstances(t *testing.T) {
	t.Parallel()
	for _, first := range []string{"owner", "other"} {
		t.Run("first through the "+first, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 2, "orders")
			type run struct {
				at       time.Time
				instance string
			}
			var mu sync.Mutex
			var runs []run
			hFor := func(instance string) handoff.HandlerFunc {
				return func(ctx context.Context, m *handoff.Message) error {
					mu.Lock()
					runs = append(runs, run{time.Now(), instance})
					mu.Unlock()
					return nil
				}
			}
			cfgFor := func(instance string) Config {
				cfg := b.config(hFor(instance), nil)
				cfg.DrainTimeout = 200 * time.Millisecond
				return cfg
			}
			rtA, waitA := b.instance("a", cfgFor("a"))
			waitFor(t, "a ready", rtA.Ready)
			rtB, waitB := b.instance("b", cfgFor("b"))
			waitFor(t, "each instance owning one partition", func() bool {
				return rtB.Ready() && len(ownedPartitions(rtA)) == 1 && len(ownedPartitions(rtB)) == 1
			})
			p := ownedPartitions(rtA)[0] // a owns the job's partition
			key := keyFor("job", int32(p.Partition), 2, 0)
			via := []*Runtime{rtA, rtB}
			if first == "other" {
				via[0], via[1] = rtB, rtA
			}
			const id = "job-1"
			dueFirst := time.Now().Add(5 * time.Second)
			if err := via[0].Schedule(context.Background(), "orders", &handoff.Message{ID: id, Key: []byte(key), Value: []byte("first")}, dueFirst); err != nil {
				t.Fatal(err)
			}
			// The second schedule is accepted once the first is in the
			// changelog (the scheduling instance waits for it).
			dueSecond := time.Now().Add(2 * time.Second)
			if err := via[1].Schedule(context.Background(), "orders", &handoff.Message{ID: id, Key: []byte(key), Value: []byte("second")}, dueSecond); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the job run", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(runs) > 0
			})
			mu.Lock()
			r := runs[0]
			mu.Unlock()
			if r.at.Before(dueFirst) {
				t.Errorf("the job ran at %v, %v before the first schedule's due time", r.at.Format(time.StampMilli), dueFirst.Sub(r.at))
			}
			if r.instance != "a" {
				t.Errorf("the job ran on %s, want the owner a", r.instance)
			}
			// Both puts of the ID are tombstoned: the displaced one by the
			// owner, the first once it ran.
			waitFor(t, "the ID's records tombstoned in the changelog", func() bool {
				puts, tombs := delayedWrites(t, rtA, p, id)
				return len(puts) == 2 && len(tombs) == 2
			})
			shutdownAndWait(t, rtA, waitA)
			shutdownAndWait(t, rtB, waitB)

			// A new instance, on a new disk, restores both partitions.
			rtC, waitC := b.instance("c", cfgFor("c"))
			waitFor(t, "c owning both partitions", func() bool { return rtC.Ready() && len(ownedPartitions(rtC)) == 2 })
			if d, _, err := rtC.Delayed("", 10); err != nil || len(d) != 0 {
				t.Errorf("c lists %d delayed messages (%v), want none: %+v", len(d), err, d)
			}
			shutdownAndWait(t, rtC, waitC)
			mu.Lock()
			defer mu.Unlock()
			if len(runs) != 1 {
				t.Errorf("the job ran %d times: %+v", len(runs), runs)
			}
		})
	}
}

// delayedWrites reads partition p's changelog through rt and returns
// the changelog keys of the puts and of the tombstones of the delayed
// records of message ID id.
func delayedWrites(t *testing.T, rt *Runtime, p kclient.Partition, id string) (puts, tombs map[string]bool) {
	t.Helper()
	puts, tombs = map[string]bool{}, map[string]bool{}
	_, err := rt.clog.client.Read(context.Background(), p.Topic, int32(p.Partition), 0, func(recs []changelog.Rec) error {
		for _, r := range recs {
			e, err := snapshottest.ParseChangelog(r.Key, r.Value)
			if err != nil || e.Bucket != snapshot.BucketDelayed || e.DelayedID != id {
				continue
			}
			if r.Value == nil {
				tombs[string(r.Key)] = true
			} else {
				puts[string(r.Key)] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read the changelog of %s: %v", p, err)
	}
	return puts, tombs
}

// TestChangelogRescheduleThroughNonOwner: a recurring job's ID is
// scheduled through an instance that does not own its partition, runs on
// the owner, and is scheduled again through the same instance: the
// second schedule runs too (the scheduling instance's copy of the first
// is not a waiting record of the ID: its partition's owner ran it).
func TestChangelogRescheduleThroughNonOwner(t *testing.T) {
	t.Parallel()
	runs := newInstanceRuns("job-")
	rtA, rtB, stop := twoOwners(t, runs.handler, nil)
	p := int32(ownedPartitions(rtB)[0].Partition)
	key := []byte(keyFor("k", p, 2, 0))
	for round := range 2 {
		m := &handoff.Message{ID: "job-1", Key: key, Value: fmt.Appendf(nil, "round %d", round)}
		if err := rtA.Schedule(context.Background(), "orders", m, time.Now().Add(500*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("run %d of the job", round+1), func() bool {
			_, on := runs.ran()
			return len(on["job-1"]) == round+1
		})
	}
	stop()
	if _, on := runs.ran(); !slices.Equal(on["job-1"], []string{"b", "b"}) {
		t.Errorf("the job ran on %v, want twice on its owner b", on["job-1"])
	}
}
