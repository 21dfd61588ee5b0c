package store

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// TestLoadPendingThenQuarantine is the delivery path in two steps: a
// read-only LoadPending reports what it cannot decode and moves nothing,
// Quarantine moves it, and the next load is clean.
func TestLoadPendingThenQuarantine(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	recs := records(2)
	keys, err := ts.savePending(recs...)
	if err != nil {
		t.Fatal(err)
	}
	ts.rawUpdate(t, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(BucketPending)).Put(key8(9), []byte{1})
	})
	var bad []*DecodeError
	for range 2 {
		err := ts.View(func(tx *Tx) error {
			var got []Entry
			var err error
			got, bad, err = tx.LoadPending()
			if err != nil {
				return err
			}
			requireEntries(t, got, keys, recs)
			return nil
		})
		if err != nil || len(bad) != 1 || !bytes.Equal(bad[0].Key, key8(9)) {
			t.Fatalf("LoadPending: bad %v, %v", bad, err)
		}
	}
	if err := ts.Update(func(tx *Tx) error { return tx.Quarantine(bad...) }); err != nil {
		t.Fatal(err)
	}
	// Run again, it finds the value gone and moves nothing.
	if err := ts.Update(func(tx *Tx) error { return tx.Quarantine(bad...) }); err != nil {
		t.Fatal(err)
	}
	q, err := ts.quarantined()
	if err != nil || len(q) != 1 || q[0].Bucket != BucketPending || !bytes.Equal(q[0].OrigKey, key8(9)) || !bytes.Equal(q[0].Raw, []byte{1}) {
		t.Fatalf("Quarantined = %+v, %v", q, err)
	}
	err = ts.View(func(tx *Tx) error {
		_, bad, err := tx.LoadPending()
		if len(bad) != 0 {
			t.Errorf("second load: %v", bad)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestQuarantineChecks: a value that decodes by now stays; a dead
// letter's decode error fails the call before anything moves; nothing to
// move writes nothing, so it works in a View; errors name the buckets.
func TestQuarantineChecks(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	keys, err := ts.savePending(records(1)...)
	if err != nil {
		t.Fatal(err)
	}
	fixed := &DecodeError{Bucket: BucketPending, Key: key8(keys[0]), Err: ErrCorrupt}
	gone := &DecodeError{Bucket: BucketParked, Key: []byte("gone"), Err: ErrCorrupt}
	if err := ts.Update(func(tx *Tx) error { return tx.Quarantine(fixed, gone) }); err != nil {
		t.Fatal(err)
	}
	if n, err := ts.counts(); err != nil || n[BucketPending] != 1 || n[BucketQuarantine] != 0 {
		t.Fatalf("counts %v, %v: a readable record was moved", n, err)
	}

	ts.rawUpdate(t, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(BucketDead)).Put(key8(1), []byte{1})
	})
	ts.rawUpdate(t, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(BucketPending)).Put(key8(7), []byte{1})
	})
	bad := []*DecodeError{
		{Bucket: BucketPending, Key: key8(7), Err: ErrCorrupt},
		{Bucket: BucketDead, Key: key8(1), Err: ErrCorrupt},
	}
	err = ts.Update(func(tx *Tx) error { return tx.Quarantine(bad...) })
	for _, want := range []string{"snapshot: quarantine 2 undecodable pending and dead records in " + ts.path + ": ", "bucket dead"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Quarantine of a dead letter: %v, want it to name %q", err, want)
		}
	}
	if n, err := ts.counts(); err != nil || n[BucketPending] != 2 || n[BucketDead] != 1 || n[BucketQuarantine] != 0 {
		t.Fatalf("counts %v, %v after a refused Quarantine", n, err)
	}

	if err := ts.View(func(tx *Tx) error { return tx.Quarantine() }); err != nil {
		t.Fatalf("Quarantine of nothing in a View: %v", err)
	}
	err = ts.View(func(tx *Tx) error { return tx.Quarantine(bad[0]) })
	if !errors.Is(err, berrors.ErrTxNotWritable) {
		t.Fatalf("Quarantine in a View: %v", err)
	}
}
