package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/handoff-go/handoff/snapshot"
)

// classCounts returns how many records of each class the state file's
// pending and dead buckets hold.
func classCounts(t *testing.T, path string) map[string]int {
	t.Helper()
	st, err := snapshot.Open(path, snapshot.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out := map[string]int{}
	count := func(e *snapshot.Entry) { out[e.Record.Message.Class]++ }
	if _, err := st.Walk(snapshot.Walk{Pending: count, Dead: count}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRenameClassCommand: rename-class gives the old class's records to
// the new name and says how many per bucket; a second run renames
// nothing; a locked file points at the runtime's mapping.
func TestRenameClassCommand(t *testing.T) {
	t.Parallel()
	path := stateFile(t)
	before := classCounts(t, path)
	if before["orders"] == 0 {
		t.Fatalf("the fixture has no orders records: %v", before)
	}
	r := run(t, "rename-class", path, "orders", "bookings")
	if r.code != 0 || !regexp.MustCompile(`renamed class "orders" to "bookings" in \S+: \d+ records \(dead \d+, `).MatchString(r.stdout) {
		t.Fatalf("rename-class: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	after := classCounts(t, path)
	if after["orders"] != 0 || after["bookings"] != before["orders"] {
		t.Errorf("classes before %v, after %v", before, after)
	}
	if r := run(t, "rename-class", path, "orders", "bookings"); r.code != 0 || !strings.Contains(r.stdout, ": 0 records") {
		t.Errorf("second run: exit %d, %q", r.code, r.stdout)
	}
	st, err := snapshot.Open(path, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r = run(t, "rename-class", path, "bookings", "orders", "--lock-timeout", "50ms")
	st.Close()
	if r.code != exitFailure || !strings.Contains(r.stderr, "ClassRenames") {
		t.Errorf("on a locked file: exit %d, %q", r.code, r.stderr)
	}
	if r := run(t, "rename-class", path, "a", "a"); r.code != exitUsage {
		t.Errorf("same names: exit %d", r.code)
	}
}
