package snapshot

import (
	"encoding/binary"
	"fmt"
	"slices"
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
	err := s.update(func(tx *Tx) error {
		if err := tx.deleteSeq(BucketPending, del); err != nil {
			return err
		}
		var err error
		keys, err = tx.putNew(BucketPending, vals)
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

// SavePending writes recs into the pending bucket, as
// [Store.SavePending] does, and returns their keys in the order of recs.
func (tx *Tx) SavePending(recs ...Record) ([]uint64, error) {
	keys, err := tx.putNew(BucketPending, encodeAll(recs))
	if err != nil {
		return nil, tx.errorf(err, "save %d pending records", len(recs))
	}
	return keys, nil
}

// DeletePending deletes the pending records with the given keys. Deleting
// a missing key is not an error.
func (tx *Tx) DeletePending(keys ...uint64) error {
	return tx.errorf(tx.deleteSeq(BucketPending, keys), "delete %d pending records", len(keys))
}

// PutPending replaces the pending record under key with rec, as
// [Tx.PutDead] does for a dead letter: an error wrapping [ErrNotFound]
// when there is none.
func (tx *Tx) PutPending(key uint64, rec Record) error {
	return tx.replace(BucketPending, seqKey(key), fmt.Sprintf("%016x", key), &rec)
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
	err := s.view(func(tx *Tx) error {
		var err error
		entries, bad, err = tx.readAll(BucketPending)
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
// calls share one transaction (the group commit of [Store.Batch]).
func (s *Store) DeletePending(keys ...uint64) error {
	if len(keys) == 0 {
		return nil
	}
	err := s.batch(func(tx *Tx) error { return tx.deleteSeq(BucketPending, keys) })
	if err != nil {
		return fmt.Errorf("snapshot: delete %d pending records from %s: %w", len(keys), s.path, err)
	}
	return nil
}

// CountPending returns the number of records in the pending bucket,
// counting those that would fail to decode. It reads keys only.
func (s *Store) CountPending() (int, error) {
	var n int
	err := s.view(func(tx *Tx) error {
		var err error
		n, err = tx.count(BucketPending)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("snapshot: count pending records in %s: %w", s.path, err)
	}
	return n, nil
}

// encodeAll encodes recs into a few large buffers and returns one capped
// sub-slice per record (see encodeEach).
func encodeAll(recs []Record) [][]byte {
	return encodeEach(len(recs), func(i int) *Record { return &recs[i] })
}

// encodeEach encodes the n records at(0) ... at(n-1) into buffers of
// chunkSize, or less for a few small records (a buffer is sized for the
// records left as if they were all the size of the next), and returns
// one capped sub-slice per record. Nothing is ever written over, as
// bbolt's Put requires.
func encodeEach(n int, at func(i int) *Record) [][]byte {
	vals := make([][]byte, n)
	var chunk []byte
	for i := range n {
		r := at(i)
		if need := maxEncodedSize(r); cap(chunk)-len(chunk) < need {
			chunk = make([]byte, 0, max(need, min(chunkSize, need*(n-i))))
		}
		start := len(chunk)
		chunk = AppendRecord(chunk, r)
		vals[i] = chunk[start:len(chunk):len(chunk)]
	}
	return vals
}

// readAll decodes every record of the named bucket in key order.
// Records that fail to decode are returned as DecodeErrors.
func (tx *Tx) readAll(name string) ([]Entry, []*DecodeError, error) {
	b, err := tx.bucket(name)
	if err != nil {
		return nil, nil, err
	}
	var (
		entries []Entry
		bad     []*DecodeError
	)
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		e, err := decodeEntry(name, k, v)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		entries = append(entries, e)
	}
	return entries, bad, nil
}

// decodeEntry decodes the record v stored under the 8-byte key k of
// bucket name.
func decodeEntry(name string, k, v []byte) (Entry, *DecodeError) {
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
		return Entry{}, &DecodeError{Bucket: name, Key: slices.Clone(k), Err: err}
	}
	return Entry{Key: binary.BigEndian.Uint64(k), Record: r}, nil
}
