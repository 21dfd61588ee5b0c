package runtime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
)

// TestChangelogEmptyDisk stops an instance under load (its snapshot
// saves what it had not finished) and starts the next one on a new,
// empty state file, as a Deployment's new pod: the saved messages come
// back from the changelog and run, nothing is lost and, after a graceful
// stop, nothing runs twice. With LocalStateOnly the same restart has no
// snapshot, but the stop committed none of its messages: Kafka delivers
// them again, nothing is lost.
func TestChangelogEmptyDisk(t *testing.T) {
	t.Parallel()
	for _, local := range []bool{false, true} {
		t.Run(fmt.Sprintf("local=%v", local), func(t *testing.T) {
			t.Parallel()
			b := setup(t, 3, "orders")
			produced := b.produce(300)
			localOnly := func(cfg *Config) { cfg.LocalStateOnly = local }
			rep, release := b.stopUnderLoadWith(nil, localOnly)
			release()
			handled1, _ := b.counts()
			if rep.Snapshotted == 0 {
				t.Fatalf("the stop saved nothing: %v", rep)
			}
			b.state = filepath.Join(t.TempDir(), "new-pod.db") // an empty disk
			if local {
				// The snapshot is gone with the disk, but its offsets
				// are not committed: Kafka delivers them again.
				rep2 := b.runUntilWith(int64(produced-handled1), nil, localOnly)
				if rep2.Repushed != 0 || rep2.Restored != 0 {
					t.Errorf("local state only on a new disk: repushed %d, restored %d", rep2.Repushed, rep2.Restored)
				}
				if unique, _ := b.counts(); unique != produced {
					t.Errorf("handled %d of %d: %d saved at the stop lost", unique, produced, produced-unique)
				}
				return
			}
			rep2 := b.runUntilCommitted(t, produced, localOnly)
			if rep2.Repushed != rep.Snapshotted || rep2.Restored < rep.Snapshotted {
				t.Errorf("snapshotted %d; the new disk's run repushed %d, restored %d", rep.Snapshotted, rep2.Repushed, rep2.Restored)
			}
			if rep2.RestoredPartitions != 3 {
				t.Errorf("restored %d partitions, want 3", rep2.RestoredPartitions)
			}
			unique, total := b.counts()
			if unique != produced || total != produced {
				t.Errorf("produced %d: handled %d unique, %d total (duplicates %d)", produced, unique, total, total-unique)
			}
			if got := b.committed(); got != int64(produced) {
				t.Errorf("committed %d, want %d", got, produced)
			}
		})
	}
}

// TestChangelogDeadLettersTravel makes dead letters, with messages
// parked behind them in an ordered class, on one instance, and starts
// the next on an empty disk: the dead letters are listed there, their
// requeue runs them, and each key's parked messages run after its
// blocker, in offset order.
func TestChangelogDeadLettersTravel(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	produced := 0
	for k := range 3 {
		var values []string
		for i := range 20 {
			values = append(values, fmt.Sprintf("v%d", i))
		}
		produced += b.produceValues("orders", fmt.Sprintf("key-%d", k), values...)
	}
	// The sixth message of each key fails for good on the first pod: a
	// dead letter that blocks its key, the key's later messages parked
	// behind it.
	var fixed atomic.Bool
	var mu sync.Mutex
	var runs []handoff.Message // first handlings, in order
	h := func(ctx context.Context, m *handoff.Message) error {
		if string(m.Value) == "v5" && !fixed.Load() {
			return handoff.Permanent(errors.New("poison"))
		}
		b.mu.Lock()
		first := b.handled[m.ID] == 0
		b.mu.Unlock()
		if first {
			mu.Lock()
			runs = append(runs, *m)
			mu.Unlock()
		}
		b.record(m)
		return nil
	}
	ordered := func(c *Class) { c.Ordered = true }
	rt, wait := startNew(t, b.config(h, ordered))
	waitFor(t, "3 dead letters, the rest parked or handled", func() bool {
		dl, _, err := rt.DeadLetters("", "", 100)
		if err != nil || len(dl) != 3 {
			return false
		}
		keys, err := rt.ParkedKeys()
		if err != nil {
			return false
		}
		parked := 0
		for _, k := range keys {
			parked += k.Count
		}
		unique, _ := b.counts()
		return unique+parked+3 == produced
	})
	stopAndWait(t, rt, wait)

	fixed.Store(true) // the fix is deployed, on a new pod with an empty disk
	b.state = filepath.Join(t.TempDir(), "new-pod.db")
	cfg := b.config(h, ordered)
	cfg.Instance = "pod-2"
	rt2, wait2 := startNew(t, cfg)
	var dl []DeadLetter
	waitFor(t, "the dead letters restored", func() bool {
		var err error
		dl, _, err = rt2.DeadLetters("", "", 100)
		return err == nil && len(dl) == 3
	})
	for _, d := range dl {
		if err := rt2.Requeue(context.Background(), d.Key); err != nil {
			t.Fatalf("requeue %s: %v", d.Key, err)
		}
	}
	waitFor(t, "everything handled", func() bool {
		unique, _ := b.counts()
		return unique == produced
	})
	stopAndWait(t, rt2, wait2)
	unique, total := b.counts()
	if unique != produced || total != produced {
		t.Errorf("produced %d: handled %d unique, %d total", produced, unique, total)
	}
	mu.Lock()
	defer mu.Unlock()
	last := map[string]int64{}
	for _, m := range runs {
		k := string(m.Key)
		if prev, ok := last[k]; ok && m.Origin.Offset < prev {
			t.Errorf("key %s: offset %d ran after %d", k, m.Origin.Offset, prev)
		}
		last[k] = m.Origin.Offset
	}
}

