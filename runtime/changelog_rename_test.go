package runtime

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestChangelogClassRenamesRestored: a class is renamed between two
// deploys (ClassRenames maps the old name to the new), and the new pod
// starts on an empty disk: the old class's saved messages come back from
// the changelog under the new name and run, rather than becoming dead
// letters of an unknown class.
func TestChangelogClassRenamesRestored(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	produced, cfg := savedAsBookings(t, b, "a", "b", "c", "d", "e")
	cfg2 := cfg("orders", func(ctx context.Context, m *handoff.Message) error {
		if m.Class == "orders" {
			b.record(m)
		}
		return nil
	})
	cfg2.ClassRenames = map[string]string{"bookings": "orders"}
	log, restored := countLogs(t, "partition state restored")
	cfg2.Logger = log
	rt2, wait2 := startNew(t, cfg2)
	waitFor(t, "the partition restored", func() bool { return restored.Load() == 1 })
	waitFor(t, "the pool idle", func() bool {
		s := rt2.classes.order[0].pool.Stats()
		return s.Running+s.Queued+s.Waiting == 0
	})
	dead, _, err := rt2.DeadLetters("", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	rep := stopAndWait(t, rt2, wait2)
	if unique, _ := b.counts(); unique != produced || rep.Repushed != produced || len(dead) != 0 {
		t.Errorf("renamed class on a new disk: handled %d of %d as the new class, repushed %d, %d dead letters (unknown class %d)",
			unique, produced, rep.Repushed, len(dead), rep.UnknownClass)
	}
}

// TestChangelogClassRenamesPause: a class paused through one pod is
// renamed (ClassRenames) for the next, which starts on an empty disk:
// the new class comes back paused, as its saved messages come back as
// its own.
func TestChangelogClassRenamesPause(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	noop := func(ctx context.Context, m *handoff.Message) error { return nil }
	cfg := b.config(noop, func(c *Class) { c.Name = "bookings" })
	rt, wait := startNew(t, cfg)
	waitFor(t, "ready", rt.Ready)
	if err := rt.Pause(context.Background(), "bookings", "deploy freeze"); err != nil {
		t.Fatal(err)
	}
	stopAndWait(t, rt, wait)

	b.state = filepath.Join(t.TempDir(), "new-pod.db")
	cfg2 := b.config(noop, nil)
	cfg2.ClassRenames = map[string]string{"bookings": "orders"}
	rt2, wait2 := startNew(t, cfg2)
	waitFor(t, "ready", rt2.Ready)
	h := rt2.Stats()[0].Hold
	stopAndWait(t, rt2, wait2)
	if h.State != HoldPaused || h.Reason != "deploy freeze" {
		t.Errorf("renamed class on a new disk: hold %v (%q), want paused with the old class's reason", h.State, h.Reason)
	}
}

// TestChangelogUnknownClassCounted: saved messages restored from the
// changelog whose class is no longer configured become dead letters, and
// the Report counts them in UnknownClass, as it counts those of the
// state file at start.
func TestChangelogUnknownClassCounted(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	produced, cfg := savedAsBookings(t, b, "a", "b", "c")
	cfg2 := cfg("orders", func(ctx context.Context, m *handoff.Message) error { return nil })
	log, restored := countLogs(t, "partition state restored")
	cfg2.Logger = log
	rt2, wait2 := startNew(t, cfg2)
	waitFor(t, "the partition restored", func() bool { return restored.Load() == 1 })
	dead, _, err := rt2.DeadLetters("", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	rep := stopAndWait(t, rt2, wait2)
	if len(dead) != produced || rep.UnknownClass != produced {
		t.Errorf("%d dead letters of an unknown class; the report counts %d, want %d", len(dead), rep.UnknownClass, produced)
	}
}

// savedAsBookings produces values to orders' partition, runs them in a
// class "bookings" of one worker until all are in its pool (one running,
// the rest queued), stops it (the changelog has them all) and moves b to
// a new pod's empty disk. It returns how many it produced and the config
// of a class of a name and handler on b.
func savedAsBookings(t *testing.T, b *bundle, values ...string) (int, func(name string, h handoff.HandlerFunc) Config) {
	t.Helper()
	produced := b.produceValues("orders", "k", values...)
	cfg := func(name string, h handoff.HandlerFunc) Config {
		cfg := b.config(h, nil)
		cfg.Classes[0].Name, cfg.Classes[0].Workers = name, 1
		cfg.DrainTimeout = 50 * time.Millisecond
		cfg.HardStopGrace = time.Second
		return cfg
	}
	rt1, wait1 := startNew(t, cfg("bookings", func(ctx context.Context, m *handoff.Message) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}))
	snapshotAll(t, rt1, wait1, produced)
	b.state = filepath.Join(t.TempDir(), "new-pod.db")
	return produced, cfg
}

// snapshotAll waits until the first class of rt, of one worker whose
// handler waits for its stop, holds all n messages produced (one
// running, the rest queued), and stops it: its snapshot must save all n.
func snapshotAll(t *testing.T, rt *Runtime, wait func() (*Report, error), n int) {
	t.Helper()
	waitFor(t, "one running, the rest queued", func() bool {
		s := rt.classes.order[0].pool.Stats()
		return s.Running == 1 && s.Queued == n-1
	})
	if rep := stopAndWait(t, rt, wait); rep.Snapshotted != n {
		t.Fatalf("snapshotted %d, want %d", rep.Snapshotted, n)
	}
}
