package runtime

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// searchRig is a state file holding mixed dead letters, searched through
// the real failures component.
type searchRig struct {
	fail *failures
	ids  []string // message IDs in save order
	recs []snapshot.Record
	t0   time.Time
}

// newSearchRig saves 40 dead letters: classes mail/sms alternating,
// topics a/b by i%3, partitions i%4, keys k<i%5>, errors "timeout" for
// i%6==0 else "bad address <i>", attempts i%7, first failure t0+i min,
// last failure t0+i min+30 s; the last has no first failure (as an
// orphan of an unknown class).
func newSearchRig(t *testing.T) *searchRig {
	t.Helper()
	store, state := openState(t)
	var accepting atomic.Bool
	g := &searchRig{t0: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}
	g.fail = newFailures(failuresConfig{state: state, tally: &tally{}, classes: map[string]*class{}, accepting: &accepting,
		log: slog.New(slog.DiscardHandler), publish: func(*class, snapshot.Record) {}})
	for i := range 40 {
		class := "mail"
		if i%2 == 1 {
			class = "sms"
		}
		topic := "a"
		if i%3 == 1 {
			topic = "b"
		}
		errText := fmt.Sprintf("bad address %d", i)
		if i%6 == 0 {
			errText = "dial: timeout"
		}
		rec := snapshot.Record{Message: handoff.Message{ID: fmt.Sprintf("m%02d", i), Class: class,
			Key: []byte(fmt.Sprintf("k%d", i%5)), Attempt: i % 7, Origin: handoff.Origin{Topic: topic, Partition: i % 4, Offset: int64(i)}},
			Reason: "failed", Err: errText,
			FirstFailed: g.t0.Add(time.Duration(i) * time.Minute), SavedAt: g.t0.Add(time.Duration(i)*time.Minute + 30*time.Second)}
		if i == 39 {
			rec.FirstFailed = time.Time{}
		}
		// A Kafka message moved to a dead letter: nothing to delete.
		if err := store.MoveToDead(snapshot.Move{}, rec); err != nil {
			t.Fatal(err)
		}
		g.ids = append(g.ids, rec.Message.ID)
		g.recs = append(g.recs, rec)
	}
	return g
}

// want returns the IDs of the records pick accepts, in save order.
func (g *searchRig) want(pick func(i int, r *snapshot.Record) bool) []string {
	var out []string
	for i := range g.recs {
		if pick(i, &g.recs[i]) {
			out = append(out, g.ids[i])
		}
	}
	return out
}

// all pages through filter with limit and returns the IDs in the order
// the pages gave them, checking every page's total.
func (g *searchRig) all(t *testing.T, filter DeadFilter, limit int) []string {
	t.Helper()
	var out []string
	var after Cursor
	for pages := 0; ; pages++ {
		page, next, total, err := g.fail.find(filter, after, limit)
		if err != nil {
			t.Fatalf("%+v after %q: %v", filter, after, err)
		}
		if len(page) > limit {
			t.Fatalf("page of %d, limit %d", len(page), limit)
		}
		for _, dl := range page {
			out = append(out, dl.Message.ID)
		}
		if want := len(g.want(func(_ int, r *snapshot.Record) bool { return filter.matchRecord(r) })); total != want {
			t.Fatalf("%+v: total %d, want %d", filter, total, want)
		}
		if next == "" {
			return out
		}
		if len(page) != limit {
			t.Fatalf("short page (%d of %d) with a next page", len(page), limit)
		}
		if pages > 100 {
			t.Fatal("paging does not end")
		}
		after = next
	}
}

