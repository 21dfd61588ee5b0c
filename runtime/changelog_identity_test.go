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
