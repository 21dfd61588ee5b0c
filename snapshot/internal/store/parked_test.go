package store

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	bolt "go.etcd.io/bbolt"
)

// parkRec returns a small record with the given ID, saved at t0+i.
func parkRec(id string, i int) Record {
	return Record{Message: handoff.Message{ID: id, Class: "orders"}, Reason: "parked", SavedAt: t0.Add(time.Duration(i) * time.Second)}
}

func parkedIDs(entries []ParkedEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Record.Message.ID
	}
	return out
}

func TestParkedOrderAndRoundTrip(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	full := fullRecord(1)
	if err := ts.park("orders", []byte("k"), parkRec("1", 1), full); err != nil {
		t.Fatal(err)
	}
	if err := ts.park("orders", []byte("other"), parkRec("x", 2)); err != nil {
		t.Fatal(err)
	}
	if err := ts.park("orders", []byte("k"), parkRec("3", 3)); err != nil {
		t.Fatal(err)
	}
	if err := ts.Update(func(tx *Tx) error { return tx.Park("orders", []byte("k"), parkRec("4", 4)) }); err != nil {
		t.Fatal(err)
	}
	ts.reopen(t)
	got, err := ts.parked("orders", []byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"1", full.Message.ID, "3", "4"}; !slices.Equal(parkedIDs(got), want) {
		t.Fatalf("parked %q, want %q", parkedIDs(got), want)
	}
	requireEqualRecord(t, got[1].Record, full)
	for i, e := range got {
		class, key, seq, err := parseParkedKey(e.Key)
		if err != nil || class != "orders" || string(key) != "k" || (i > 0 && seq <= mustSeq(t, got[i-1].Key)) {
			t.Fatalf("entry %d key %x: %q %q %d %v", i, []byte(e.Key), class, key, seq, err)
		}
	}
	if got, err := ts.parked("orders", []byte("missing")); err != nil || len(got) != 0 {
		t.Fatalf("Parked of an unknown key = %v, %v", got, err)
	}
}

