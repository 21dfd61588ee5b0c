package snapshot

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// Entry is a stored record with its key in its bucket. Keys are sequence
// numbers, so ordering entries by key orders them by save.
type Entry struct {
	Key    uint64
	Record Record
}

// chunkSize is the size of the buffers SavePending encodes into. bbolt
// keeps every value slice passed to Put until the commit, so a full chunk
// is never reused, only replaced.
const chunkSize = 1 << 20

// SavePending writes recs into the pending bucket and deletes the pending
// records whose keys are in del, all in one write transaction with one
// fsync: either all of it is durable when SavePending returns nil or none
// of it is. Deleting a missing key is not an error. It returns the new
// keys in the order of recs (empty when recs is). With nothing to save or
// delete it does not touch the file.
//
// This is the shutdown snapshot: records are encoded before the
// transaction starts, so the file's write lock is held only for the
// inserts and the commit. It blocks while another write transaction runs.
func (s *Store) SavePending(recs []Record, del []uint64) ([]uint64, error) {
	if len(recs) == 0 && len(del) == 0 {
		return []uint64{}, nil
	}
	vals := encodeAll(recs)
	var keys []uint64
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := bucket(tx, BucketPending)
		if err != nil {
			return err
		}
		if err := deleteKeys(b, BucketPending, del); err != nil {
			return err
		}
		keys, err = appendValues(b, BucketPending, vals)
		return err
	})
	if err != nil {
		if len(del) > 0 {
			return nil, fmt.Errorf("snapshot: save %d pending records and delete %d in %s: %w", len(recs), len(del), s.path, err)
		}
		return nil, fmt.Errorf("snapshot: save %d pending records to %s: %w", len(recs), s.path, err)
	}
	return keys, nil
}

// LoadPending returns every pending record in save order. It does not
// delete them: a record stays pending until [Store.DeletePending] removes
// it, so a crash while the records are re-pushed loses nothing.
//
// A record that cannot be decoded is reported in the second result as a
// [*DecodeError] and loading continues. Those records are then moved, in
// one write transaction, to the quarantine bucket (see [Store.Quarantined])
// so that the next load is clean. A key that holds a nested bucket cannot
// be moved and is reported on every load. When moving fails, LoadPending
// returns the entries and decode errors it has together with the error.
//
// A clean load is a read-only transaction and does not block writers.
func (s *Store) LoadPending() ([]Entry, []*DecodeError, error) {
	var (
		entries []Entry
		bad     []*DecodeError
	)
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		entries, bad, err = readBucket(tx, BucketPending)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot: load pending records from %s: %w", s.path, err)
	}
	if len(bad) > 0 {
		if err := s.quarantine(BucketPending, bad); err != nil {
			return entries, bad, err
		}
	}
	return entries, bad, nil
}

// DeletePending deletes the pending records with the given keys in one
// write transaction. Deleting a missing key is not an error. Concurrent
// calls are coalesced into one transaction (bbolt's Batch), so a call may
// wait up to 10ms for others to join it.
func (s *Store) DeletePending(keys ...uint64) error {
	if len(keys) == 0 {
		return nil
	}
	err := s.db.Batch(func(tx *bolt.Tx) error {
		b, err := bucket(tx, BucketPending)
		if err != nil {
			return err
		}
		return deleteKeys(b, BucketPending, keys)
	})
	if err != nil {
		return fmt.Errorf("snapshot: delete %d pending records from %s: %w", len(keys), s.path, err)
	}
	return nil
}

// CountPending returns the number of records in the pending bucket,
// counting those that would fail to decode. It reads keys only.
func (s *Store) CountPending() (int, error) {
	n, err := s.count(BucketPending)
	if err != nil {
		return 0, fmt.Errorf("snapshot: count pending records in %s: %w", s.path, err)
	}
	return n, nil
}

func (s *Store) count(name string) (int, error) {
	n := 0
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := bucket(tx, name)
		if err != nil {
			return err
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v != nil {
				n++
			}
		}
		return nil
	})
	return n, err
}

// encodeAll encodes recs into a few large buffers and returns one capped
// sub-slice per record. Nothing is ever written over, as bbolt's Put
// requires.
func encodeAll(recs []Record) [][]byte {
	vals := make([][]byte, len(recs))
	var chunk []byte
	for i := range recs {
		if need := maxEncodedSize(&recs[i]); cap(chunk)-len(chunk) < need {
			chunk = make([]byte, 0, max(chunkSize, need))
		}
		start := len(chunk)
		chunk = AppendRecord(chunk, &recs[i])
		vals[i] = chunk[start:len(chunk):len(chunk)]
	}
	return vals
}

// appendValues puts vals under the bucket's next sequence numbers and
// returns those keys. Keys only grow, so pages are filled completely.
func appendValues(b *bolt.Bucket, name string, vals [][]byte) ([]uint64, error) {
	if len(vals) == 0 {
		return []uint64{}, nil
	}
	b.FillPercent = 1.0
	seq := b.Sequence()
	if seq > math.MaxUint64-uint64(len(vals)) {
		return nil, fmt.Errorf("bucket %s sequence %d exhausted", name, seq)
	}
	keys := make([]uint64, len(vals))
	var k [8]byte
	for i, v := range vals {
		seq++
		keys[i] = seq
		binary.BigEndian.PutUint64(k[:], seq) // Put copies the key
		if err := b.Put(k[:], v); err != nil {
			return nil, fmt.Errorf("put %s/%016x: %w", name, seq, err)
		}
	}
	if err := b.SetSequence(seq); err != nil {
		return nil, fmt.Errorf("set sequence of bucket %s: %w", name, err)
	}
	return keys, nil
}

// readBucket decodes every record of the named bucket in key order.
// Records that fail to decode are returned as DecodeErrors.
func readBucket(tx *bolt.Tx, name string) ([]Entry, []*DecodeError, error) {
	b, err := bucket(tx, name)
	if err != nil {
		return nil, nil, err
	}
	var (
		entries []Entry
		bad     []*DecodeError
	)
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var r Record
		var err error
		switch {
		case v == nil:
			err = fmt.Errorf("%w: nested bucket where a record belongs", ErrCorrupt)
		case len(k) != 8:
			err = fmt.Errorf("%w: key is %d bytes, want 8", ErrCorrupt, len(k))
		default:
			r, err = DecodeRecord(v)
		}
		if err != nil {
			bad = append(bad, &DecodeError{Bucket: name, Key: slices.Clone(k), Err: err})
			continue
		}
		entries = append(entries, Entry{Key: binary.BigEndian.Uint64(k), Record: r})
	}
	return entries, bad, nil
}
