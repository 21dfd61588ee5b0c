package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/handoff-go/handoff"
)

// v1File is a state file written by the format-1 code (commit ecc1f17,
// before records had a timestamp): four pending records, one dead
// letter, one delayed and one parked message, with nil and empty keys,
// values and header values.
const v1File = "testdata/v1.state"

// v1Records returns the records v1File holds, by bucket, as format 1
// wrote them (no timestamp).
func v1Records() (pending []Record, dead, delayed, parked Record) {
	at := time.Date(2026, 11, 30, 10, 0, 0, 123456789, time.UTC)
	kafka := func(off int64, key, value []byte, h []handoff.Header) handoff.Message {
		return handoff.Message{ID: "orders/1/" + string(rune('0'+off/10)) + string(rune('0'+off%10)), Class: "orders", Key: key, Value: value, Headers: h,
			Origin: handoff.Origin{Topic: "orders", Partition: 1, Offset: off}, FirstSeen: at}
	}
	pending = []Record{
		{Message: kafka(10, []byte("k1"), []byte("v1"), []handoff.Header{{Key: "h", Value: []byte("x")}, {Key: "nil"}, {Key: "empty", Value: []byte{}}}), Reason: "unstarted", SavedAt: at},
		{Message: kafka(11, nil, nil, nil), Reason: "interrupted", SavedAt: at},
		{Message: kafka(12, []byte{}, []byte{}, []handoff.Header{}), Reason: "backoff", Err: "boom", FirstFailed: at, SavedAt: at},
		{Message: handoff.Message{ID: "submitted-1", Class: "orders", Key: []byte("s"), Value: []byte("sv"), Attempt: 2, FirstSeen: at}, Reason: "unstarted", SavedAt: at},
	}
	m := kafka(13, []byte("dk"), []byte("dead value"), nil)
	m.Attempt = 3
	dead = Record{Message: m, Reason: "failed", Err: "permanent: bad", FirstFailed: at, Redeliveries: 1, SavedAt: at.Add(time.Second)}
	delayed = Record{Message: kafka(14, []byte("lk"), []byte("later"), nil), Reason: "scheduled", SavedAt: at}
	parked = Record{Message: kafka(15, []byte("dk"), []byte("parked"), nil), Reason: "parked", SavedAt: at}
	return pending, dead, delayed, parked
}

