package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

func sortedKeys(m map[uint64]snapshot.Record) []uint64 { return slices.Sorted(maps.Keys(m)) }

// firstDead returns a fixture state file (see stateFile), the ID of the
// dead letter with the lowest key and that dead letter.
func firstDead(t *testing.T) (path string, id string, rec snapshot.Record) {
	t.Helper()
	path = stateFile(t)
	fs := readState(t, path)
	k := sortedKeys(fs.dead)[0]
	return path, fs.deadID[k], fs.dead[k]
}

func TestDeadList(t *testing.T) {
	t.Parallel()
	path := stateFile(t)
	fs := readState(t, path)
	keys := sortedKeys(fs.dead)

	t.Run("all", func(t *testing.T) {
		r := run(t, "dead", "list", path)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if !regexp.MustCompile(`^KEY +CLASS +ID +ATTEMPTS +FIRST FAILED +LAST FAILED +ERROR$`).MatchString(lines[0]) {
			t.Errorf("header: %q", lines[0])
		}
		if len(lines) != 1+len(keys) {
			t.Fatalf("%d lines for %d dead letters:\n%s", len(lines), len(keys), r.stdout)
		}
		for i, k := range keys {
			rec := fs.dead[k]
			f := strings.Fields(lines[1+i])
			want := []string{fs.deadID[k], rec.Message.Class, rec.Message.ID, "1", fmtTime(rec.FirstFailed), fmtTime(rec.SavedAt), "permanent:"}
			if len(f) < len(want) || !slices.Equal(f[:len(want)], want) {
				t.Errorf("row %d: %q, want it to start with %q", i, lines[1+i], want)
			}
			if !strings.Contains(lines[1+i], oneLine(rec.Err, errorWidth)) {
				t.Errorf("row %d does not show the error %q: %q", i, rec.Err, lines[1+i])
			}
		}
	})

	t.Run("pages", func(t *testing.T) {
		var seen []uint64
		after := "0"
		for page := 0; ; page++ {
			r := run(t, "dead", "list", path, "--limit", "5", "--after", after)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			next := ""
			if last := lines[len(lines)-1]; strings.HasPrefix(last, "more: --after ") {
				next = strings.TrimPrefix(last, "more: --after ")
				lines = lines[:len(lines)-1]
			}
			for _, l := range lines[1:] {
				seen = append(seen, fs.keyOf[strings.Fields(l)[0]])
			}
			if next == "" {
				break
			}
			if len(lines) != 6 {
				t.Fatalf("page %d has %d rows before a next page", page, len(lines)-1)
			}
			after = next
		}
		if !slices.Equal(seen, keys) {
			t.Errorf("pages listed %v, want %v", seen, keys)
		}
	})

	t.Run("class and json", func(t *testing.T) {
		r := run(t, "dead", "list", path, "--class", "users", "--json")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		var out deadPageJSONOut
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatal(err)
		}
		if len(out.DeadLetters) != classes(fs.dead)["users"] || out.Next != 0 {
			t.Fatalf("%d users dead letters, next %d; want %d", len(out.DeadLetters), out.Next, classes(fs.dead)["users"])
		}
		for _, d := range out.DeadLetters {
			rec := fs.dead[fs.keyOf[d.Key]]
			if d.Class != "users" || d.ID != rec.Message.ID || string(d.Value) != string(rec.Message.Value) || d.Error != rec.Err {
				t.Errorf("json dead letter %+v, stored %+v", d, rec)
			}
		}
		r = run(t, "dead", "list", path, "--class", "nope")
		if r.code != 0 || r.stdout != "no dead letters of class \"nope\"\n" {
			t.Errorf("empty class: %d %q", r.code, r.stdout)
		}
	})
}

