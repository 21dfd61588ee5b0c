package store

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// deadOfClasses saves 10 dead letters with classes a b c a b c ... and
// returns their keys.
func deadOfClasses(t *testing.T, ts *testStore) ([]uint64, []Record) {
	t.Helper()
	recs := records(10)
	for i := range recs {
		recs[i].Message.Class = string(rune('a' + i%3))
	}
	keys, err := ts.saveDead(recs...)
	if err != nil {
		t.Fatal(err)
	}
	return keys, recs
}

func entryKeys(entries []Entry) []uint64 {
	out := make([]uint64, len(entries))
	for i, e := range entries {
		out[i] = e.Key
	}
	return out
}

func TestDeadPage(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	keys, recs := deadOfClasses(t, ts)
	for _, tc := range []struct {
		class string
		limit int
		pages [][]uint64
	}{
		{"", 4, [][]uint64{{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10}}},
		{"", 5, [][]uint64{{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}}}, // an exact fit ends with 0
		{"", 0, [][]uint64{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}},
		{"a", 2, [][]uint64{{1, 4}, {7, 10}}},
		{"b", 2, [][]uint64{{2, 5}, {8}}},
		{"c", 10, [][]uint64{{3, 6, 9}}},
		{"none", 10, [][]uint64{nil}},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.class, tc.limit), func(t *testing.T) {
			after := uint64(0)
			for i, want := range tc.pages {
				page, next, err := ts.deadPage(tc.class, after, tc.limit)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(entryKeys(page), want) {
					t.Fatalf("page %d: keys %v, want %v", i, entryKeys(page), want)
				}
				for _, e := range page {
					requireEqualRecord(t, e.Record, recs[slices.Index(keys, e.Key)])
				}
				if last := i == len(tc.pages)-1; last != (next == 0) {
					t.Fatalf("page %d of %d: next %d", i+1, len(tc.pages), next)
				}
				after = next
			}
		})
	}
	if page, next, err := ts.deadPage("", math.MaxUint64, 10); err != nil || len(page) != 0 || next != 0 {
		t.Fatalf("DeadPage after the last key = %v, %d, %v", page, next, err)
	}
}

// TestDeadPageCorrupt checks that an undecodable dead letter is reported
// with the page, not instead of it.
func TestDeadPageCorrupt(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	deadOfClasses(t, ts)
	ts.rawUpdate(t, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(BucketDead)).Put(key8(2), []byte{1, 0xff})
	})
	page, next, err := ts.deadPage("a", 0, 2)
	var de *DecodeError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &de) || de.Bucket != BucketDead || de.Key[7] != 2 {
		t.Fatalf("DeadPage err = %v, want a DecodeError for dead/2", err)
	}
	// next is the last key looked at: 5 and 6 are of other classes.
	if !slices.Equal(entryKeys(page), []uint64{1, 4}) || next != 6 {
		t.Fatalf("DeadPage = %v, %d", entryKeys(page), next)
	}
	if _, ok, err := ts.getDead(2); !ok || !errors.As(err, &de) {
		t.Fatalf("GetDead of a corrupt record = %v, %v", ok, err)
	}
	// Only reads: the record stays where it is.
	if n, err := ts.counts(); err != nil || n[BucketDead] != 10 || n[BucketQuarantine] != 0 {
		t.Fatalf("Counts = %v, %v", n, err)
	}
}

func TestGetDead(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	keys, recs := deadOfClasses(t, ts)
	r, ok, err := ts.getDead(keys[3])
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	requireEqualRecord(t, r, recs[3])
	if _, ok, err := ts.getDead(999); ok || err != nil {
		t.Fatalf("GetDead(999) = %v, %v", ok, err)
	}
}

