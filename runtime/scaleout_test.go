package runtime

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestStopRedeliver is the counting test of a graceful stop under load
// with StopRedeliver: nothing of Kafka is saved, the commit stops before
// the first unfinished message of each partition, and a restart with an
// empty state file handles everything.
func TestStopRedeliver(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders", "users")
	produced := b.produce(300)
	redeliver := func(c *Class) { c.StopPolicy = StopRedeliver }
	rep, release := b.stopUnderLoad(redeliver)
	handled1, _ := b.counts()
	if rep.Interrupted != 8 || rep.Unstarted != 64 || rep.GivenBack != 72 || rep.Snapshotted != 0 {
		t.Errorf("stop report: %v", rep)
	}
	assertPending(t, b.state, 0)
	committed := b.committed()
	if committed > int64(handled1) {
		t.Errorf("committed %d, more than the %d handled", committed, handled1)
	}

	release()
	// The next run reads again from the commit, and skips what the
	// stop's progress record says was handled past it: the rest once
	// each. (The commit passes no handled message only where every
	// offset before it is done: a partition whose first message was a
	// waiting one keeps its commit at 0, and before the progress record
	// skipped them its handled messages ran twice. Expecting that made
	// this test fail whenever the commit fell short of the handled,
	// 4 of 36 runs under load.)
	rep2 := b.runUntil(int64(produced-handled1), redeliver)
	if rep2.Repushed != 0 {
		t.Errorf("re-pushed %d", rep2.Repushed)
	}
	unique, total := b.counts()
	if unique != produced {
		t.Errorf("produced %d, handled %d unique: lost %d", produced, unique, produced-unique)
	}
	if dup := total - unique; dup != 0 {
		t.Errorf("duplicates %d (handled before the stop %d, committed %d), want 0", dup, handled1, committed)
	}
	if got := b.committed(); got != int64(produced) {
		t.Errorf("committed %d, want %d", got, produced)
	}
	t.Logf("produced %d, handled before stop %d, committed at stop %d, given back %d, duplicates %d",
		produced, handled1, committed, rep.GivenBack, total-unique)
}

// TestStateFileIdentity: a state file records its group and instance; a
// file of another group is refused, another instance of the same group
// takes it over with a warning.
func TestStateFileIdentity(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "s.db")
	h := func(context.Context, *handoff.Message) error { return nil }
	var logs syncBuf
	runOnce := func(group, instance string) error {
		t.Helper()
		// Topics need brokers; the group is all that matters here, so
		// the class is Submit-only and Group is set by hand.
		rt, err := newRuntime(Config{StatePath: state, Instance: instance, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			Classes: []Class{{Name: "c", Handler: h}}})
		if err != nil {
			t.Fatal(err)
		}
		rt.cfg.Group = group
		ctx, cancel := context.WithCancel(context.Background())
		wait := start(t, rt, ctx)
		waitFor(t, "Run ready or returned", func() bool { return rt.Ready() || rt.life.state.Load() == stateDone })
		cancel()
		_, err = wait()
		return err
	}
	if err := runOnce("g1", "pod-0"); err != nil {
		t.Fatal(err)
	}
	err := runOnce("g2", "pod-0")
	if !errors.Is(err, ErrOtherGroup) {
		t.Fatalf("other group: %v", err)
	}
	for _, want := range []string{state, `"g1"`, `"g2"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if err := runOnce("g1", "pod-1"); err != nil {
		t.Fatalf("other instance, same group: %v", err)
	}
	if s := logs.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "previous_instance=pod-0") {
		t.Errorf("no warning for the takeover:\n%s", s)
	}
	if g, i := snapshottest.Owner(t, state); g != "g1" || i != "pod-1" {
		t.Errorf("meta group %q instance %q", g, i)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
