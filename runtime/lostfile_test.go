package runtime

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestStateFileDeletedWhileRunning: with local state only, a state file
// deleted while the runtime runs took every dead letter with it: their
// offsets are committed, and the next start found a new, empty file (an
// operator's rm lost them all). Now the runtime notices within a second,
// writes the file back from the one it has open, counts it, and the dead
// letters made before and after the delete are all there after the
// restart.
func TestStateFileDeletedWhileRunning(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	reg := prometheus.NewRegistry()
	log, recreated := countLogs(t, "state file deleted while running; written back from the open file, nothing lost")
	cfg := b.config(func(context.Context, *handoff.Message) error {
		return handoff.Permanent(errors.New("bad order"))
	}, nil)
	cfg.LocalStateOnly = true
	cfg.Registerer = reg
	cfg.Logger = log
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	const before, after = 5, 4
	b.produce(before)
	waitFor(t, "the first dead letters", func() bool { return rt.tally.total(evDeadLettered) == before })
	if err := os.Remove(b.state); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the file written back", func() bool { return recreated.Load() == 1 })
	if v, _ := metricValue(t, reg, "handoff_state_file_lost_total", "", ""); v != 1 {
		t.Errorf("handoff_state_file_lost_total = %v, want 1", v)
	}
	b.produce(after)
	waitFor(t, "the later dead letters", func() bool { return rt.tally.total(evDeadLettered) == before+after })
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if b.committed() != before+after {
		t.Errorf("committed %d, want %d", b.committed(), before+after)
	}
	// snapshottest opens the file read-only, so as an existing state file.
	if dead := snapshottest.Dead(t, b.state); len(dead) != before+after {
		t.Errorf("%d dead letters in the state file, want %d (produced %d, committed %d)", len(dead), before+after, before+after, b.committed())
	}
}