func TestDeadShow(t *testing.T) {
	t.Parallel()
	path, k, rec := firstDead(t)
	m := rec.Message

	r := run(t, "dead", "show", path, k)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("key           %s\n", k),
		"id            " + m.ID + "\n",
		"class         " + m.Class + "\n",
		fmt.Sprintf("origin        topic %s, partition %d, offset %d\n", m.Origin.Topic, m.Origin.Partition, m.Origin.Offset),
		"attempts      1\n",
		"redeliveries  0\n",
		"first failed  " + fmtTime(rec.FirstFailed) + "\n",
		"last failed   " + fmtTime(rec.SavedAt) + "\n",
		"reason        " + rec.Reason + "\n",
		"message key   " + string(m.Key) + "\n",
		"error:\n  " + rec.Err + "\n",
		"headers: 2\n",
		"  trace-id  " + string(m.Headers[0].Value) + "\n",
		"  bin       (hex, 4 bytes) 0001feff\n",
		fmt.Sprintf("value: text, %d bytes\n  %s\n", len(m.Value), m.Value),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show does not print %q:\n%s", want, r.stdout)
		}
	}

	r = run(t, "dead", "show", "--json", path, k)
	var j recordJSON
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || r.code != 0 {
		t.Fatalf("--json: %d %v\n%s", r.code, err, r.stdout)
	}
	if j.ID != m.ID || string(j.MessageKey) != string(m.Key) || string(j.Value) != string(m.Value) ||
		len(j.Headers) != 2 || string(j.Headers[1].Value) != "\x00\x01\xfe\xff" || !j.LastFailed.Equal(rec.SavedAt) || j.ValueText == nil || j.MessageKeyText == nil || j.Offset != m.Origin.Offset {
		t.Errorf("--json: %+v, stored %+v", j, rec)
	}
}

// TestDeadShowBinary: a value that is not text is shown as a hex dump, and
// control characters never reach the terminal.
func TestDeadShowBinary(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	now := time.Now()
	rec := snapshot.Record{
		Message: handoff.Message{
			ID: "sub-1", Class: "local", Key: []byte("\x1b[2Jk"), Value: []byte{0xff, 0x00, 'a', 0x1b},
			Headers: []handoff.Header{{Key: "e\x1bvil", Value: []byte("ok")}, {Key: "empty", Value: []byte{}}},
		},
		Reason: "failed", Err: "line one\nline \x1b[31mtwo", FirstFailed: now.Add(-time.Minute), SavedAt: now,
	}
	ids := snapshottest.SeedDead(t, path, rec)
	r := run(t, "dead", "show", path, ids[0].String())
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, "\x1b") {
		t.Errorf("escape character printed:\n%q", r.stdout)
	}
	for _, want := range []string{
		"origin        - (submitted in-process)\n",
		"message key   (hex, 5 bytes) 1b5b324a6b\n",
		"first failed  " + fmtTime(now.Add(-time.Minute)) + "\n",
		"error:\n  line one\n  line \\x1b[31mtwo\n",
		"  e\\x1bvil  ok\n",
		"  empty     (empty)\n",
		"value: hex, 4 bytes\n  00000000  ff 00 61 1b",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show does not print %q:\n%s", want, r.stdout)
		}
	}
}

func TestDeadRequeue(t *testing.T) {
	t.Parallel()
	path := stateFile(t)
	before := readState(t, path)
	keys := sortedKeys(before.dead)

	// Two keys by name.
	r := run(t, "dead", "requeue", path, before.deadID[keys[0]], before.deadID[keys[3]])
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "requeued 2 dead letters to pending") {
		t.Errorf("output: %s", r.stdout)
	}
	after := readState(t, path)
	if len(after.dead) != len(before.dead)-2 || len(after.pending) != len(before.pending)+2 {
		t.Fatalf("dead %d -> %d, pending %d -> %d", len(before.dead), len(after.dead), len(before.pending), len(after.pending))
	}
	for _, k := range []uint64{keys[0], keys[3]} {
		if _, ok := after.dead[k]; ok {
			t.Errorf("dead letter %d still there", k)
		}
		found := false
		for pk, p := range after.pending {
			if p.Message.ID != before.dead[k].Message.ID {
				continue
			}
			found = true
			if p.Message.Attempt != 0 || string(p.Message.Value) != string(before.dead[k].Message.Value) {
				t.Errorf("requeued %d as pending %d: attempt %d, value %q", k, pk, p.Message.Attempt, p.Message.Value)
			}
			if !strings.Contains(r.stdout, fmt.Sprintf("dead %s -> pending %d\n", before.deadID[k], pk)) {
				t.Errorf("output does not map %d to %d:\n%s", k, pk, r.stdout)
			}
		}
		if !found {
			t.Errorf("dead letter %d not in pending", k)
		}
	}

	// A class, then the rest.
	users := classes(after.dead)["users"]
	r = run(t, "dead", "requeue", path, "--all", "--class", "users")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("requeued %d dead letters of class \"users\"", users)) {
		t.Fatalf("--class users: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if c := classes(readState(t, path).dead); c["users"] != 0 || c["orders"] != classes(after.dead)["orders"] {
		t.Errorf("after requeue --all --class users, dead letters per class: %v", c)
	}
	r = run(t, "dead", "requeue", path, "--all")
	if r.code != 0 {
		t.Fatalf("--all: %d %s", r.code, r.stderr)
	}
	final := readState(t, path)
	if len(final.dead) != 0 || len(final.pending) != len(before.pending)+len(before.dead) {
		t.Errorf("after --all: dead %d, pending %d", len(final.dead), len(final.pending))
	}
	r = run(t, "inspect", "--json", path)
	var rep inspectReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	for _, b := range rep.Buckets {
		if (b.Name == "dead" && b.Records != 0) || (b.Name == "pending" && b.Records != len(final.pending)) {
			t.Errorf("inspect after requeue: %+v", b)
		}
	}
	r = run(t, "dead", "requeue", path, "--all")
	if r.code != 0 || r.stdout != "no dead letters to requeue\n" {
		t.Errorf("requeue of nothing: %d %q", r.code, r.stdout)
	}
}

