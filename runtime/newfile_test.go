package runtime

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/handoff-go/handoff"
)

// TestNewStateFileWithCommits: a first run of a group on a new state
// file says nothing (the group has no commits yet) and commits what it
// handled; a second run on the same file says nothing either; a run on a
// new file (a lost disk) warns, naming the file, the group and how many
// partitions have commits, and sets handoff_state_file_new_with_commits
// (with LocalStateOnly; with the changelog nothing warns).
func TestNewStateFileWithCommits(t *testing.T) {
	t.Parallel()
	const (
		msg      = "state file is new but the group has commits: was a disk lost?"
		notAsked = "state file is new; the group's committed offsets could not be asked for"
	)
	b := setup(t, 3, "orders")
	n := b.produce(30)
	localOnly := true // the check is the local-only runtime's

	// run starts a runtime on the state file at path, waits until it is
	// ready and until cond holds, stops it and returns its warnings and
	// its gauge.
	run := func(path string, cond func() bool) (warnings []logRecord, gauge float64) {
		t.Helper()
		log, rec := recordLogs(t)
		reg := prometheus.NewRegistry()
		cfg := b.config(func(_ context.Context, m *handoff.Message) error { b.record(m); return nil }, nil)
		cfg.StatePath, cfg.Logger, cfg.Registerer = path, log, reg
		cfg.LocalStateOnly = localOnly
		rt, err := newRuntime(cfg)
		if err != nil {
			t.Fatal(err)
		}
		wait := start(t, rt, context.Background())
		waitFor(t, "ready", rt.Ready)
		waitFor(t, "the run's condition", cond)
		gauge = testutil.ToFloat64(rt.metrics.newFile)
		stopAndWait(t, rt, wait)
		for _, r := range rec.records(slog.LevelWarn) {
			if r.msg == msg {
				warnings = append(warnings, r)
			}
			if r.msg == notAsked {
				t.Errorf("the check failed: %v", r.attrs)
			}
		}
		return warnings, gauge
	}

	w, g := run(b.state, func() bool { return b.committed() == int64(n) })
	if len(w) != 0 || g != 0 {
		t.Fatalf("first run of the group: warnings %v, gauge %v", w, g)
	}
	always := func() bool { return true }
	w, g = run(b.state, always)
	if len(w) != 0 || g != 0 {
		t.Fatalf("second run on the same file: warnings %v, gauge %v", w, g)
	}
	lost := filepath.Join(t.TempDir(), "new.db")
	w, g = run(lost, always)
	if len(w) != 1 || g != 1 {
		t.Fatalf("run on a new file: warnings %v, gauge %v", w, g)
	}
	if a := w[0].attrs; a["path"] != lost || a["group"] != b.group || a["partitions"] != "3" {
		t.Errorf("warning's attributes %v, want path %s, group %s, partitions 3", a, lost, b.group)
	}
	// The file that run used is not new any more.
	w, g = run(lost, always)
	if len(w) != 0 || g != 0 {
		t.Fatalf("second run on the once new file: warnings %v, gauge %v", w, g)
	}
	if unique, _ := b.counts(); unique != n {
		t.Errorf("handled %d of %d", unique, n)
	}
	// With the changelog a new file is what a new pod starts with: its
	// state comes back from the changelog, and nothing warns.
	localOnly = false
	w, g = run(filepath.Join(t.TempDir(), "new-pod.db"), always)
	if len(w) != 0 || g != 0 {
		t.Fatalf("run with the changelog on a new file: warnings %v, gauge %v", w, g)
	}
}
