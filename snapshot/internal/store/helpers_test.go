package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	bolt "go.etcd.io/bbolt"
)

// testStore is the setup bundle of a store test.
type testStore struct {
	*Store
	path string
}

// setup opens a fresh state file in t.TempDir. Cleanup closes the
// current store (reopen replaces it) and checks the file's bbolt invariants (as bbolt's btesting does).
func setup(t testing.TB) *testStore {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testStore{Store: s, path: path}
	t.Cleanup(func() {
		if err := ts.Store.Close(); err != nil {
			t.Error(err)
		}
		checkFile(t, path)
	})
	return ts
}

// reopen closes the store and opens its file again, as a restart does.
func (ts *testStore) reopen(t testing.TB) {
	t.Helper()
	if err := ts.Store.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ts.path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts.Store = s
}

// checkFile runs bbolt's consistency check on a closed state file.
func checkFile(t testing.TB, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Errorf("check %s: %v", path, err)
		return
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			t.Errorf("check %s: %v", path, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// rawUpdate runs fn on the store's file with plain bbolt, the store
// being closed meanwhile, then reopens the store.
func (ts *testStore) rawUpdate(t testing.TB, fn func(tx *bolt.Tx) error) {
	t.Helper()
	if err := ts.Store.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(ts.path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ts.path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts.Store = s
}

func key8(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// fullRecord returns a record with every field set, distinct by i.
func fullRecord(i int) Record {
	loc := time.FixedZone("x", 3*3600+1800)
	return Record{
		Message: handoff.Message{
			ID:    fmt.Sprintf("orders/%d/%d", -i, int64(-1)<<40-int64(i)),
			Class: "orders",
			Key:   []byte(fmt.Sprintf("key-%d", i)),
			Value: bytes.Repeat([]byte{byte(i), 0, 0xff}, 100+i),
			Headers: []handoff.Header{
				{Key: "a", Value: []byte("1")},
				{Key: "", Value: nil},
				{Key: "empty", Value: []byte{}},
				{Key: "ünïcode ✓", Value: []byte{0, 1, 2}},
			},
			Origin: handoff.Origin{
				Topic:     "orders.v1",
				Partition: -1 - i,
				Offset:    -1 << 62,
			},
			Timestamp: time.Date(2025, 3, 4, 5, 6, 6, int(time.Millisecond)*i, loc),
			Attempt:   7 + i,
			FirstSeen: time.Date(2025, 3, 4, 5, 6, 7, 123456789+i, loc),
		},
		Reason:       "interrupted",
		Err:          "context canceled: hard stop",
		FirstFailed:  time.Date(2025, 12, 31, 23, 0, 0, 999+i, loc),
		Redeliveries: 2 + i,
		SavedAt:      time.Date(2026, 1, 2, 3, 4, 5, 6+i, time.Local),
	}
}

// records returns n records distinct by their ID.
func records(n int) []Record {
	out := make([]Record, n)
	for i := range out {
		out[i] = fullRecord(i)
	}
	return out
}

// normalized returns r as decodeRecord returns it: times in UTC without
// a monotonic reading.
func normalized(r Record) Record {
	norm := func(t time.Time) time.Time {
		if t.IsZero() {
			return time.Time{}
		}
		return t.Round(0).UTC()
	}
	r.Message.FirstSeen = norm(r.Message.FirstSeen)
	r.Message.Timestamp = norm(r.Message.Timestamp)
	r.FirstFailed = norm(r.FirstFailed)
	r.SavedAt = norm(r.SavedAt)
	return r
}

func requireEqualRecord(t testing.TB, got, want Record) {
	t.Helper()
	if want := normalized(want); !reflect.DeepEqual(got, want) {
		t.Fatalf("record mismatch\n got: %#v\nwant: %#v", got, want)
	}
}

// requireEntries checks entries against keys and the records saved
// under them.
func requireEntries(t testing.TB, got []Entry, keys []uint64, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Key != keys[i] {
			t.Fatalf("entry %d: key %d, want %d", i, got[i].Key, keys[i])
		}
		requireEqualRecord(t, got[i].Record, want[i])
	}
}

// The reads and writes of the store as single calls, each in a
// transaction of its own, for the tests that are about what is stored
// rather than how writes are grouped. The readers of the delivery path
// move what they cannot decode to the quarantine bucket afterwards, as
// the runtime does.

func (s *Store) savePending(recs ...Record) (keys []uint64, err error) {
	err = s.Update(func(tx *Tx) error { keys, err = tx.SavePending(recs...); return err })
	return keys, err
}

func (s *Store) deletePending(keys ...uint64) error {
	return s.Update(func(tx *Tx) error { return tx.DeletePending(keys...) })
}

// loadPending returns every pending record, as ScanPending reads them.
func (s *Store) loadPending() ([]Entry, []*DecodeError, error) {
	var entries []Entry
	bad, err := s.ScanPending(func(batch []Entry) bool {
		entries = append(entries, batch...)
		return true
	})
	return entries, bad, err
}

func (s *Store) saveDead(recs ...Record) (keys []uint64, err error) {
	err = s.Update(func(tx *Tx) error { keys, err = tx.SaveDead(recs...); return err })
	return keys, err
}

func (s *Store) getDead(key uint64) (r Record, ok bool, err error) {
	err = s.View(func(tx *Tx) error { r, ok, err = tx.GetDead(key); return err })
	return r, ok, err
}

// deadPage returns the page with the decode errors DeadPage joins.
func (s *Store) deadPage(class string, after uint64, limit int) (page []Entry, next uint64, err error) {
	var pageErr error
	err = s.View(func(tx *Tx) error { page, next, pageErr = tx.DeadPage(class, after, limit); return nil })
	if err != nil {
		return nil, 0, err
	}
	return page, next, pageErr
}

// dead returns every dead letter, and those that do not decode.
func (s *Store) dead() (entries []Entry, bad []*DecodeError, err error) {
	err = s.View(func(tx *Tx) error { entries, bad, err = tx.readAll(BucketDead); return err })
	return entries, bad, err
}

func (s *Store) deleteDead(keys ...uint64) error {
	return s.Update(func(tx *Tx) error { return tx.DeleteDead(keys...) })
}

func (s *Store) requeueDead(keys ...uint64) (pending []uint64, err error) {
	err = s.Update(func(tx *Tx) error { pending, err = tx.RequeueDead(keys...); return err })
	return pending, err
}

func (s *Store) saveDelayed(items ...Delayed) (saved []bool, err error) {
	err = s.Update(func(tx *Tx) error { saved, err = tx.SaveDelayed(items...); return err })
	return saved, err
}

func (s *Store) dueDelayed(after DelayedKey, now time.Time, limit int) (due []DelayedEntry, next time.Time, err error) {
	var bad []*DecodeError
	err = s.View(func(tx *Tx) error { due, next, bad, err = tx.DueDelayed(after, now, limit); return err })
	if err == nil {
		err = s.quarantine(bad)
	}
	return due, next, err
}

// listDelayed returns the page with the decode errors ListDelayed joins.
func (s *Store) listDelayed(after DelayedKey, limit int) (page []DelayedEntry, err error) {
	var pageErr error
	err = s.View(func(tx *Tx) error { page, pageErr = tx.ListDelayed(after, limit); return nil })
	if err != nil {
		return nil, err
	}
	return page, pageErr
}

func (s *Store) deleteDelayed(keys ...DelayedKey) error {
	return s.Update(func(tx *Tx) error { return tx.DeleteDelayed(keys...) })
}

func (s *Store) park(class string, key []byte, recs ...Record) error {
	return s.Update(func(tx *Tx) error { return tx.Park(class, key, recs...) })
}

func (s *Store) parked(class string, key []byte) (entries []ParkedEntry, err error) {
	var bad []*DecodeError
	err = s.View(func(tx *Tx) error { entries, bad, err = tx.Parked(class, key); return err })
	if err == nil {
		err = s.quarantine(bad)
	}
	return entries, err
}

func (s *Store) parkedKeys() (keys []ParkedCount, err error) {
	var bad []*DecodeError
	err = s.View(func(tx *Tx) error { keys, bad, err = tx.ParkedKeys(); return err })
	if err == nil {
		err = s.quarantine(bad)
	}
	return keys, err
}

func (s *Store) deleteParked(keys ...ParkedKey) error {
	return s.Update(func(tx *Tx) error { return tx.DeleteParked(keys...) })
}

// quarantine moves bad, when there is any, in a write transaction.
func (s *Store) quarantine(bad []*DecodeError) error {
	if len(bad) == 0 {
		return nil
	}
	return s.Update(func(tx *Tx) error { return tx.Quarantine(bad...) })
}

func (s *Store) quarantined() (q []Quarantined, err error) {
	err = s.View(func(tx *Tx) error { q, err = tx.Quarantined(); return err })
	return q, err
}

func (s *Store) counts() (counts map[string]int, err error) {
	err = s.View(func(tx *Tx) error { counts, err = tx.Counts(); return err })
	return counts, err
}

// count returns the number of records in the named bucket.
func (s *Store) count(name string) (n int, err error) {
	err = s.View(func(tx *Tx) error { n, err = tx.count(name); return err })
	return n, err
}
