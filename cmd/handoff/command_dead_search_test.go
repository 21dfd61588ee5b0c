package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/handoff-go/handoff/snapshot"
)

// TestDeadListSearch: 'dead list STATE' with each search flag alone and
// combined lists exactly the dead letters it names, with their count,
// oldest and newest first, pages --newest without a gap or a repeat, and
// refuses a bad flag with a usage error naming it.
func TestDeadListSearch(t *testing.T) {
	t.Parallel()
	path := stateFile(t)
	fs := readState(t, path)
	keys := sortedKeys(fs.dead)
	// A time between two dead letters' last failures, for --since and
	// --until; the fixture's failures may share a second, so find one.
	var mid time.Time
	for i := 1; i < len(keys); i++ {
		if a, b := fs.dead[keys[i-1]].SavedAt, fs.dead[keys[i]].SavedAt; b.After(a) {
			mid = b
			break
		}
	}
	pick := func(keep func(*snapshot.Record) bool) []string {
		var out []string
		for _, k := range keys {
			if r := fs.dead[k]; keep(&r) {
				out = append(out, fs.deadID[k])
			}
		}
		return out
	}
	list := func(args ...string) deadPageJSONOut {
		t.Helper()
		r := run(t, append([]string{"dead", "list", path, "--json", "--limit", "1000"}, args...)...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		var out deadPageJSONOut
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	cases := []struct {
		args []string
		keep func(*snapshot.Record) bool
	}{
		{nil, func(*snapshot.Record) bool { return true }},
		{[]string{"--topic", "users"}, func(r *snapshot.Record) bool { return r.Message.Origin.Topic == "users" }},
		{[]string{"--partition", "1"}, func(r *snapshot.Record) bool { return r.Message.Origin.Partition == 1 }},
		{[]string{"--key", "k-2"}, func(r *snapshot.Record) bool { return string(r.Message.Key) == "k-2" }},
		{[]string{"--error-contains", "bad value"}, func(*snapshot.Record) bool { return true }},
		{[]string{"--error-contains", "no such text"}, func(*snapshot.Record) bool { return false }},
		{[]string{"--min-attempts", "1"}, func(r *snapshot.Record) bool { return r.Message.Attempt >= 1 }},
		{[]string{"--min-attempts", "2"}, func(r *snapshot.Record) bool { return r.Message.Attempt >= 2 }},
		{[]string{"--since", mid.Format(time.RFC3339Nano)}, func(r *snapshot.Record) bool { return !r.SavedAt.Before(mid) }},
		{[]string{"--until", mid.Format(time.RFC3339Nano)}, func(r *snapshot.Record) bool { return r.SavedAt.Before(mid) }},
		{[]string{"--first-until", mid.Format(time.RFC3339Nano)}, func(r *snapshot.Record) bool { return !r.FirstFailed.IsZero() && r.FirstFailed.Before(mid) }},
		{[]string{"--first-since", mid.Format(time.RFC3339Nano)}, func(r *snapshot.Record) bool { return !r.FirstFailed.Before(mid) }},
		{[]string{"--class", "orders", "--partition", "0", "--error-contains", "poison"}, func(r *snapshot.Record) bool {
			return r.Message.Class == "orders" && r.Message.Origin.Partition == 0 && strings.Contains(r.Err, "poison")
		}},
	}
	for _, c := range cases {
		want := pick(c.keep)
		for _, newest := range []bool{false, true} {
			args := c.args
			if newest {
				args = append(slices.Clone(args), "--newest")
				want = slices.Clone(want)
				slices.Reverse(want)
			}
			out := list(args...)
			var got []string
			for _, d := range out.DeadLetters {
				got = append(got, d.Key)
			}
			if !slices.Equal(got, want) || out.Total == nil || *out.Total != len(want) || out.Next != 0 {
				t.Errorf("%v: %v (total %v, next %d), want %v", args, got, out.Total, out.Next, want)
			}
		}
	}
	if mid.IsZero() || len(pick(cases[3].keep)) == 0 || len(pick(cases[12].keep)) == 0 || len(pick(cases[7].keep)) == len(keys) {
		t.Fatalf("the fixture does not tell the cases apart (mid %v)", mid)
	}

	// --newest by pages of 3, and the count line of the table.
	var seen []string
	after := "0"
	for range len(keys) {
		r := run(t, "dead", "list", path, "--newest", "--limit", "3", "--after", after)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		next := ""
		if last := lines[len(lines)-1]; strings.HasPrefix(last, "more: --after ") {
			next = strings.TrimPrefix(last, "more: --after ")
			lines = lines[:len(lines)-1]
		}
		if count := lines[len(lines)-1]; count != fmt.Sprintf("%d matches", len(keys)) {
			t.Fatalf("count line %q", count)
		}
		for _, l := range lines[1 : len(lines)-1] {
			seen = append(seen, strings.Fields(l)[0])
		}
		if next == "" {
			break
		}
		after = next
	}
	want := pick(func(*snapshot.Record) bool { return true })
	slices.Reverse(want)
	if !slices.Equal(seen, want) {
		t.Errorf("--newest pages: %v, want %v", seen, want)
	}

	for _, c := range []struct{ args []string }{
		{[]string{"--partition", "-2"}},
		{[]string{"--min-attempts", "-1"}},
		{[]string{"--since", "yesterday"}},
		{[]string{"--until", "2026-13-01"}},
		{[]string{"--first-since", "x"}},
		{[]string{"--topic", "a", "--topic", "b"}},
	} {
		r := run(t, append([]string{"dead", "list", path}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.args[0]) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %s", c.args, r.code, r.stderr, c.args[0])
		}
	}
}