// copyV1 copies v1File to a temporary file and returns its path.
func copyV1(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(v1File)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "v1.state")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkV1Contents reads every bucket of a store opened on v1File.
func checkV1Contents(t *testing.T, s *Store) {
	t.Helper()
	pending, dead, delayed, parked := v1Records()
	err := s.View(func(tx *Tx) error {
		got, bad, err := tx.LoadPending()
		if err != nil || len(bad) > 0 {
			t.Fatalf("LoadPending: %v, %d undecodable", err, len(bad))
		}
		if len(got) != len(pending) {
			t.Fatalf("%d pending records, want %d", len(got), len(pending))
		}
		for i := range got {
			requireEqualRecord(t, got[i].Record, pending[i])
		}
		d, ok, err := tx.GetDead(1)
		if err != nil || !ok {
			t.Fatalf("GetDead(1): %v, found %v", err, ok)
		}
		requireEqualRecord(t, d, dead)
		l, err := tx.ListDelayed(DelayedKey{}, 10)
		if err != nil || len(l) != 1 {
			t.Fatalf("ListDelayed: %v, %d entries", err, len(l))
		}
		requireEqualRecord(t, l[0].Record, delayed)
		p, bad, err := tx.Parked("orders", []byte("dk"))
		if err != nil || len(bad) > 0 || len(p) != 1 {
			t.Fatalf("Parked: %v, %d undecodable, %d entries", err, len(bad), len(p))
		}
		requireEqualRecord(t, p[0].Record, parked)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func fileFormatOf(t *testing.T, path string) []byte {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v []byte
	err = db.View(func(tx *bolt.Tx) error {
		v = bytes.Clone(tx.Bucket([]byte(bucketMeta)).Get([]byte(metaFormatKey)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestReadV1File: a state file written by format 1 opens, its records
// decode with nil and empty kept apart and a zero Timestamp, the file is
// marked format 2 by the transaction that writes the first record of
// format 2 (with a timestamp), and those sit beside the old ones.
func TestReadV1File(t *testing.T) {
	t.Parallel()
	path := copyV1(t)
	if v := fileFormatOf(t, path); !bytes.Equal(v, []byte{1}) {
		t.Fatalf("fixture format %x, want 01", v)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkV1Contents(t, s)
	rec := fullRecord(1)
	if err := s.Update(func(tx *Tx) error { _, err := tx.SavePending(rec); return err }); err != nil {
		t.Fatal(err)
	}
	if err := s.View(func(tx *Tx) error {
		got, _, err := tx.LoadPending()
		if err != nil || len(got) != 5 {
			t.Fatalf("LoadPending: %v, %d records", err, len(got))
		}
		requireEqualRecord(t, got[4].Record, rec)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := fileFormatOf(t, path); !bytes.Equal(v, []byte{recordsFormat}) {
		t.Fatalf("format after a record was written %x, want %02x", v, recordsFormat)
	}
}

// TestReadOnlyChangesNothing: a read-only Open of a format-1 file reads
// it whole and leaves its bytes as they were (no format mark, no bucket
// created); its write transactions fail.
func TestReadOnlyChangesNothing(t *testing.T) {
	t.Parallel()
	path := copyV1(t)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Copied() {
		t.Error("Copied with no other process holding the file")
	}
	checkV1Contents(t, s)
	if err := s.Update(func(tx *Tx) error { _, err := tx.SavePending(fullRecord(1)); return err }); err == nil {
		t.Error("Update of a read-only store succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("a read-only open changed the file")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "absent.db"), Options{ReadOnly: true}); err == nil {
		t.Error("read-only Open of a missing file succeeded")
	}
}

// TestReadOnlyWhileWriting: a read-only Open of a file another Store
// holds for writing (as a running service does) reads a consistent copy
// while the writer keeps committing, and removes the copy at Close.
func TestReadOnlyWhileWriting(t *testing.T) {
	t.Parallel()
	path := copyV1(t)
	w, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	stop, started := make(chan struct{}), make(chan struct{})
	wrote := make(chan int)
	go func() {
		n := 0
		defer func() { wrote <- n }()
		defer func() {
			if n == 0 {
				close(started)
			}
		}()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := w.Update(func(tx *Tx) error { _, err := tx.SaveDead(fullRecord(n)); return err }); err != nil {
				t.Error(err)
				return
			}
			if n++; n == 1 {
				close(started)
			}
			time.Sleep(time.Millisecond) // a busy service, not one committing without pause
		}
	}()
	<-started
	for range 20 {
		s, err := Open(path, Options{ReadOnly: true, LockTimeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if !s.Copied() {
			t.Error("read-only Open of a file held for writing did not copy it")
		}
		checkV1Contents(t, s)
		if err := s.View(func(tx *Tx) error {
			c, err := tx.Counts()
			if err != nil {
				return err
			}
			page, _, err := tx.DeadPage("", 0, 0)
			if err != nil {
				t.Errorf("dead letters of the copy: %v", err)
			}
			if len(page) != c[BucketDead] {
				t.Errorf("%d dead letters decode of %d", len(page), c[BucketDead])
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		copied := s.copied
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(copied); !os.IsNotExist(err) {
			t.Errorf("copy %s left after Close: %v", copied, err)
		}
	}
	close(stop)
	t.Logf("the writer committed %d transactions while 20 copies were read", <-wrote)
}

// v1Values returns the raw values of every record in v1File, as format
// 1 encoded them: seeds for FuzzDecodeRecord.
func v1Values(f *testing.F) [][]byte {
	db, err := bolt.Open(v1File, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	defer db.Close()
	var out [][]byte
	err = db.View(func(tx *bolt.Tx) error {
		for _, name := range []string{BucketPending, BucketDead, BucketDelayed, BucketParked} {
			if err := tx.Bucket([]byte(name)).ForEach(func(_, v []byte) error {
				out = append(out, bytes.Clone(v))
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		f.Fatal(err)
	}
	if len(out) != 7 {
		f.Fatalf("%d records in %s, want 7", len(out), v1File)
	}
	return out
}
