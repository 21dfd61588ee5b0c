package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/handoff-go/handoff"
)

// poisonUnless fails for good every message whose value starts with
// "poison", and records the others as handled in b.
func poisonUnless(b *bundle) handoff.HandlerFunc {
	return func(_ context.Context, m *handoff.Message) error {
		if strings.HasPrefix(string(m.Value), "poison") {
			return handoff.Permanent(fmt.Errorf("poison %s", m.Value))
		}
		b.record(m)
		return nil
	}
}

// groupAll pages through rt's GroupDeadLetters with filter, limit at a
// time, and returns every dead letter listed, failing on a duplicate,
// a total that changes, or a page longer than limit.
func groupAll(t *testing.T, rt *Runtime, filter DeadFilter, limit int) ([]GroupDeadLetter, int) {
	t.Helper()
	var all []GroupDeadLetter
	seen := map[string]bool{}
	total := -1
	var after Cursor
	for range 1000 {
		page, next, n, err := rt.GroupDeadLetters(context.Background(), filter, after, limit)
		if err != nil {
			t.Fatalf("GroupDeadLetters(%+v, %q, %d): %v", filter, after, limit, err)
		}
		if total >= 0 && n != total {
			t.Fatalf("total changed from %d to %d while paging", total, n)
		}
		total = n
		if len(page) > limit {
			t.Fatalf("page of %d, limit %d", len(page), limit)
		}
		for _, g := range page {
			if seen[g.Key] {
				t.Fatalf("dead letter %s listed twice", g.Key)
			}
			seen[g.Key] = true
			all = append(all, g)
		}
		if next == "" {
			return all, total
		}
		after = next
	}
	t.Fatal("more than 1000 pages")
	return nil, 0
}

