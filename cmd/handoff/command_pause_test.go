package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

func pausesOf(t *testing.T, path string) map[string]snapshot.Pause {
	t.Helper()
	st, err := snapshot.Open(path, snapshot.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	info, err := st.FileInfo()
	if err != nil {
		t.Fatal(err)
	}
	return info.Pauses
}

// TestPauseResumeCommands: pause records a class's pause with its reason,
// resume removes it, resuming a class not paused changes nothing, and a
// locked file points at the admin API.
func TestPauseResumeCommands(t *testing.T) {
	t.Parallel()
	path := stateFile(t)
	r := run(t, "pause", path, "orders", "--reason", "db migration")
	if r.code != 0 || !strings.Contains(r.stdout, `paused class "orders"`) {
		t.Fatalf("pause: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if p := pausesOf(t, path); len(p) != 1 || p["orders"].Reason != "db migration" || p["orders"].Since.IsZero() {
		t.Fatalf("pauses after pause: %+v", p)
	}
	st, err := snapshot.Open(path, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"pause", path, "orders"}, {"resume", path, "orders"}} {
		r := run(t, append(args, "--lock-timeout", "50ms")...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "in use by a running service") ||
			!strings.Contains(r.stderr, "admin API (POST /api/classes/CLASS/pause or /resume)") {
			t.Errorf("%v on a locked file: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	st.Close()
	r = run(t, "resume", path, "orders")
	if r.code != 0 || !strings.Contains(r.stdout, `resumed class "orders"`) {
		t.Fatalf("resume: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if p := pausesOf(t, path); len(p) != 0 {
		t.Fatalf("pauses after resume: %+v", p)
	}
	r = run(t, "resume", path, "orders")
	if r.code != 0 || !strings.Contains(r.stdout, "was not paused") {
		t.Fatalf("second resume: exit %d, %q", r.code, r.stdout)
	}
	for _, args := range [][]string{{"pause"}, {"pause", path}, {"resume", path, "a", "b"}} {
		if r := run(t, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, r.code, exitUsage)
		}
	}
	if r := run(t, "pause", path+".missing", "orders"); r.code != exitFailure || !strings.Contains(r.stderr, "does not exist") {
		t.Errorf("pause of a missing file: exit %d, %q", r.code, r.stderr)
	}
}

// TestPauseUnknownClass: pause refuses a class the state file has never
// seen (not recorded by its service, not paused, no record of it) and
// writes nothing; --force pauses it anyway. A file written before the
// runtime recorded its classes still knows the classes of its records.
func TestPauseUnknownClass(t *testing.T) {
	t.Parallel()
	path := stateFile(t) // its service ran with orders, users and local
	r := run(t, "pause", path, "nosuchclass")
	if r.code != exitFailure || !strings.Contains(r.stderr, `class "nosuchclass" is unknown to `+path) ||
		!strings.Contains(r.stderr, "classes it has seen: local, orders, users") || !strings.Contains(r.stderr, "--force") {
		t.Errorf("pause of an unknown class: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if p := pausesOf(t, path); len(p) != 0 {
		t.Fatalf("a refused pause wrote %+v", p)
	}
	if r := run(t, "pause", path, "local"); r.code != 0 {
		t.Errorf("pause of a class the service ran with: exit %d, %q", r.code, r.stderr)
	}
	r = run(t, "pause", path, "nosuchclass", "--force", "--reason", "new in v2")
	if r.code != 0 || !strings.Contains(r.stdout, `paused class "nosuchclass"`) {
		t.Fatalf("pause --force: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if p := pausesOf(t, path); p["nosuchclass"].Reason != "new in v2" {
		t.Fatalf("pauses after --force: %+v", p)
	}
	// Paused once, it is a class the file has seen.
	if r := run(t, "pause", path, "nosuchclass"); r.code != 0 {
		t.Errorf("pause of a paused class: exit %d, %q", r.code, r.stderr)
	}

	// A file with a record of class legacy and no recorded classes.
	old := filepath.Join(t.TempDir(), "old.db")
	snapshottest.SeedDead(t, old, snapshot.Record{Message: handoff.Message{ID: "x", Class: "legacy"}, Reason: "failed", Err: "boom"})
	if r := run(t, "pause", old, "legacy"); r.code != 0 {
		t.Errorf("pause of a class with a dead letter: exit %d, %q", r.code, r.stderr)
	}
	if r := run(t, "pause", old, "orders"); r.code != exitFailure || !strings.Contains(r.stderr, "classes it has seen: legacy") {
		t.Errorf("pause of a class the old file never saw: exit %d, %q", r.code, r.stderr)
	}
}