func TestDeadDiscard(t *testing.T) {
	t.Parallel()
	path := stateFile(t)
	before := readState(t, path)
	keys := sortedKeys(before.dead)

	r := run(t, "dead", "discard", path, before.deadID[keys[1]])
	if r.code != 0 || r.stdout != "discarded 1 dead letters\n" {
		t.Fatalf("discard one: %d %q %s", r.code, r.stdout, r.stderr)
	}
	after := readState(t, path)
	if _, ok := after.dead[keys[1]]; ok || len(after.dead) != len(before.dead)-1 || len(after.pending) != len(before.pending) {
		t.Fatalf("after discard: dead %d, pending %d", len(after.dead), len(after.pending))
	}
	orders := classes(after.dead)["orders"]
	r = run(t, "dead", "discard", path, "--all", "--class", "orders")
	if r.code != 0 || r.stdout != fmt.Sprintf("discarded %d dead letters of class \"orders\"\n", orders) {
		t.Fatalf("discard orders: %d %q", r.code, r.stdout)
	}
	r = run(t, "dead", "discard", path, "--all")
	if r.code != 0 {
		t.Fatalf("discard all: %d %s", r.code, r.stderr)
	}
	final := readState(t, path)
	if len(final.dead) != 0 || len(final.pending) != len(before.pending) {
		t.Errorf("after discard --all: dead %d, pending %d", len(final.dead), len(final.pending))
	}
}

// apiDeadFields are the fields of the admin API's GET /api/dead/{key}
// (docs/admin.md), which dead show --json must print too.
var apiDeadFields = []string{"key", "id", "class", "message_key", "message_key_text", "value", "value_text", "headers",
	"topic", "partition", "offset", "timestamp", "attempt", "first_seen", "reason", "error", "redeliveries", "first_failed", "last_failed"}

// TestDeadShowJSONIsTheAPIs: dead show --json prints the fields of the
// admin API's dead letter (before, value_text, message_key_text and
// last_failed were missing), and dead show finds a dead letter by its
// message ID as well as by its key.
func TestDeadShowJSONIsTheAPIs(t *testing.T) {
	t.Parallel()
	path, k, rec := firstDead(t)
	byKey := run(t, "dead", "show", "--json", path, k)
	if byKey.code != 0 {
		t.Fatalf("show --json %s: exit %d: %s", k, byKey.code, byKey.stderr)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(byKey.stdout), &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range apiDeadFields {
		if _, ok := fields[f]; !ok && f != "timestamp" && f != "first_seen" && f != "topic" { // omitted when zero
			t.Errorf("dead show --json has no %q:\n%s", f, byKey.stdout)
		}
	}
	for f := range fields {
		if !slices.Contains(apiDeadFields, f) {
			t.Errorf("dead show --json has %q, which the API has not", f)
		}
	}
	byID := run(t, "dead", "show", "--json", path, rec.Message.ID)
	if byID.code != 0 || byID.stdout != byKey.stdout {
		t.Errorf("show --json %s: exit %d, %s\nby key:\n%s", rec.Message.ID, byID.code, byID.stdout+byID.stderr, byKey.stdout)
	}
	if r := run(t, "dead", "show", path, "no/such/id"); r.code == 0 || !strings.Contains(r.stderr, `"no/such/id"`) {
		t.Errorf("show of an unknown ID: exit %d, %s", r.code, r.stderr)
	}
}
