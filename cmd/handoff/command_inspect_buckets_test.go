package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// corruptFile writes a state file with records in every bucket, made
// with the snapshot API, plus one undecodable record in pending and one
// in dead (written with bbolt, as a damaged file would hold).
func corruptFile(t *testing.T) (path string, t0 time.Time) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "state.db")
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rec := func(id, class string, at time.Time) snapshot.Record {
		return snapshot.Record{Message: handoff.Message{ID: id, Class: class, Key: []byte("k"), Value: []byte(id)}, Reason: "test", SavedAt: at}
	}
	snapshottest.SeedPending(t, path, rec("p1", "orders", t0))
	snapshottest.SeedDead(t, path, rec("d1", "orders", t0.Add(time.Minute)), rec("d2", "users", t0.Add(2*time.Minute)))
	snapshottest.SeedDelayed(t, path,
		snapshot.Delayed{Due: t0.Add(time.Hour), Record: rec("l1", "orders", t0.Add(3*time.Minute))},
		snapshot.Delayed{Due: t0.Add(30 * time.Minute), Record: rec("l2", "users", t0.Add(4*time.Minute))})
	snapshottest.SeedParked(t, path, "orders", []byte("k"), rec("q1", "orders", t0.Add(5*time.Minute)), rec("q2", "orders", t0.Add(6*time.Minute)))
	for _, name := range []string{snapshot.BucketPending, snapshot.BucketDead} {
		snapshottest.Damage(t, path, name, snapshottest.SeqKey(100), []byte{1, 2, 3})
	}
	return path, t0
}

// TestInspectEveryBucket: inspect reports every bucket and changes
// nothing in the file, undecodable records included (before, it moved
// them to the quarantine bucket); inspect --quarantine moves them.
func TestInspectEveryBucket(t *testing.T) {
	t.Parallel()
	path, t0 := corruptFile(t)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, "inspect", path)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(before, after) {
		t.Fatalf("inspect changed the file (%v)", err)
	}
	if !strings.Contains(r.stdout, "1 undecodable records or keys; nothing was changed") {
		t.Errorf("inspect does not report the undecodable record:\n%s", r.stdout)
	}
	r = run(t, "inspect", "--quarantine", path)
	if r.code != 0 {
		t.Fatalf("--quarantine: exit %d: %s", r.code, r.stderr)
	}
	ts := func(d time.Duration) string { return fmtTime(t0.Add(d)) }
	want := fmt.Sprintf(`BUCKET         RECORDS  OLDEST                NEWEST
pending        1        %[1]s  %[1]s
  orders       1
dead           3        %[2]s  %[3]s
  orders       1
  users        1
  (undecodable)  1
delayed        2        %[4]s  %[5]s
  orders       1
  users        1
parked         2        %[6]s  %[7]s
  orders       2
quarantine     1        `, ts(0), ts(time.Minute), ts(2*time.Minute), ts(3*time.Minute), ts(4*time.Minute), ts(5*time.Minute), ts(6*time.Minute))
	// Column widths depend on the longest cell; compare cell by cell.
	norm := func(s string) string { return regexp.MustCompile(` {2,}`).ReplaceAllString(s, " | ") }
	if !strings.Contains(norm(r.stdout), norm(want)) {
		t.Errorf("inspect:\n%s\nwant it to contain:\n%s", r.stdout, want)
	}
	for _, w := range []string{
		"next delayed message due " + ts(30*time.Minute) + "\n",
		"moved 1 undecodable records to quarantine\n",
	} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("inspect does not say %q:\n%s", w, r.stdout)
		}
	}

	r = run(t, "inspect", "--json", path)
	var rep inspectReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, b := range rep.Buckets {
		got[b.Name] = b.Records
		if b.Name == "delayed" && !b.NextDue.Equal(t0.Add(30*time.Minute)) {
			t.Errorf("next due %v", b.NextDue)
		}
	}
	if fmt.Sprint(got) != "map[dead:3 delayed:2 parked:2 pending:1 quarantine:1]" || rep.Quarantined != 0 {
		t.Errorf("json counts %v, quarantined now %d", got, rep.Quarantined)
	}
}

// TestUndecodableDeadLetter: an undecodable dead letter is reported, never
// requeued, and can be discarded.
func TestUndecodableDeadLetter(t *testing.T) {
	t.Parallel()
	path, _ := corruptFile(t)
	warn := "warning: dead letter 100 cannot be decoded and is left out (only 'dead discard' can remove it): "

	r := run(t, "dead", "list", path)
	if r.code != 0 || strings.Count(r.stdout, "\n") != 3 || !strings.HasPrefix(r.stderr, warn) {
		t.Errorf("list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = run(t, "dead", "show", path, "100")
	if r.code != exitFailure || !strings.Contains(r.stderr, "snapshot: decode dead/0000000000000064") {
		t.Errorf("show: exit %d %q", r.code, r.stderr)
	}
	r = run(t, "dead", "requeue", path, "100")
	if r.code != exitFailure || !strings.Contains(r.stderr, "handoff: dead letter 100 in "+path+" cannot be decoded, so it cannot be requeued (discard it)") {
		t.Errorf("requeue by key: exit %d %q", r.code, r.stderr)
	}
	r = run(t, "dead", "requeue", path, "--all", "--class", "users")
	if r.code != 0 || !strings.Contains(r.stdout, `requeued 1 dead letters of class "users"`) {
		t.Errorf("requeue users: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = run(t, "dead", "requeue", path, "--all")
	if r.code != 0 || !strings.Contains(r.stdout, "requeued 1 dead letters to pending") || !strings.HasPrefix(r.stderr, warn) {
		t.Errorf("requeue --all: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = run(t, "dead", "discard", path, "100")
	if r.code != 0 || r.stdout != "discarded 1 dead letters\n" {
		t.Errorf("discard: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = run(t, "inspect", "--json", path)
	var rep inspectReport
	json.Unmarshal([]byte(r.stdout), &rep)
	for _, b := range rep.Buckets {
		if b.Name == "dead" && b.Records != 0 || b.Name == "pending" && b.Records != 4 { // 3, and the undecodable one inspect leaves
			t.Errorf("after: %+v", b)
		}
	}
}

// TestReplayUndecodableDeadLetter: replay --dead sends the dead letters
// that decode and names the one that does not by its ID, as 'dead list'
// does, leaving it in the file; the undecodable pending record goes to
// the quarantine.
func TestReplayUndecodableDeadLetter(t *testing.T) {
	t.Parallel()
	path, _ := corruptFile(t)
	b := startBroker(t)
	r := run(t, "replay", path, "--brokers", b.Addr(), "--dead", "--topic", "orders=orders", "--topic", "users=users")
	warn := "warning: dead letter 100 cannot be decoded and is left out (only 'dead discard' can remove it): "
	if r.code != 0 || !strings.HasPrefix(r.stderr, warn) ||
		!strings.Contains(r.stdout, "moved 1 undecodable pending records to quarantine") ||
		!strings.Contains(r.stdout, "replayed 7 of 7 messages (pending 1, dead letters 2, delayed 2, parked 2)") {
		t.Fatalf("replay --dead: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := snapshottest.Counts(t, path); got[snapshot.BucketDead] != 1 || got[snapshot.BucketPending] != 0 || got[snapshot.BucketQuarantine] != 1 {
		t.Errorf("left in the file: %v; want the undecodable dead letter and the quarantined pending record", got)
	}
}
