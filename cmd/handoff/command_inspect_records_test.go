package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// recordsFile writes a state file with meta (group, instance, classes, a
// pause), a dead letter blocking orders' key k with two messages parked
// behind it, one parked message of users with no blocker, and two
// delayed messages: a redelivery and a deferred one.
func recordsFile(t *testing.T) (path string, t0 time.Time) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "state.db")
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rec := func(id, class, key, reason string, at time.Time) snapshot.Record {
		var k []byte
		if key != "" {
			k = []byte(key)
		}
		return snapshot.Record{Message: handoff.Message{ID: id, Class: class, Key: k, Value: []byte(id)}, Reason: reason, SavedAt: at}
	}
	st, err := snapshot.Open(path, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = errors.Join(st.SetGroup("rental"), st.SetInstance("rental-0"), st.AddClasses("orders", "users"),
		st.PutPause("users", snapshot.Pause{Reason: "db migration", Since: t0}), st.Close())
	if err != nil {
		t.Fatal(err)
	}
	snapshottest.SeedDead(t, path, rec("orders/0/7", "orders", "k", "failed", t0))
	snapshottest.SeedParked(t, path, "orders", []byte("k"), rec("orders/0/8", "orders", "k", "parked", t0.Add(time.Minute)),
		rec("orders/0/9", "orders", "k", "parked", t0.Add(2*time.Minute)))
	snapshottest.SeedParked(t, path, "users", []byte("u"), rec("users/1/3", "users", "u", "parked", t0.Add(3*time.Minute)))
	snapshottest.SeedDelayed(t, path,
		snapshot.Delayed{Due: t0.Add(2 * time.Hour), Record: rec("users/1/4", "users", "", "deferred", t0.Add(4*time.Minute))},
		snapshot.Delayed{Due: t0.Add(time.Hour), Record: rec("orders/1/2", "orders", "r", "redelivery", t0.Add(5*time.Minute))})
	return path, t0
}

// TestInspectRecordsAndMeta: inspect shows the file's meta, its parked
// records with what their key waits for, and its delayed records in due
// order, as text and as JSON, with the bucket table as before.
func TestInspectRecordsAndMeta(t *testing.T) {
	t.Parallel()
	path, t0 := recordsFile(t)
	r := run(t, "inspect", path)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	ts := func(d time.Duration) string { return fmtTime(t0.Add(d)) }
	norm := func(s string) string { return regexp.MustCompile(` {2,}`).ReplaceAllString(s, " | ") }
	for _, want := range []string{
		"BUCKET  RECORDS  OLDEST  NEWEST\npending  0  -  -\n", // the table as before
		"\nmeta\n  group  rental\n  instance  rental-0\n  format  2 (features: none)\n  classes  orders, users\n" +
			"  paused  users since " + ts(0) + ": db migration\n" +
			"  changelog file id  (none)\n  changelog  (no checkpoints)\n",
		// In the parked bucket's order (class length, class, key), each
		// key's in park order.
		"\nparked records, in the order they run\n  CLASS  KEY  ID  SAVED  WAITS FOR\n" +
			"  users  u  users/1/3  " + ts(3*time.Minute) + "  (nothing in this file: released at the next start)\n" +
			"  orders  k  orders/0/8  " + ts(time.Minute) + "  orders/0/7 (dead)\n" +
			"  orders  k  orders/0/9  " + ts(2*time.Minute) + "  orders/0/7 (dead)\n",
		"\ndelayed records, in due order\n  DUE  CLASS  KEY  ID  REASON\n" +
			"  " + ts(time.Hour) + "  orders  r  orders/1/2  redelivery\n" +
			"  " + ts(2*time.Hour) + "  users  (none)  users/1/4  deferred\n",
	} {
		if !strings.Contains(norm(r.stdout), norm(want)) {
			t.Errorf("inspect:\n%s\nwant it to contain:\n%s", r.stdout, want)
		}
	}

	r = run(t, "inspect", "--records", "1", path)
	if r.code != 0 || strings.Count(r.stdout, "  ... 2 more (--records)\n") != 1 || strings.Count(r.stdout, "  ... 1 more (--records)\n") != 1 {
		t.Errorf("--records 1: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = run(t, "inspect", "--json", path)
	if r.code != 0 {
		t.Fatalf("--json: exit %d: %s", r.code, r.stderr)
	}
	var rep inspectReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, r.stdout)
	}
	m := rep.Meta
	if m == nil || m.Group != "rental" || m.Instance != "rental-0" || m.Format != 2 || len(m.Features) != 0 ||
		fmt.Sprint(m.Classes) != "[orders users]" || len(m.Pauses) != 1 || m.Pauses[0] != (pauseReport{Class: "users", Reason: "db migration", Since: t0}) {
		t.Errorf("json meta %+v", m)
	}
	var parked []string
	for _, p := range rep.Parked {
		b := "-"
		if p.Blocker != nil {
			b = p.Blocker.Bucket + ":" + p.Blocker.ID
		}
		parked = append(parked, fmt.Sprintf("%s/%s/%s/%s", p.Class, *p.KeyText, p.ID, b))
	}
	if got := strings.Join(parked, " "); got != "users/u/users/1/3/- orders/k/orders/0/8/dead:orders/0/7 orders/k/orders/0/9/dead:orders/0/7" {
		t.Errorf("json parked %s", got)
	}
	if len(rep.Delayed) != 2 || rep.Delayed[0].ID != "orders/1/2" || !rep.Delayed[0].Due.Equal(t0.Add(time.Hour)) ||
		rep.Delayed[0].Reason != "redelivery" || rep.Delayed[1].Key != nil || rep.Delayed[1].KeyText != nil {
		t.Errorf("json delayed %+v", rep.Delayed)
	}
	// The keys of before are still there.
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"path", "size_bytes", "buckets", "meta", "parked_records", "delayed_records"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("json has no key %s", k)
		}
	}
}