func mustSeq(t *testing.T, k ParkedKey) uint64 {
	t.Helper()
	_, _, seq, err := parseParkedKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// TestParkedKeysDoNotMix parks under (class, key) pairs whose plain
// concatenations are prefixes of each other or equal.
func TestParkedKeysDoNotMix(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	type ck struct {
		class string
		key   []byte
	}
	pairs := []ck{
		{"a", []byte("bk")},
		{"ab", []byte("k")},  // "a"+"bk" == "ab"+"k"
		{"ab", []byte("kk")}, // key with a prefix key
		{"ab", []byte("k\x00")},
		{"abc", []byte("k")},                   // class with a prefix class
		{"", []byte("abk")},                    // empty class
		{"ab", nil},                            // nil key ...
		{"a", []byte{0x01}},                    // looks like a length byte
		{"a", bytes.Repeat([]byte{0xff}, 200)}, // two-byte length
	}
	// Park round-robin so that no pair's records are saved together.
	for round := range 3 {
		for i, p := range pairs {
			if err := ts.park(p.class, p.key, parkRec(fmt.Sprintf("%d/%d", i, round), round)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// ... and an empty key is the same key as nil.
	if err := ts.park("ab", []byte{}, parkRec("6/3", 3)); err != nil {
		t.Fatal(err)
	}
	for i, p := range pairs {
		got, err := ts.parked(p.class, p.key)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{fmt.Sprintf("%d/0", i), fmt.Sprintf("%d/1", i), fmt.Sprintf("%d/2", i)}
		if p.key == nil {
			want = append(want, "6/3")
		}
		if !slices.Equal(parkedIDs(got), want) {
			t.Errorf("Parked(%q, %q) = %q, want %q", p.class, p.key, parkedIDs(got), want)
		}
	}
	if got, err := ts.parked("ab", []byte{}); err != nil || len(got) != 4 {
		t.Fatalf("Parked with an empty key = %q, %v; want the nil key's 4", parkedIDs(got), err)
	}

	counts, err := ts.parkedKeys()
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != len(pairs) {
		t.Fatalf("%d parked keys, want %d: %+v", len(counts), len(pairs), counts)
	}
	for _, p := range pairs {
		i := slices.IndexFunc(counts, func(c ParkedCount) bool { return c.Class == p.class && bytes.Equal(c.Key, p.key) })
		if i < 0 {
			t.Fatalf("ParkedKeys has no (%q, %q)", p.class, p.key)
		}
		want := 3
		if p.key == nil {
			want = 4
			if counts[i].Key != nil {
				t.Errorf("empty key returned as %#v, want nil", counts[i].Key)
			}
		}
		if counts[i].Count != want || !counts[i].Oldest.Equal(t0) {
			t.Errorf("ParkedKeys (%q, %q) = %d oldest %v; want %d oldest %v", p.class, p.key, counts[i].Count, counts[i].Oldest, want, t0)
		}
	}
	if n, err := ts.counts(); err != nil || n[BucketParked] != 3*len(pairs)+1 {
		t.Fatalf("Counts = %v, %v", n, err)
	}
}

func TestDeleteParked(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	if err := ts.park("orders", []byte("k"), parkRec("1", 1), parkRec("2", 2), parkRec("3", 3)); err != nil {
		t.Fatal(err)
	}
	if err := ts.park("orders", []byte("j"), parkRec("x", 0)); err != nil {
		t.Fatal(err)
	}
	got, err := ts.parked("orders", []byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := ts.deleteParked(got[0].Key, nil); err != nil {
			t.Fatal(err)
		}
	}
	counts, err := ts.parkedKeys()
	if err != nil {
		t.Fatal(err)
	}
	// Oldest follows the first record left.
	want := []ParkedCount{{"orders", []byte("j"), 1, t0}, {"orders", []byte("k"), 2, t0.Add(2 * time.Second)}}
	if !slices.EqualFunc(counts, want, func(a, b ParkedCount) bool {
		return a.Class == b.Class && bytes.Equal(a.Key, b.Key) && a.Count == b.Count && a.Oldest.Equal(b.Oldest)
	}) {
		t.Fatalf("ParkedKeys = %+v, want %+v", counts, want)
	}
	err = ts.Update(func(tx *Tx) error { return tx.DeleteParked(got[1].Key, got[2].Key) })
	if err != nil {
		t.Fatal(err)
	}
	if counts, err := ts.parkedKeys(); err != nil || len(counts) != 1 || string(counts[0].Key) != "j" {
		t.Fatalf("ParkedKeys after deleting k = %+v, %v", counts, err)
	}
}

// TestParkConcurrent parks from many goroutines, each its own key in
// order, through shared Batch transactions.
func TestParkConcurrent(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	const goroutines, each = 16, 5
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				err := ts.Batch(func(tx *Tx) error {
					return tx.Park("orders", fmt.Appendf(nil, "key-%d", g%8), parkRec(fmt.Sprintf("%d/%d", g, i), i))
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	counts, err := ts.parkedKeys()
	if err != nil || len(counts) != 8 {
		t.Fatalf("ParkedKeys = %+v, %v", counts, err)
	}
	for k := range 8 {
		got, err := ts.parked("orders", fmt.Appendf(nil, "key-%d", k))
		if err != nil || len(got) != 2*each {
			t.Fatalf("key-%d: %d parked, %v", k, len(got), err)
		}
		next := map[string]int{} // goroutine -> next i
		for _, id := range parkedIDs(got) {
			g, i, _ := strings.Cut(id, "/")
			if want := fmt.Sprint(next[g]); i != want {
				t.Fatalf("key-%d: %s out of order: %q", k, id, parkedIDs(got))
			}
			next[g]++
		}
	}
}

// TestParkedQuarantinesCorrupt checks that Parked and ParkedKeys skip and
// quarantine records they cannot read.
func TestParkedQuarantinesCorrupt(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	if err := ts.park("orders", []byte("k"), parkRec("1", 1), parkRec("2", 2)); err != nil {
		t.Fatal(err)
	}
	if err := ts.park("orders", []byte("j"), parkRec("3", 3)); err != nil {
		t.Fatal(err)
	}
	got, err := ts.parked("orders", []byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	badValue := appendParkedKey(nil, "orders", []byte("k"), 0) // sorts first in k
	longTail := append(slices.Clone(got[1].Key), 0)            // in k's range, sequence 9 bytes
	unparsable := []byte{0x05, 'x'}                            // class length beyond the key
	badFirst := appendParkedKey(nil, "orders", []byte("i"), 1)
	ts.rawUpdate(t, func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(BucketParked))
		for k, v := range map[string][]byte{
			string(badValue):   {9},
			string(longTail):   appendRecord(nil, &Record{}),
			string(unparsable): appendRecord(nil, &Record{}),
			string(badFirst):   {},
		} {
			if err := b.Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err := ts.park("orders", []byte("i"), parkRec("4", 4)); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		got, err := ts.parked("orders", []byte("k"))
		if err != nil || !slices.Equal(parkedIDs(got), []string{"1", "2"}) {
			t.Fatalf("Parked = %q, %v", parkedIDs(got), err)
		}
	}
	counts, err := ts.parkedKeys()
	if err != nil {
		t.Fatal(err)
	}
	want := []ParkedCount{{"orders", []byte("i"), 1, t0.Add(4 * time.Second)}, {"orders", []byte("j"), 1, t0.Add(3 * time.Second)}, {"orders", []byte("k"), 2, t0.Add(time.Second)}}
	if !slices.EqualFunc(counts, want, func(a, b ParkedCount) bool {
		return a.Class == b.Class && bytes.Equal(a.Key, b.Key) && a.Count == b.Count && a.Oldest.Equal(b.Oldest)
	}) {
		t.Fatalf("ParkedKeys = %+v, want %+v", counts, want)
	}
	q, err := ts.quarantined()
	if err != nil {
		t.Fatal(err)
	}
	var moved [][]byte
	for _, e := range q {
		if e.Bucket != BucketParked {
			t.Errorf("quarantined from %s", e.Bucket)
		}
		moved = append(moved, e.OrigKey)
	}
	slices.SortFunc(moved, bytes.Compare)
	wantMoved := [][]byte{unparsable, badFirst, badValue, longTail}
	slices.SortFunc(wantMoved, bytes.Compare)
	if !slices.EqualFunc(moved, wantMoved, bytes.Equal) {
		t.Fatalf("quarantined %x, want %x", moved, wantMoved)
	}
	if n, err := ts.counts(); err != nil || n[BucketParked] != 4 || n[BucketQuarantine] != 4 {
		t.Fatalf("Counts = %v, %v", n, err)
	}
}