// TestChangelogTopicsCreated: the start creates the changelog topic of
// each consumed topic, with its partition count.
func TestChangelogTopicsCreated(t *testing.T) {
	t.Parallel()
	b := setup(t, 3, "orders")
	rt, wait := startNew(t, b.config(func(ctx context.Context, m *handoff.Message) error { return nil }, nil))
	waitFor(t, "ready", rt.Ready)
	stopAndWait(t, rt, wait)
	conn, err := kafka.Dial("tcp", b.broker.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ps, err := conn.ReadPartitions(b.group + ".orders.handoff-changelog")
	if err != nil || len(ps) != 3 {
		t.Errorf("changelog topic: %d partitions, %v; want 3", len(ps), err)
	}
}

// TestChangelogEmptyDiskRestarts is TestChangelogEmptyDisk over several
// graceful restarts in a row, each on a new, empty disk, each stopping
// under load with a snapshot: what one pod saved, the next restores and
// saves again at its own stop (a stop may come before every partition's
// restore re-pushed its records: those stay in the changelog for the
// next pod). At the end every message ran exactly once.
func TestChangelogEmptyDiskRestarts(t *testing.T) {
	t.Parallel()
	const restarts = 3
	b := setup(t, 3, "orders")
	produced := b.produce(300)
	for i := range restarts {
		rep, release := b.stopUnderLoad(nil)
		release()
		if i == 0 && rep.Snapshotted == 0 {
			// Later pods' pools may hold only re-pushed messages, whose
			// records stay as they are: nothing new to save.
			t.Fatalf("the first stop saved nothing: %v", rep)
		}
		t.Logf("pod %d: repushed %d, snapshotted %d", i, rep.Repushed, rep.Snapshotted)
		b.state = filepath.Join(t.TempDir(), fmt.Sprintf("pod-%d.db", i+1)) // the next pod's empty disk
	}
	// The last pod runs until every message ran and its fetch passed
	// them all: the stops commit no saved message, so the commit reaches
	// the end only there.
	b.runUntilCommitted(t, produced, nil)
	unique, total := b.counts()
	if unique != produced || total != produced {
		t.Errorf("produced %d over %d restarts on new disks: handled %d unique, %d total (duplicates %d)", produced, restarts, unique, total, total-unique)
	}
	if got := b.committed(); got != int64(produced) {
		t.Errorf("committed %d, want %d", got, produced)
	}
}

// TestChangelogPauseTravels: a class paused through one instance comes
// back paused on an instance that starts on an empty disk, and a resume
// there is kept too.
func TestChangelogPauseTravels(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	noop := func(ctx context.Context, m *handoff.Message) error { return nil }
	state := func(rt *Runtime) string { return rt.Stats()[0].Hold.State }
	rt, wait := startNew(t, b.config(noop, nil))
	waitFor(t, "ready", rt.Ready)
	if err := rt.Pause(context.Background(), "orders", "deploy freeze"); err != nil {
		t.Fatal(err)
	}
	stopAndWait(t, rt, wait)

	b.state = filepath.Join(t.TempDir(), "new-pod.db")
	rt2, wait2 := startNew(t, b.config(noop, nil))
	waitFor(t, "ready", rt2.Ready)
	if got := state(rt2); got != HoldPaused {
		t.Fatalf("class on a new disk: hold %v, want paused", got)
	}
	if h := rt2.Stats()[0].Hold; h.Reason != "deploy freeze" {
		t.Errorf("pause reason %q, want the first instance's", h.Reason)
	}
	if err := rt2.Resume(context.Background(), "orders"); err != nil {
		t.Fatal(err)
	}
	stopAndWait(t, rt2, wait2)

	b.state = filepath.Join(t.TempDir(), "third-pod.db")
	rt3, wait3 := startNew(t, b.config(noop, nil))
	waitFor(t, "ready", rt3.Ready)
	if got := state(rt3); got != HoldRunning {
		t.Errorf("class after the resume, on a new disk: hold %v, want running", got)
	}
	stopAndWait(t, rt3, wait3)
}