// TestGroupDeadLetters: three instances, dead letters on every partition:
// each instance lists all of them (its own from its file, the others'
// from the changelogs), with the same IDs and each one's owner, paged
// both ways without a repeat or a gap, counted and filtered alike.
func TestGroupDeadLetters(t *testing.T) {
	t.Parallel()
	const parts, perPart = 3, 4
	b := setup(t, parts, "orders")
	cfg := func(string) Config { return b.config(poisonUnless(b), nil) }
	rtA, waitA := b.instance("a", cfg("a"))
	waitFor(t, "a ready", rtA.Ready)
	for p := range parts {
		vals := make([]string, perPart)
		for i := range vals {
			vals[i] = fmt.Sprintf("poison-p%d-%d", p, i)
		}
		b.produceValues("orders", keyOn(p, parts), vals...)
	}
	waitFor(t, "a's dead letters", func() bool {
		_, _, n, err := rtA.FindDeadLetters(DeadFilter{}, "", 1)
		return err == nil && n == parts*perPart
	})
	rtB, waitB := b.instance("b", cfg("b"))
	rtC, waitC := b.instance("c", cfg("c"))
	rts := map[string]*Runtime{"a": rtA, "b": rtB, "c": rtC}
	defer func() {
		shutdownAndWait(t, rtA, waitA)
		shutdownAndWait(t, rtB, waitB)
		shutdownAndWait(t, rtC, waitC)
	}()
	owner := map[int]string{} // partition -> instance
	waitFor(t, "each instance owning one partition", func() bool {
		clear(owner)
		for name, rt := range rts {
			ps := ownedPartitions(rt)
			if !rt.Ready() || len(ps) != 1 {
				return false
			}
			owner[ps[0].Partition] = name
		}
		return len(owner) == parts
	})

	var want map[string]GroupDeadLetter // ID -> as a lists it
	for _, name := range []string{"a", "b", "c"} {
		rt := rts[name]
		for _, newest := range []bool{false, true} {
			all, total := groupAll(t, rt, DeadFilter{Newest: newest}, 5)
			if total != parts*perPart || len(all) != total {
				t.Fatalf("%s lists %d of %d dead letters, want %d", name, len(all), total, parts*perPart)
			}
			for i, g := range all {
				if i > 0 {
					prev := all[i-1].deadAt()
					if c := prev.compare(g.deadAt()); newest && c < 0 || !newest && c > 0 {
						t.Errorf("%s (newest %v): %s listed after %s", name, newest, g.Key, all[i-1].Key)
					}
				}
				if int(g.Partition) != g.Message.Origin.Partition || g.Topic != "orders" {
					t.Errorf("%s lists %s in topic %q partition %d, its message came from partition %d", name, g.Key, g.Topic, g.Partition, g.Message.Origin.Partition)
				}
				if !ownerNamed(g.Owner, owner[int(g.Partition)]) {
					t.Errorf("%s lists %s of partition %d as %q's, want %s's", name, g.Key, g.Partition, g.Owner, owner[int(g.Partition)])
				}
			}
			if want == nil {
				want = map[string]GroupDeadLetter{}
				for _, g := range all {
					want[g.Key] = g
				}
				continue
			}
			for _, g := range all {
				w, ok := want[g.Key]
				if !ok || string(w.Message.Value) != string(g.Message.Value) || !w.LastFailed.Equal(g.LastFailed) || w.Err != g.Err {
					t.Errorf("%s lists %s as %q %v %q; a listed it as %q %v %q", name, g.Key, g.Message.Value, g.LastFailed, g.Err,
						w.Message.Value, w.LastFailed, w.Err)
				}
			}
		}
		// Filtered: one partition's, one key's error text.
		p1 := 1
		got, total := groupAll(t, rt, DeadFilter{Partition: &p1, ErrorContains: "-2"}, 2)
		if total != 1 || len(got) != 1 || string(got[0].Message.Value) != "poison-p1-2" {
			t.Errorf("%s: filtered listing %v (total %d), want poison-p1-2 alone", name, got, total)
		}
		if _, _, _, err := rt.GroupDeadLetters(context.Background(), DeadFilter{Newest: true}, groupDeadCursor(false, got[0].deadAt()), 2); !errors.Is(err, ErrBadCursor) {
			t.Errorf("%s: an oldest-first cursor given to a newest-first listing: %v, want ErrBadCursor", name, err)
		}
		// One by ID, wherever it is.
		for id, w := range want {
			g, err := rt.GetGroupDeadLetter(context.Background(), id)
			if err != nil || g.Key != id || string(g.Message.Value) != string(w.Message.Value) || !ownerNamed(g.Owner, owner[int(w.Partition)]) {
				t.Errorf("%s: GetGroupDeadLetter(%s) = %s %q owner %q, %v; want %q of %s", name, id, g.Key, g.Message.Value, g.Owner, err,
					w.Message.Value, owner[int(w.Partition)])
			}
			break
		}
	}
	if _, err := rtA.GetGroupDeadLetter(context.Background(), "0000000000000001-999"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetGroupDeadLetter of no dead letter: %v, want ErrNotFound", err)
	}
}

// TestGroupDeadLettersLocal: without the changelog the group's listing is
// this instance's dead letters, owned by it.
func TestGroupDeadLettersLocal(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	cfg := b.config(poisonUnless(b), nil)
	cfg.LocalStateOnly = true
	cfg.Instance = "solo"
	rt, wait := startNew(t, cfg)
	b.produceValues("orders", keyOn(0, 2), "poison-1", "poison-2")
	b.produceValues("orders", keyOn(1, 2), "poison-3")
	waitFor(t, "three dead letters", func() bool {
		_, _, n, err := rt.FindDeadLetters(DeadFilter{}, "", 1)
		return err == nil && n == 3
	})
	all, total := groupAll(t, rt, DeadFilter{}, 2)
	if total != 3 || len(all) != 3 {
		t.Fatalf("listed %d of %d, want 3", len(all), total)
	}
	for _, g := range all {
		if g.Owner != "solo" || g.Partition != -1 || g.Topic != "" {
			t.Errorf("%s: owner %q, topic %q partition %d; want solo's, of no changelog partition", g.Key, g.Owner, g.Topic, g.Partition)
		}
	}
	shutdownAndWait(t, rt, wait)
}
