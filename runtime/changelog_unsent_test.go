package runtime

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestChangelogUnsentDeletesResent: the records of re-pushed saved
// messages that are done are deleted while the changelog refuses writes,
// so their tombstones are kept as unsent in the state file. No message
// waits for them (the done messages have no offset to commit), yet once
// the changelog takes writes again they must reach it: the next owner of
// the partition, on an empty disk, must not run those messages again.
func TestChangelogUnsentDeletesResent(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	produced := b.produceValues("orders", "k", "a", "b", "c", "d", "e")

	// refuse, while set, makes every write to the changelog fail at once.
	refuse, refused := refuseChangelogWrites(b, "orders")
	cfg := func(h handoff.HandlerFunc) Config {
		cfg := b.config(h, func(c *Class) { c.Workers = 1 })
		cfg.DrainTimeout = 50 * time.Millisecond
		cfg.HardStopGrace = time.Second
		cfg.ChangelogTimeout = time.Second
		return cfg
	}

	// The first run saves all five, in the file and the changelog.
	rt1, wait1 := startNew(t, cfg(func(ctx context.Context, m *handoff.Message) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}))
	snapshotAll(t, rt1, wait1, produced)

	// The second run, on the same disk, runs them while the changelog
	// refuses writes: their records' deletes reach the file only.
	refuse.Store(true)
	cfg2 := cfg(func(ctx context.Context, m *handoff.Message) error { b.record(m); return nil })
	log, failed := countLogs(t, "records of done messages not deleted; they will run again")
	cfg2.Logger = log
	rt2, wait2 := startNew(t, cfg2)
	waitFor(t, "the five handled", func() bool {
		unique, _ := b.counts()
		return unique == produced
	})
	waitFor(t, "their deletes refused by the changelog", func() bool { return failed.Load() > 0 })
	refuse.Store(false)
	stopAndWait(t, rt2, wait2)
	if refused.Load() == 0 {
		t.Fatal("no changelog write was refused")
	}

	// The next owner starts on an empty disk.
	b.state = filepath.Join(t.TempDir(), "new-pod.db")
	log3, restored := countLogs(t, "partition state restored")
	cfg3 := cfg(func(ctx context.Context, m *handoff.Message) error { b.record(m); return nil })
	cfg3.Logger = log3
	rt3, wait3 := startNew(t, cfg3)
	waitFor(t, "the partition restored", func() bool { return restored.Load() == 1 })
	rep3 := stopAndWait(t, rt3, wait3)
	if rep3.Repushed != 0 {
		t.Errorf("the next owner re-pushed %d messages done already", rep3.Repushed)
	}
	if unique, total := b.counts(); total != unique {
		t.Errorf("handled %d unique, %d in all", unique, total)
	}
}
