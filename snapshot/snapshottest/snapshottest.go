// Package snapshottest is test support for the packages that run on a
// state file (the runtime, the CLI, the examples). It writes a file as
// a stopped run, an older version or another tool would have left it
// (the Seed functions), damages it ([Damage]), reads back the records a
// test checks, and parses the records of a changelog topic
// ([ParseChangelog]). The writers and the parser are not methods of
// [snapshot.State] because nothing but a test has a use for them; the
// readers are the State's own reads (those the CLI makes), by path.
//
// Every function takes the state file's path, opens the file, does its
// work in one transaction and closes the file again before it returns;
// it fails the test (t.Fatal) with an error naming the file when any of
// that fails. The writers need the file closed by everyone else: bbolt
// locks a file open for writing, and a writer waits for the lock at most
// 5s. The readers open the file read-only: on a file a running service
// holds they read a consistent copy (see [snapshot.Options.ReadOnly]),
// and they fail on a file that does not exist rather than create it.
package snapshottest

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// lockWait bounds how long a helper waits for another holder of the
// file's lock.
const lockWait = 5 * time.Second

// update runs fn in one write transaction of the file at path, created
// if missing, and closes it.
func update(t testing.TB, path, what string, fn func(tx *store.Tx) error) {
	t.Helper()
	st, err := store.Open(path, store.Options{LockTimeout: lockWait})
	if err != nil {
		t.Fatalf("snapshottest: %s: open %s: %v", what, path, err)
		return
	}
	err = st.Update(fn)
	if cerr := st.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		t.Fatalf("snapshottest: %s in %s: %v", what, path, err)
	}
}

// view opens the file at path read-only as a State, runs fn on it and
// closes it.
func view(t testing.TB, path, what string, fn func(st *snapshot.State) error) {
	t.Helper()
	st, err := snapshot.Open(path, snapshot.Options{ReadOnly: true, LockTimeout: lockWait})
	if err != nil {
		t.Fatalf("snapshottest: %s: open %s: %v", what, path, err)
		return
	}
	err = fn(st)
	if cerr := st.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		t.Fatalf("snapshottest: %s of %s: %v", what, path, err)
	}
}

// decodeErrs joins err and the decode errors of bad.
func decodeErrs(err error, bad []*snapshot.DecodeError) error {
	for _, b := range bad {
		err = errors.Join(err, b)
	}
	return err
}

// SeedPending saves recs as pending records, in their order, the way a
// stop saves its unfinished messages (or a version that kept them
// locally only did): they are in the file and in no changelog. The
// next start re-pushes them.
func SeedPending(t testing.TB, path string, recs ...snapshot.Record) {
	t.Helper()
	update(t, path, "save pending records", func(tx *store.Tx) error {
		_, err := tx.SavePending(recs...)
		return err
	})
}

// SeedDead saves recs as dead letters, in their order, and returns
// their IDs, as a run with no changelog saves them: a file that never
// ran with the changelog gives Local IDs (see [snapshot.DeadID]).
func SeedDead(t testing.TB, path string, recs ...snapshot.Record) []snapshot.DeadID {
	t.Helper()
	var ids []snapshot.DeadID
	update(t, path, "save dead letters", func(tx *store.Tx) error {
		keys, err := tx.SaveDead(recs...)
		if err != nil {
			return err
		}
		for _, k := range keys {
			id, err := tx.DeadID(k)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	return ids
}

// SeedDelayed saves items as delayed records, each due at its Due. An
// item whose message ID is delayed already replaces it, as a schedule
// of the same ID does.
func SeedDelayed(t testing.TB, path string, items ...snapshot.Delayed) {
	t.Helper()
	update(t, path, "save delayed records", func(tx *store.Tx) error {
		_, err := tx.SaveDelayed(items...)
		return err
	})
}

// SeedParked parks recs, in their order, behind the ordering key key of
// class, as a run parks the messages of a key that has a dead letter.
func SeedParked(t testing.TB, path, class string, key []byte, recs ...snapshot.Record) {
	t.Helper()
	update(t, path, "park records", func(tx *store.Tx) error { return tx.Park(class, key, recs...) })
}

// SeedGroup marks the file as the state file of the consumer group
// group, as a run of that group does at its start: a run of another
// group refuses it.
func SeedGroup(t testing.TB, path, group string) {
	t.Helper()
	update(t, path, "mark the group", func(tx *store.Tx) error { return tx.PutMeta(store.MetaGroup, []byte(group)) })
}

// Damage writes value under key in the named bucket ([snapshot.BucketPending],
// BucketDead, BucketDelayed, BucketParked) without encoding it: a value
// that is not a record's encoding is what a damaged or foreign write
// leaves, which the readers report and the start quarantines. key is
// written as given; [SeqKey] and [DelayedKey] build the keys the
// buckets use.
func Damage(t testing.TB, path, bucket string, key, value []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockWait})
	if err != nil {
		t.Fatalf("snapshottest: damage %s: open %s: %v", bucket, path, err)
		return
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return fmt.Errorf("no bucket %q: not a state file, or not that bucket", bucket)
		}
		return b.Put(key, value)
	})
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		t.Fatalf("snapshottest: damage %s in %s: %v", bucket, path, err)
	}
}

// SeqKey is the key of the record with sequence number seq in the
// pending, dead or quarantine bucket: big-endian, 8 bytes.
func SeqKey(seq uint64) []byte {
	k := make([]byte, 8)
	for i := range 8 {
		k[7-i] = byte(seq >> (8 * i))
	}
	return k
}

// DelayedKey is the key of the delayed record of message ID id due at
// due.
func DelayedKey(due time.Time, id string) []byte {
	return append(store.DelayedKeyAt(due), id...)
}

