package store

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"unsafe"

	bolt "go.etcd.io/bbolt"
)

// scanAll runs ScanPending to the end and returns copies of the batches.
func scanAll(t *testing.T, s *Store) ([][]Entry, []*DecodeError) {
	t.Helper()
	var batches [][]Entry
	bad, err := s.ScanPending(func(batch []Entry) bool {
		batches = append(batches, slices.Clone(batch))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return batches, bad
}

func TestScanPending(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	recs := records(1000)
	keys, err := ts.savePending(recs...)
	if err != nil {
		t.Fatal(err)
	}
	batches, bad := scanAll(t, ts.Store)
	if len(bad) != 0 {
		t.Fatalf("decode errors: %v", bad)
	}
	if len(batches) < 2 {
		t.Fatalf("%d batches, want several", len(batches))
	}
	for i, b := range batches {
		if len(b) == 0 || len(b) > scanBatchSize {
			t.Fatalf("batch %d has %d entries", i, len(b))
		}
	}
	got := slices.Concat(batches...)
	requireEntries(t, got, keys, recs)

	// Byte fields are capped: appending to one cannot write over the
	// value of the next record sharing its block.
	for i := range got {
		m := &got[i].Record.Message
		for _, f := range [][]byte{m.Key, m.Value, m.Headers[0].Value} {
			if cap(f) != len(f) {
				t.Fatalf("entry %d: field of len %d has cap %d", i, len(f), cap(f))
			}
		}
	}
	_ = append(got[0].Record.Message.Value, 0xAA)
	requireEqualRecord(t, got[1].Record, recs[1])

	// Equal strings of few values share their memory; IDs do not.
	a, b := &got[0].Record, &got[len(got)-1].Record
	if unsafe.StringData(a.Message.Class) != unsafe.StringData(b.Message.Class) ||
		unsafe.StringData(a.Message.Origin.Topic) != unsafe.StringData(b.Message.Origin.Topic) ||
		unsafe.StringData(a.Reason) != unsafe.StringData(b.Reason) {
		t.Error("class, topic and reason strings not shared between entries")
	}

	// Scanning deletes nothing.
	if n, err := ts.count(BucketPending); err != nil || n != len(recs) {
		t.Fatalf("CountPending = %d, %v; want %d", n, err, len(recs))
	}
}

func TestScanPendingEmpty(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	calls := 0
	bad, err := ts.ScanPending(func([]Entry) bool { calls++; return true })
	if err != nil || bad != nil || calls != 0 {
		t.Fatalf("ScanPending = %v, %v after %d calls; want nothing", bad, err, calls)
	}
}

// A stop ends the scan: the rest is neither passed nor quarantined, and
// stays pending.
func TestScanPendingStop(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	recs := records(600)
	if _, err := ts.savePending(recs...); err != nil {
		t.Fatal(err)
	}
	ts.rawUpdate(t, func(tx *bolt.Tx) error { // after every good record
		return tx.Bucket([]byte(BucketPending)).Put(key8(1_000_000), []byte("\x01garbage"))
	})
	calls := 0
	bad, err := ts.ScanPending(func([]Entry) bool {
		calls++
		return false
	})
	if err != nil || len(bad) != 0 || calls != 1 {
		t.Fatalf("ScanPending = %v, %v after %d calls; want one call and nothing bad", bad, err, calls)
	}
	if n, err := ts.count(BucketPending); err != nil || n != len(recs)+1 {
		t.Fatalf("CountPending = %d, %v; want %d", n, err, len(recs)+1)
	}
	if q, err := ts.quarantined(); err != nil || len(q) != 0 {
		t.Fatalf("Quarantined = %v, %v; want none", q, err)
	}
}

// smallMapStore opens a fresh store, closed with the test, whose memory
// map is smaller than any file the test writes: a commit that grows the
// file remaps, waiting for every read transaction to end.
func smallMapStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{NoSync: true, InitialMmapSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fn may write to the store while the records are read, even a write that
// grows the file's memory map, which waits for every read transaction to
// end; records saved meanwhile are not part of the scan.
func TestScanPendingWritesInFn(t *testing.T) {
	t.Parallel()
	s := smallMapStore(t)
	recs := records(500)
	keys, err := s.savePending(recs...)
	if err != nil {
		t.Fatal(err)
	}
	big := fullRecord(0)
	big.Message.Value = bytes.Repeat([]byte{7}, 4<<20)
	var got []Entry
	bad, err := s.ScanPending(func(batch []Entry) bool {
		if len(got) == 0 {
			if _, err := s.savePending([]Record{big}...); err != nil {
				t.Error(err)
			}
			if err := s.deletePending(batch[0].Key); err != nil {
				t.Error(err)
			}
		}
		got = append(got, batch...)
		return true
	})
	if err != nil || len(bad) != 0 {
		t.Fatalf("ScanPending = %v, %v", bad, err)
	}
	requireEntries(t, got, keys, recs)
	if n, err := s.count(BucketPending); err != nil || n != len(recs) {
		t.Fatalf("CountPending = %d, %v; want %d (one deleted, one saved)", n, err, len(recs))
	}
}

// The reader gets at most feedBatches batches ahead of a caller that
// takes none, so a scan's memory does not grow with the file, and it
// holds no transaction while it waits: a write that grows the file's
// memory map goes through. It then reads on from where it stopped, in
// new transactions, each record once, and not the record saved after the
// scan began.
func TestScanPendingReadAheadBounded(t *testing.T) {
	t.Parallel()
	s := smallMapStore(t)
	recs := records(feedBatches + feedBatches/2)
	for i := range recs { // one record a batch
		recs[i].Message.Value = bytes.Repeat([]byte{byte(i)}, blockSize)
	}
	keys, err := s.savePending(recs...)
	if err != nil {
		t.Fatal(err)
	}
	feed := newRawFeed()
	go s.readRaw(BucketPending, feed)
	// Bigger than the file so far, so it grows the memory map: the commit
	// waits for the reader's transaction to end.
	big := fullRecord(0)
	big.Message.Value = bytes.Repeat([]byte{7}, len(recs)*blockSize)
	if _, err := s.savePending(big); err != nil {
		t.Fatal(err)
	}
	queued := func() int {
		feed.mu.Lock()
		defer feed.mu.Unlock()
		return len(feed.queue)
	}
	if n := queued(); n != feedBatches {
		t.Fatalf("reader %d batches ahead while waiting, want %d", n, feedBatches)
	}
	var got []Entry
	bad, err := decodeFeed(BucketPending, feed, func(batch []Entry) bool {
		if n := queued(); n > feedBatches {
			t.Errorf("reader %d batches ahead, want at most %d", n, feedBatches)
		}
		got = append(got, batch...)
		return true
	})
	if err != nil || len(bad) != 0 {
		t.Fatalf("decodeFeed = %v, %v", bad, err)
	}
	requireEntries(t, got, keys, recs)
}

// Undecodable records are reported in key order among good ones, whether
// the key, the value's shape or its content is wrong, and quarantined.
func TestScanPendingQuarantines(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	recs := records(300)
	var keys []uint64
	ts.rawUpdate(t, func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(BucketPending))
		for i := range recs {
			keys = append(keys, uint64(2*i+1))
			if err := b.Put(key8(uint64(2*i+1)), appendRecord(nil, &recs[i])); err != nil {
				return err
			}
		}
		if err := b.Put(key8(2), []byte("\x01bad")); err != nil {
			return err
		}
		if err := b.Put(key8(400), []byte{}); err != nil {
			return err
		}
		if _, err := b.CreateBucket(key8(500)); err != nil {
			return err
		}
		if err := b.Put([]byte("short"), appendRecord(nil, &recs[0])); err != nil {
			return err
		}
		return b.SetSequence(1000)
	})
	batches, bad := scanAll(t, ts.Store)
	requireEntries(t, slices.Concat(batches...), keys, recs)
	wantKeys := [][]byte{key8(2), key8(400), key8(500), []byte("short")}
	if len(bad) != len(wantKeys) {
		t.Fatalf("%d decode errors, want %d: %v", len(bad), len(wantKeys), bad)
	}
	for i, de := range bad {
		if de.Bucket != BucketPending || !bytes.Equal(de.Key, wantKeys[i]) || !errors.Is(de, ErrCorrupt) {
			t.Errorf("bad[%d] = %v, want key %x wrapping ErrCorrupt", i, de, wantKeys[i])
		}
	}
	q, err := ts.quarantined()
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 3 { // the nested bucket cannot be moved
		t.Fatalf("%d quarantined, want 3: %+v", len(q), q)
	}
}

func TestInterner(t *testing.T) {
	t.Parallel()
	in := newInterner()
	a := in.string([]byte("orders"))
	b := in.string([]byte("orders"))
	if a != "orders" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("interned %q and %q do not share memory", a, b)
	}
	long := bytes.Repeat([]byte{'x'}, maxInternedLen+1)
	if in.string(long) != string(long) || len(in) != 1 {
		t.Fatalf("long string interned: %d entries", len(in))
	}
	for i := range maxInterned + 10 {
		in.string([]byte{byte(i), byte(i >> 8)})
	}
	if len(in) != maxInterned {
		t.Fatalf("interner holds %d strings, want at most %d", len(in), maxInterned)
	}
	var none interner
	if s := none.string([]byte("x")); s != "x" {
		t.Fatalf("nil interner returned %q", s)
	}
}
