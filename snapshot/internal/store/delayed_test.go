package store

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	bolt "go.etcd.io/bbolt"
)

// t0 is a fixed due time the delayed tests count from.
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// delayedAt returns a small record with the given ID, due at t0+d.
func delayedAt(id string, d time.Duration) Delayed {
	return Delayed{Due: t0.Add(d), Record: Record{
		Message: handoff.Message{ID: id, Class: "reminders", Value: []byte(id)},
		Reason:  "retry",
	}}
}

// ids returns the message IDs of entries.
func ids(entries []DelayedEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Record.Message.ID
		if e.Key.ID() != out[i] || !e.Key.Due().Equal(e.Due) {
			panic(fmt.Sprintf("entry %d: key %x does not match ID %q due %v", i, []byte(e.Key), out[i], e.Due))
		}
	}
	return out
}

func TestDelayedRoundTrip(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	recs := records(3)
	items := []Delayed{
		{Due: t0.Add(2 * time.Second), Record: recs[0]},
		{Due: t0.Add(time.Nanosecond), Record: recs[1]},
		{Due: t0.In(time.FixedZone("x", 7200)), Record: recs[2]},
	}
	saved, err := ts.saveDelayed(items...)
	if err != nil || !slices.Equal(saved, []bool{true, true, true}) {
		t.Fatalf("SaveDelayed = %v, %v", saved, err)
	}
	ts.reopen(t)
	got, err := ts.listDelayed(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Delayed{items[2], items[1], items[0]} // due order
	if len(got) != len(want) {
		t.Fatalf("%d delayed records, want %d", len(got), len(want))
	}
	for i, e := range got {
		if !e.Due.Equal(want[i].Due) || e.Due.Location() != time.UTC {
			t.Errorf("entry %d due %v, want %v in UTC", i, e.Due, want[i].Due)
		}
		if !bytes.Equal(e.Key, delayedKey(want[i].Due, want[i].Record.Message.ID)) {
			t.Errorf("entry %d key %x", i, []byte(e.Key))
		}
		requireEqualRecord(t, e.Record, want[i].Record)
	}
	if n, err := ts.count(BucketDelayed); err != nil || n != 3 {
		t.Fatalf("CountDelayed = %d, %v", n, err)
	}

	// Paging.
	first, err := ts.listDelayed(nil, 2)
	if err != nil || len(first) != 2 {
		t.Fatalf("ListDelayed(nil, 2) = %d, %v", len(first), err)
	}
	rest, err := ts.listDelayed(first[1].Key, 2)
	if err != nil || len(rest) != 1 || !bytes.Equal(rest[0].Key, got[2].Key) {
		t.Fatalf("second page = %v, %v", ids(rest), err)
	}
}

// TestDelayedOrder checks due order, and ID order among records due at
// the same nanosecond, whatever the save order.
func TestDelayedOrder(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	items := []Delayed{
		delayedAt("b", time.Second),
		delayedAt("z", 0),
		delayedAt("a", time.Second),
		delayedAt("ab", time.Second),
		delayedAt("\x00", time.Second),
		delayedAt("c", time.Second+1),
		delayedAt("y", time.Second-1),
	}
	if _, err := ts.saveDelayed(items[:3]...); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.saveDelayed(items[3:]...); err != nil {
		t.Fatal(err)
	}
	got, err := ts.listDelayed(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"z", "y", "\x00", "a", "ab", "b", "c"}; !slices.Equal(ids(got), want) {
		t.Fatalf("order %q, want %q", ids(got), want)
	}
	due, next, err := ts.dueDelayed(nil, t0.Add(time.Second), 0)
	if err != nil || !slices.Equal(ids(due), []string{"z", "y", "\x00", "a", "ab", "b"}) || !next.Equal(t0.Add(time.Second+1)) {
		t.Fatalf("DueDelayed = %q, %v, %v", ids(due), next, err)
	}
}

func TestDelayedDuplicateIDs(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	first := delayedAt("x", time.Minute)
	dup := delayedAt("x", time.Second) // earlier due, other value
	dup.Record.Message.Value = []byte("other")
	saved, err := ts.saveDelayed(first, delayedAt("y", 0), dup)
	if err != nil || !slices.Equal(saved, []bool{true, true, false}) {
		t.Fatalf("SaveDelayed = %v, %v; want [true true false]", saved, err)
	}
	saved, err = ts.saveDelayed(dup)
	if err != nil || !slices.Equal(saved, []bool{false}) {
		t.Fatalf("SaveDelayed of a waiting ID = %v, %v; want [false]", saved, err)
	}
	err = ts.Update(func(tx *Tx) error {
		saved, err := tx.SaveDelayed(dup, delayedAt("z", 0))
		if !slices.Equal(saved, []bool{false, true}) {
			t.Errorf("Tx.SaveDelayed = %v, want [false true]", saved)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ts.listDelayed(nil, 0)
	if err != nil || !slices.Equal(ids(got), []string{"y", "z", "x"}) {
		t.Fatalf("ListDelayed = %q, %v", ids(got), err)
	}
	requireEqualRecord(t, got[2].Record, first.Record)
	if !got[2].Due.Equal(first.Due) {
		t.Fatalf("x due %v, want the first save's %v", got[2].Due, first.Due)
	}

	// Concurrent single saves of one ID: exactly one is stored.
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		n  int
	)
	for i := range 20 {
		wg.Go(func() {
			saved, err := ts.saveDelayed(delayedAt("w", time.Duration(i)))
			if err != nil {
				t.Error(err)
				return
			}
			if saved[0] {
				mu.Lock()
				n++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n != 1 {
		t.Fatalf("%d of 20 concurrent saves of one ID stored, want 1", n)
	}

	// Once delivered (deleted), an ID may wait again.
	if err := ts.deleteDelayed(got[2].Key); err != nil {
		t.Fatal(err)
	}
	if saved, err := ts.saveDelayed(dup); err != nil || !saved[0] {
		t.Fatalf("SaveDelayed after DeleteDelayed = %v, %v", saved, err)
	}
}

func TestDueDelayed(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	var items []Delayed
	for i := 1; i <= 10; i++ {
		items = append(items, delayedAt(fmt.Sprintf("m%02d", i), time.Duration(i)*time.Second))
	}
	if _, err := ts.saveDelayed(items...); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		after    int // index of items, -1 for nil
		now      time.Duration
		limit    int
		want     []string
		wantNext time.Duration // -1 for the zero time
	}{
		{"none due", -1, 0, 10, nil, time.Second},
		{"some due", -1, 5 * time.Second, 0, []string{"m01", "m02", "m03", "m04", "m05"}, 6 * time.Second},
		{"due up to the nanosecond", -1, 3*time.Second - 1, 0, []string{"m01", "m02"}, 3 * time.Second},
		{"limit cuts", -1, 5 * time.Second, 2, []string{"m01", "m02"}, 3 * time.Second},
		{"after", 1, 5 * time.Second, 2, []string{"m03", "m04"}, 5 * time.Second},
		{"after to the end of due", 3, 5 * time.Second, 10, []string{"m05"}, 6 * time.Second},
		{"after the last due", 4, 5 * time.Second, 10, nil, 6 * time.Second},
		{"all due", -1, time.Hour, 0, []string{"m01", "m02", "m03", "m04", "m05", "m06", "m07", "m08", "m09", "m10"}, -1},
		{"after the last", 9, time.Hour, 0, nil, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var after DelayedKey
			if tc.after >= 0 {
				after = delayedKey(items[tc.after].Due, items[tc.after].Record.Message.ID)
			}
			due, next, err := ts.dueDelayed(after, t0.Add(tc.now), tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(due); !slices.Equal(got, tc.want) {
				t.Errorf("due %q, want %q", got, tc.want)
			}
			wantNext := time.Time{}
			if tc.wantNext >= 0 {
				wantNext = t0.Add(tc.wantNext)
			}
			if !next.Equal(wantNext) {
				t.Errorf("next %v, want %v", next, wantNext)
			}
		})
	}
}

// TestDueDelayedDoesNotScan proves that DueDelayed reads the records it
// returns and the key of one more, however many wait behind them: every
// record due after the ones it may return holds a value that does not
// decode, so a read of any of them would be reported in bad.
func TestDueDelayedDoesNotScan(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	const n, good = 100_000, 251 // m0000000 to m0000250 decode
	items := make([]Delayed, good)
	for i := range items {
		items[i] = delayedAt(fmt.Sprintf("m%07d", i), time.Duration(i)*time.Millisecond)
	}
	if _, err := ts.saveDelayed(items...); err != nil {
		t.Fatal(err)
	}
	err := ts.Update(func(tx *Tx) error {
		b, err := tx.bucket(BucketDelayed)
		if err != nil {
			return err
		}
		b.FillPercent = 1.0
		for i := good; i < n; i++ {
			k := delayedKey(t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("m%07d", i))
			if err := b.Put(k, []byte("\x01spoilt")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(after DelayedKey, now time.Duration, limit, wantDue int) []DelayedEntry {
		t.Helper()
		var (
			due  []DelayedEntry
			next time.Time
			bad  []*DecodeError
		)
		err := ts.View(func(tx *Tx) (err error) {
			due, next, bad, err = tx.DueDelayed(after, t0.Add(now), limit)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(due) != wantDue || len(bad) != 0 {
			t.Fatalf("%d due and %d undecodable (%v), want %d due and none: DueDelayed read past them", len(due), len(bad), bad, wantDue)
		}
		if next.IsZero() {
			t.Fatal("next is zero with records waiting")
		}
		return due
	}
	check(nil, -time.Second, 100, 0)
	due := check(nil, 250*time.Millisecond, 100, 100)
	due = check(due[len(due)-1].Key, 250*time.Millisecond, 100, 100)
	due = check(due[len(due)-1].Key, 250*time.Millisecond, 100, 51) // m0000200 to m0000250
	if id := due[len(due)-1].Record.Message.ID; id != "m0000250" {
		t.Fatalf("last due %s, want m0000250", id)
	}
	last := due[len(due)-1].Key
	check(last, 250*time.Millisecond, 100, 0) // the first spoilt one is looked at for its due time only

	// Read to the end, the spoilt records are reported: the checks above
	// would have seen any of them read.
	err = ts.View(func(tx *Tx) error {
		due, _, bad, err := tx.DueDelayed(last, t0.Add(time.Hour), 0)
		if err != nil || len(due) != 0 || len(bad) != n-good {
			t.Errorf("reading on: %d due, %d undecodable, %v; want 0, %d", len(due), len(bad), err, n-good)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestDelayedDueClamped(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	items := []Delayed{
		{Due: time.Time{}, Record: Record{Message: handoff.Message{ID: "zero"}}},
		{Due: time.Unix(-5, 0), Record: Record{Message: handoff.Message{ID: "before 1970"}}},
		{Due: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), Record: Record{Message: handoff.Message{ID: "year 3000"}}},
	}
	if _, err := ts.saveDelayed(items...); err != nil {
		t.Fatal(err)
	}
	got, err := ts.listDelayed(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"before 1970", "zero", "year 3000"}; !slices.Equal(ids(got), want) {
		t.Fatalf("order %q, want %q", ids(got), want)
	}
	for i, want := range []time.Time{time.Unix(0, 0), time.Unix(0, 0), time.Unix(0, math.MaxInt64)} {
		if !got[i].Due.Equal(want) {
			t.Errorf("%s: due %v, want %v", got[i].Record.Message.ID, got[i].Due, want)
		}
	}
	due, _, err := ts.dueDelayed(nil, t0, 0)
	if err != nil || len(due) != 2 {
		t.Fatalf("DueDelayed = %q, %v", ids(due), err)
	}
	if (DelayedKey{1, 2}).Due() != (time.Time{}) || (DelayedKey{1}).ID() != "" {
		t.Fatal("a short key has a due time or ID")
	}
}

func TestDelayedNoID(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	_, err := ts.saveDelayed(delayedAt("a", 0), Delayed{Due: t0})
	if !errors.Is(err, ErrNoID) || !strings.Contains(err.Error(), "delayed message 2 of 2") {
		t.Fatalf("SaveDelayed without ID: %v, want ErrNoID naming the item", err)
	}
	err = ts.Update(func(tx *Tx) error {
		_, err := tx.SaveDelayed(Delayed{Due: t0})
		return err
	})
	if !errors.Is(err, ErrNoID) {
		t.Fatalf("Tx.SaveDelayed without ID: %v", err)
	}
	if n, err := ts.count(BucketDelayed); err != nil || n != 0 {
		t.Fatalf("CountDelayed = %d, %v; want 0", n, err)
	}
}

func TestDeleteDelayed(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	if _, err := ts.saveDelayed(delayedAt("a", 0), delayedAt("b", time.Second), delayedAt("c", 2*time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := ts.listDelayed(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	missing := delayedKey(t0, "nope")
	for range 2 { // idempotent
		if err := ts.deleteDelayed(got[0].Key, got[2].Key, missing, nil); err != nil {
			t.Fatal(err)
		}
	}
	left, err := ts.listDelayed(nil, 0)
	if err != nil || !slices.Equal(ids(left), []string{"b"}) {
		t.Fatalf("after DeleteDelayed: %q, %v", ids(left), err)
	}
	// The index follows the bucket: only b is indexed.
	var indexed []string
	err = ts.View(func(tx *Tx) error {
		b, err := tx.bucket(bucketDelayedIDs)
		if err != nil {
			return err
		}
		return b.ForEach(func(k, v []byte) error {
			if !bytes.Equal(v, left[0].Key) {
				t.Errorf("index %s -> %x, want %x", k, v, []byte(left[0].Key))
			}
			indexed = append(indexed, string(k))
			return nil
		})
	})
	if err != nil || !slices.Equal(indexed, []string{"b"}) {
		t.Fatalf("index %q, %v", indexed, err)
	}
	err = ts.Update(func(tx *Tx) error { return tx.DeleteDelayed(left[0].Key) })
	if n, cerr := ts.count(BucketDelayed); err != nil || cerr != nil || n != 0 {
		t.Fatalf("Tx.DeleteDelayed: %v; CountDelayed = %d, %v", err, n, cerr)
	}
}

// TestDueDelayedQuarantinesCorrupt puts undecodable delayed records among
// good ones: DueDelayed skips and quarantines them and is clean next time.
func TestDueDelayedQuarantinesCorrupt(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	if _, err := ts.saveDelayed(delayedAt("a", 0), delayedAt("c", 2*time.Second)); err != nil {
		t.Fatal(err)
	}
	badKey := delayedKey(t0.Add(time.Second), "b")
	noID := delayedKey(t0.Add(time.Second+1), "")
	ts.rawUpdate(t, func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte(BucketDelayed)).Put(badKey, []byte{1, 2, 3}); err != nil {
			return err
		}
		if err := tx.Bucket([]byte(BucketDelayed)).Put(noID, appendRecord(nil, &Record{})); err != nil {
			return err
		}
		return tx.Bucket([]byte(bucketDelayedIDs)).Put([]byte("b"), badKey)
	})
	_, err := ts.listDelayed(nil, 0)
	var de *DecodeError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &de) || de.Bucket != BucketDelayed {
		t.Fatalf("ListDelayed over a corrupt record: %v", err)
	}
	// Read only, DueDelayed reports them and moves nothing.
	err = ts.View(func(tx *Tx) error {
		due, _, bad, err := tx.DueDelayed(nil, t0.Add(time.Hour), 0)
		if err != nil || !slices.Equal(ids(due), []string{"a", "c"}) || len(bad) != 2 ||
			!bytes.Equal(bad[0].Key, badKey) || !bytes.Equal(bad[1].Key, noID) || bad[0].Bucket != BucketDelayed {
			t.Errorf("DueDelayed = %q, %v, %v", ids(due), bad, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ts.count(BucketQuarantine); err != nil || n != 0 {
		t.Fatalf("%d quarantined by a View, %v", n, err)
	}
	for range 2 {
		due, next, err := ts.dueDelayed(nil, t0.Add(time.Hour), 0)
		if err != nil || !slices.Equal(ids(due), []string{"a", "c"}) || !next.IsZero() {
			t.Fatalf("DueDelayed = %q, %v, %v", ids(due), next, err)
		}
	}
	q, err := ts.quarantined()
	if err != nil || len(q) != 2 {
		t.Fatalf("Quarantined = %+v, %v", q, err)
	}
	if q[0].Bucket != BucketDelayed || !bytes.Equal(q[0].OrigKey, badKey) || !bytes.Equal(q[0].Raw, []byte{1, 2, 3}) ||
		!bytes.Equal(q[1].OrigKey, noID) || !strings.Contains(q[1].Err, "delayed key is 8 bytes") {
		t.Fatalf("Quarantined = %+v", q)
	}
	// The ID of the quarantined record may wait again.
	if saved, err := ts.saveDelayed(delayedAt("b", 0)); err != nil || !saved[0] {
		t.Fatalf("SaveDelayed of a quarantined ID = %v, %v", saved, err)
	}
}

// TestDelayedKeyOfAndAt: DelayedKeyOf finds the waiting record of an ID,
// and DueDelayed after DelayedKeyAt(t) starts at the first record due at
// t.
func TestDelayedKeyOfAndAt(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	a, b := delayedAt("a", time.Second), delayedAt("b", time.Second)
	b.Due = a.Due
	c := delayedAt("c", 2*time.Second)
	if _, err := ts.saveDelayed(a, b, c); err != nil {
		t.Fatal(err)
	}
	err := ts.View(func(tx *Tx) error {
		k, ok, err := tx.DelayedKeyOf("b")
		if err != nil || !ok || k.ID() != "b" || !k.Due().Equal(a.Due.UTC().Truncate(time.Nanosecond)) {
			t.Errorf("DelayedKeyOf(b) = %x, %v, %v", []byte(k), ok, err)
		}
		if _, ok, err := tx.DelayedKeyOf("nope"); ok || err != nil {
			t.Errorf("DelayedKeyOf(nope) = %v, %v; want false, nil", ok, err)
		}
		due, _, _, err := tx.DueDelayed(DelayedKeyAt(a.Due), c.Due, 0)
		if err != nil || !slices.Equal(ids(due), []string{"a", "b", "c"}) {
			t.Errorf("DueDelayed from DelayedKeyAt(due of a) = %q, %v; want a b c", ids(due), err)
		}
		due, _, _, err = tx.DueDelayed(DelayedKeyAt(c.Due), c.Due, 0)
		if err != nil || !slices.Equal(ids(due), []string{"c"}) {
			t.Errorf("DueDelayed from DelayedKeyAt(due of c) = %q, %v; want c", ids(due), err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