// The readers below are the State's own reads (those the CLI makes),
// on a file opened read-only by path.

// Counts returns the number of records in each bucket that holds them,
// by bucket name: [snapshot.BucketPending], BucketDead,
// BucketQuarantine, BucketDelayed and BucketParked. Records that fail
// to decode are counted too.
func Counts(t testing.TB, path string) map[string]int {
	t.Helper()
	var counts map[string]int
	view(t, path, "count the records", func(st *snapshot.State) (err error) {
		counts, err = st.Counts()
		return err
	})
	return counts
}

// Pending returns the pending records in save order. A record that
// fails to decode fails the test.
func Pending(t testing.TB, path string) []snapshot.Entry {
	t.Helper()
	var pending []snapshot.Entry
	view(t, path, "read the pending records", func(st *snapshot.State) error {
		bad, err := st.Walk(snapshot.Walk{Pending: func(e *snapshot.Entry) { pending = append(pending, *e) }})
		return decodeErrs(err, bad)
	})
	return pending
}

// Dead returns every dead letter in save order, with its key in the
// file and its ID. A dead letter that fails to decode, or whose ID
// cannot be read, fails the test.
func Dead(t testing.TB, path string) []snapshot.DeadEntry {
	t.Helper()
	var dead []snapshot.DeadEntry
	view(t, path, "read the dead letters", func(st *snapshot.State) error {
		l, err := st.ListDead(snapshot.DeadQuery{Limit: math.MaxInt})
		if err != nil {
			return err
		}
		for _, u := range l.Undecodable {
			err = errors.Join(err, fmt.Errorf("undecodable dead letter %+v", u))
		}
		for _, e := range l.Page {
			if e.IDErr != nil {
				err = errors.Join(err, fmt.Errorf("dead letter %d: %w", e.Key, e.IDErr))
			}
		}
		dead = l.Page
		return err
	})
	return dead
}

// Delayed returns every delayed record in due order. A record that
// fails to decode fails the test.
func Delayed(t testing.TB, path string) []snapshot.DelayedEntry {
	t.Helper()
	var delayed []snapshot.DelayedEntry
	view(t, path, "read the delayed records", func(st *snapshot.State) (err error) {
		delayed, err = st.ListDelayed(nil, 0)
		return err
	})
	return delayed
}

// Parked returns the records parked behind the ordering key key of
// class, in park order. A record that fails to decode fails the test.
func Parked(t testing.TB, path, class string, key []byte) []snapshot.ParkedEntry {
	t.Helper()
	var parked []snapshot.ParkedEntry
	view(t, path, "read the parked records", func(st *snapshot.State) error {
		var bad []*snapshot.DecodeError
		var err error
		parked, bad, err = st.Parked(class, key)
		return decodeErrs(err, bad)
	})
	return parked
}

// Quarantined returns the quarantined values, in the order they were
// moved there.
func Quarantined(t testing.TB, path string) []snapshot.Quarantined {
	t.Helper()
	var q []snapshot.Quarantined
	view(t, path, "read the quarantine", func(st *snapshot.State) (err error) {
		q, err = st.Quarantined()
		return err
	})
	return q
}

// Pauses returns the pauses in the file, by class.
func Pauses(t testing.TB, path string) map[string]snapshot.Pause {
	t.Helper()
	var pauses map[string]snapshot.Pause
	view(t, path, "read the pauses", func(st *snapshot.State) (err error) {
		pauses, err = st.Pauses()
		return err
	})
	return pauses
}

// Owner returns the consumer group the file belongs to and the instance
// that last started on it; "" for what the file does not name.
func Owner(t testing.TB, path string) (group, instance string) {
	t.Helper()
	view(t, path, "read the owner", func(st *snapshot.State) error {
		fi, err := st.FileInfo()
		group, instance = fi.Group, fi.Instance
		return err
	})
	return group, instance
}

// ChangelogEntry is what one record of a changelog topic says, as a
// test reads it.
type ChangelogEntry struct {
	// Owner says the record is an owner marker, the record a start
	// writes to a partition's changelog when it takes the partition
	// over; the other fields are then zero.
	Owner bool
	// Bucket is the bucket of the record the key names:
	// [snapshot.BucketPending], BucketDead, BucketDelayed,
	// BucketParked, or BucketProgress for a partition's progress.
	Bucket string
	// DelayedID is the message ID a delayed record's key holds, which a
	// tombstone has too; "" for the other buckets.
	DelayedID string
	// Record is the record a put saves; nil for a tombstone and for a
	// partition's progress.
	Record *snapshot.Record
}

// ParseChangelog returns what the changelog record with key and value
// (nil for a tombstone) says, or an error for a key that is not a
// changelog key or a value that does not decode.
func ParseChangelog(key, value []byte) (ChangelogEntry, error) {
	if _, ok, err := store.ParseOwnerMarker(key, value); err != nil || ok {
		return ChangelogEntry{Owner: ok}, err
	}
	ck, err := store.ParseChangelogKey(key)
	if err != nil {
		return ChangelogEntry{}, err
	}
	e := ChangelogEntry{Bucket: ck.Bucket}
	if ck.Bucket == store.BucketDelayed {
		e.DelayedID = store.DelayedKey(ck.Local).ID()
	}
	if value == nil || ck.Bucket == store.BucketProgress {
		return e, nil
	}
	rec, err := store.DecodeRecord(value)
	if err != nil {
		return ChangelogEntry{}, fmt.Errorf("changelog record %x: %w", key, err)
	}
	e.Record = &rec
	return e, nil
}
