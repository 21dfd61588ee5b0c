package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/handoff-go/handoff/snapshot"
)

// span returns the earliest and latest SavedAt of recs.
func span(recs map[uint64]snapshot.Record) (oldest, newest time.Time) {
	for _, r := range recs {
		if oldest.IsZero() || r.SavedAt.Before(oldest) {
			oldest = r.SavedAt
		}
		if r.SavedAt.After(newest) {
			newest = r.SavedAt
		}
	}
	return oldest, newest
}

func TestInspect(t *testing.T) {
	t.Parallel()
	path := stateFile(t)
	fs := readState(t, path)

	r := run(t, "inspect", path)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for name, recs := range map[string]map[uint64]snapshot.Record{"pending": fs.pending, "dead": fs.dead} {
		oldest, newest := span(recs)
		want := fmt.Sprintf(`(?m)^%s +%d +%s +%s$`, name, len(recs), regexp.QuoteMeta(fmtTime(oldest)), regexp.QuoteMeta(fmtTime(newest)))
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("no line %s in:\n%s", want, r.stdout)
		}
		for class, n := range classes(recs) {
			if !regexp.MustCompile(fmt.Sprintf(`(?m)^  %s +%d *$`, class, n)).MatchString(r.stdout) {
				t.Errorf("%s: no line for class %s with %d in:\n%s", name, class, n, r.stdout)
			}
		}
	}
	for _, name := range []string{"quarantine", "delayed", "parked"} {
		if !regexp.MustCompile(`(?m)^` + name + ` +0 +- +-$`).MatchString(r.stdout) {
			t.Errorf("no empty %s line in:\n%s", name, r.stdout)
		}
	}
	if !strings.HasPrefix(r.stdout, "state file  "+path+" (") {
		t.Errorf("no file line:\n%s", r.stdout)
	}

	r = run(t, "inspect", "--json", path)
	if r.code != 0 {
		t.Fatalf("--json: exit %d: %s", r.code, r.stderr)
	}
	var rep inspectReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, r.stdout)
	}
	got := map[string]*bucketReport{}
	for _, b := range rep.Buckets {
		got[b.Name] = b
	}
	for name, recs := range map[string]map[uint64]snapshot.Record{"pending": fs.pending, "dead": fs.dead} {
		b := got[name]
		oldest, newest := span(recs)
		if b == nil || b.Records != len(recs) || !b.Oldest.Equal(oldest) || !b.Newest.Equal(newest) || fmt.Sprint(b.Classes) != fmt.Sprint(classes(recs)) {
			t.Errorf("json %s: %+v, want %d records %v..%v classes %v", name, b, len(recs), oldest, newest, classes(recs))
		}
	}
	if rep.Path != path || rep.Size <= 0 {
		t.Errorf("json path %q size %d", rep.Path, rep.Size)
	}
}