// TestFindDeadLettersFilters: each filter alone and combined selects
// exactly the dead letters it names, oldest first and newest first, with
// the count of all matches, on every page size.
func TestFindDeadLettersFilters(t *testing.T) {
	g := newSearchRig(t)
	two := 2
	cases := []struct {
		name   string
		filter DeadFilter
		pick   func(i int, r *snapshot.Record) bool
	}{
		{"none", DeadFilter{}, func(int, *snapshot.Record) bool { return true }},
		{"class", DeadFilter{Class: "sms"}, func(i int, _ *snapshot.Record) bool { return i%2 == 1 }},
		{"topic", DeadFilter{Topic: "b"}, func(i int, _ *snapshot.Record) bool { return i%3 == 1 }},
		{"partition", DeadFilter{Partition: &two}, func(i int, _ *snapshot.Record) bool { return i%4 == 2 }},
		{"key", DeadFilter{Key: []byte("k3")}, func(i int, _ *snapshot.Record) bool { return i%5 == 3 }},
		{"error", DeadFilter{ErrorContains: "timeout"}, func(i int, _ *snapshot.Record) bool { return i%6 == 0 }},
		{"attempts", DeadFilter{MinAttempts: 5}, func(i int, _ *snapshot.Record) bool { return i%7 >= 5 }},
		{"since", DeadFilter{Since: g.t0.Add(10*time.Minute + 30*time.Second)}, func(i int, _ *snapshot.Record) bool { return i >= 10 }},
		{"until", DeadFilter{Until: g.t0.Add(10*time.Minute + 30*time.Second)}, func(i int, _ *snapshot.Record) bool { return i < 10 }},
		{"first", DeadFilter{FirstSince: g.t0.Add(30 * time.Minute), FirstUntil: g.t0.Add(time.Hour)}, func(i int, _ *snapshot.Record) bool { return i >= 30 && i < 39 }},
		{"combined", DeadFilter{Class: "mail", Topic: "a", Partition: &two, ErrorContains: "bad", Since: g.t0.Add(time.Minute), Until: g.t0.Add(35 * time.Minute)},
			func(i int, _ *snapshot.Record) bool {
				return i%2 == 0 && i%3 != 1 && i%4 == 2 && i%6 != 0 && i >= 1 && i < 35
			}},
		{"nothing", DeadFilter{Class: "mail", Key: []byte("nope")}, func(int, *snapshot.Record) bool { return false }},
	}
	for _, tc := range cases {
		want := g.want(tc.pick)
		if tc.name != "nothing" && len(want) == 0 {
			t.Fatalf("%s: the rig has no match: a useless case", tc.name)
		}
		for _, limit := range []int{1, 3, 7, 100} {
			f := tc.filter
			if got := g.all(t, f, limit); !slices.Equal(got, want) {
				t.Errorf("%s oldest first, limit %d: %v, want %v", tc.name, limit, got, want)
			}
			f.Newest = true
			rev := slices.Clone(want)
			slices.Reverse(rev)
			if got := g.all(t, f, limit); !slices.Equal(got, rev) {
				t.Errorf("%s newest first, limit %d: %v, want %v", tc.name, limit, got, rev)
			}
		}
	}
}

// TestFindDeadLettersPagingStable: dead letters saved and deleted while
// an operator pages neither repeat nor skip one that stays, both ways;
// a cursor of one order is refused by the other; a bad limit is an
// error.
func TestFindDeadLettersPagingStable(t *testing.T) {
	g := newSearchRig(t)
	for _, newest := range []bool{false, true} {
		f := DeadFilter{Class: "mail", Newest: newest}
		page, next, total, err := g.fail.find(f, "", 4)
		if err != nil || total != 20 || len(page) != 4 || next == "" {
			t.Fatalf("first page: %d, total %d, next %q, %v", len(page), total, next, err)
		}
		seen := map[string]bool{}
		for _, dl := range page {
			seen[dl.Message.ID] = true
		}
		// Between pages: a new mail dead letter, and one not yet listed
		// deleted.
		added := snapshot.Record{Message: handoff.Message{ID: fmt.Sprintf("new-%v", newest), Class: "mail"}, Reason: "failed", SavedAt: time.Now()}
		if err := g.fail.cfg.state.store.MoveToDead(snapshot.Move{}, added); err != nil {
			t.Fatal(err)
		}
		rest, _, _, err := g.fail.find(f, next, 100)
		if err != nil {
			t.Fatal(err)
		}
		gone := rest[len(rest)/2]
		if err := g.fail.discard(t.Context(), gone.Key); err != nil {
			t.Fatal(err)
		}
		for after := next; after != ""; {
			page, after, _, err = g.fail.find(f, after, 4)
			if err != nil {
				t.Fatal(err)
			}
			for _, dl := range page {
				if seen[dl.Message.ID] {
					t.Errorf("newest %v: %s listed twice", newest, dl.Message.ID)
				}
				seen[dl.Message.ID] = true
			}
		}
		for _, dl := range rest {
			if dl.Key != gone.Key && !seen[dl.Message.ID] {
				t.Errorf("newest %v: %s skipped", newest, dl.Message.ID)
			}
		}
		if seen[gone.Message.ID] {
			t.Errorf("newest %v: deleted %s listed", newest, gone.Message.ID)
		}
		if seen[added.Message.ID] == newest {
			t.Errorf("newest %v: dead letter saved while paging listed: %v (want only oldest first, at the end)", newest, seen[added.Message.ID])
		}
		if _, _, _, err := g.fail.find(DeadFilter{Newest: !newest}, next, 4); !errors.Is(err, ErrBadCursor) {
			t.Errorf("cursor of the other order: %v, want ErrBadCursor", err)
		}
	}
	if _, _, _, err := g.fail.find(DeadFilter{}, "", 0); err == nil {
		t.Error("limit 0 accepted")
	}
	// The old listing's cursor is an oldest-first search's.
	_, next, err := g.fail.list("", "", 3)
	if err != nil {
		t.Fatal(err)
	}
	page, _, _, err := g.fail.find(DeadFilter{}, next, 1)
	if err != nil || len(page) != 1 || page[0].Message.ID != g.ids[3] {
		t.Errorf("DeadLetters' cursor in a search: %v, %v; want %s", page, err, g.ids[3])
	}
}