func TestRequeueDead(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	keys, recs := deadOfClasses(t, ts)
	if _, err := ts.savePending(records(2)...); err != nil { // pending keys 1, 2
		t.Fatal(err)
	}
	before := time.Now()
	pending, err := ts.requeueDead(keys[6], keys[2])
	if err != nil || !slices.Equal(pending, []uint64{3, 4}) {
		t.Fatalf("RequeueDead = %v, %v; want [3 4]", pending, err)
	}
	ts.reopen(t)
	got, _, err := ts.loadPending()
	if err != nil || len(got) != 4 {
		t.Fatalf("LoadPending = %d, %v", len(got), err)
	}
	for i, src := range []Record{recs[6], recs[2]} {
		e := got[2+i]
		if e.Record.SavedAt.Before(before.Truncate(time.Second)) {
			t.Errorf("requeued %d: saved at %v, before the call", i, e.Record.SavedAt)
		}
		// A fresh retry budget; the last error stays.
		want := src
		want.Message.Attempt, want.Redeliveries, want.FirstFailed = 0, 0, time.Time{}
		want.Reason, want.SavedAt = "requeued", e.Record.SavedAt
		requireEqualRecord(t, e.Record, want)
	}
	if n, err := ts.counts(); err != nil || n[BucketDead] != 8 {
		t.Fatalf("Counts = %v, %v", n, err)
	}

	// All or nothing: a missing or repeated key moves nothing.
	for _, bad := range [][]uint64{{keys[0], keys[6]}, {keys[1], keys[1]}} {
		_, err := ts.requeueDead(bad...)
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "dead/") || !strings.Contains(err.Error(), ts.path) {
			t.Fatalf("RequeueDead(%v) = %v, want ErrNotFound naming the key and file", bad, err)
		}
		// Even when fn goes on and commits, the refused call wrote nothing.
		err = ts.Update(func(tx *Tx) error {
			if _, err := tx.RequeueDead(bad...); !errors.Is(err, ErrNotFound) {
				t.Errorf("RequeueDead(%v) in Update = %v", bad, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n, err := ts.counts(); err != nil || n[BucketDead] != 8 || n[BucketPending] != 4 {
		t.Fatalf("Counts after refused requeues = %v, %v", n, err)
	}
}

func TestCounts(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	n, err := ts.counts()
	want := map[string]int{BucketPending: 0, BucketDead: 0, BucketQuarantine: 0, BucketDelayed: 0, BucketParked: 0}
	if err != nil || !maps.Equal(n, want) {
		t.Fatalf("Counts of a new file = %v, %v", n, err)
	}
	if _, err := ts.savePending(records(1)...); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.saveDead(records(2)...); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.saveDelayed(delayedAt("a", 0), delayedAt("b", 0), delayedAt("c", 0)); err != nil {
		t.Fatal(err)
	}
	if err := ts.park("c", nil, records(4)...); err != nil {
		t.Fatal(err)
	}
	n, err = ts.counts()
	want = map[string]int{BucketPending: 1, BucketDead: 2, BucketQuarantine: 0, BucketDelayed: 3, BucketParked: 4}
	if err != nil || !maps.Equal(n, want) {
		t.Fatalf("Counts = %v, %v; want %v", n, err, want)
	}
}

// TestGetPendingAndDelayed: GetPending and GetDelayed read one record by
// its key, report a missing one as not there, and a record that does not
// decode as a *DecodeError with true, reading only.
func TestGetPendingAndDelayed(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	recs := records(3)
	keys, err := ts.savePending(recs...)
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(time.Hour).UTC()
	dl := Delayed{Due: due, Record: recs[1]}
	if err := ts.Update(func(tx *Tx) error { _, err := tx.SaveDelayed(dl); return err }); err != nil {
		t.Fatal(err)
	}
	var dk DelayedKey
	if err := ts.View(func(tx *Tx) (err error) { dk, _, err = tx.DelayedKeyOf(recs[1].Message.ID); return err }); err != nil {
		t.Fatal(err)
	}
	err = ts.View(func(tx *Tx) error {
		r, ok, err := tx.GetPending(keys[2])
		if err != nil || !ok {
			t.Fatalf("GetPending(%d) = %v, %v", keys[2], ok, err)
		}
		requireEqualRecord(t, r, recs[2])
		if _, ok, err := tx.GetPending(999); ok || err != nil {
			t.Errorf("GetPending(999) = %v, %v", ok, err)
		}
		r, ok, err = tx.GetDelayed(dk)
		if err != nil || !ok {
			t.Fatalf("GetDelayed = %v, %v", ok, err)
		}
		requireEqualRecord(t, r, recs[1])
		if _, ok, err := tx.GetDelayed(DelayedKeyAt(due.Add(time.Minute))); ok || err != nil {
			t.Errorf("GetDelayed of a key with no record = %v, %v", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A record that does not decode.
	ts.rawUpdate(t, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(BucketPending)).Put(key8(keys[0]), []byte{1, 0xff})
	})
	err = ts.View(func(tx *Tx) error {
		_, ok, err := tx.GetPending(keys[0])
		var de *DecodeError
		if !ok || !errors.As(err, &de) {
			t.Errorf("GetPending of a corrupt record = %v, %v; want true and a *DecodeError", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