// TestInspectChangelog: inspect shows the file's changelog ID and its
// checkpoints, sorted by topic and partition, as text and as JSON.
func TestInspectChangelog(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := snapshot.Open(path, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.OpenChangelog(snapshot.ChangelogConfig{Log: memLog{&[]snapshot.LogRecord{}},
		Route: func(*handoff.Message) (string, int32, bool) { return "", 0, false }})
	if err == nil {
		err = st.KeepCheckpoints([]snapshot.Checkpoint{{Topic: "users", Partition: 0, Next: 7}, {Topic: "orders", Partition: 1, Next: 42},
			{Topic: "orders", Partition: 0, Next: 3}})
	}
	var info snapshot.FileInfo
	if err == nil {
		info, err = st.FileInfo()
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	id := info.FileID
	hexID := fmt.Sprintf("%x", id)

	r := run(t, "inspect", path)
	want := "  changelog file id                 " + hexID + "\n" +
		"  changelog/orders/0  next offset 3\n  changelog/orders/1  next offset 42\n  changelog/users/0  next offset 7\n"
	norm := func(s string) string { return regexp.MustCompile(` {2,}`).ReplaceAllString(s, " | ") }
	if r.code != 0 || !strings.Contains(norm(r.stdout), norm(want)) {
		t.Errorf("exit %d:\n%s\nwant it to contain:\n%s", r.code, r.stdout, want)
	}

	r = run(t, "inspect", "--json", path)
	var rep inspectReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil {
		t.Fatalf("--json: exit %d, %v:\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	wantCP := []checkpointReport{{"orders", 0, 3}, {"orders", 1, 42}, {"users", 0, 7}}
	if rep.Meta.ChangelogFileID != hexID || fmt.Sprint(rep.Meta.Checkpoints) != fmt.Sprint(wantCP) {
		t.Errorf("json: file id %q checkpoints %v; want %s %v", rep.Meta.ChangelogFileID, rep.Meta.Checkpoints, hexID, wantCP)
	}
}

// TestWriteWarnsOfChangelog: a command that writes to the state file of a
// service that runs with the changelog warns that the write reaches the
// file only; a read does not, nor does a write to a file without one.
func TestWriteWarnsOfChangelog(t *testing.T) {
	t.Parallel()
	const warning = "this command changes the file only, not the changelog"
	plain := filepath.Join(t.TempDir(), "plain.db") // a LocalStateOnly service's
	st, err := snapshot.Open(plain, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(st.AddClasses("orders"), st.Close()); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "pause", plain, "orders", "--reason", "x"); r.code != 0 || strings.Contains(r.stderr, warning) {
		t.Fatalf("pause on a file without a changelog: exit %d, stderr %q", r.code, r.stderr)
	}
	backed := stateFile(t)
	st, err = snapshot.Open(backed, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.OpenChangelog(snapshot.ChangelogConfig{Log: memLog{&[]snapshot.LogRecord{}},
		Route: func(*handoff.Message) (string, int32, bool) { return "", 0, false }})
	if err := errors.Join(err, st.Close()); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "inspect", backed); r.code != 0 || strings.Contains(r.stderr, warning) {
		t.Errorf("inspect: exit %d, stderr %q; a read does not warn", r.code, r.stderr)
	}
	if r := run(t, "pause", backed, "orders", "--reason", "x"); r.code != 0 || !strings.Contains(r.stderr, warning) {
		t.Errorf("pause on a changelog-backed file: exit %d, stderr %q; want the warning", r.code, r.stderr)
	}
}
