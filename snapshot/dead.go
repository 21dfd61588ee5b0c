package snapshot

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// SaveDead writes dead letters, in the record format of the pending
// bucket, into the dead bucket in one write transaction and returns their
// keys in the order of recs. A single record goes through bbolt's Batch,
// so concurrent callers share one transaction and one fsync (a call may
// wait up to 10ms for others to join). With no records it does not touch
// the file.
func (s *Store) SaveDead(recs ...Record) ([]uint64, error) {
	if len(recs) == 0 {
		return []uint64{}, nil
	}
	vals := encodeAll(recs)
	var keys []uint64
	// Batch may run fn more than once, each time in a fresh transaction:
	// it only puts immutable values and replaces keys, so that is safe.
	fn := func(tx *bolt.Tx) error {
		b, err := bucket(tx, BucketDead)
		if err != nil {
			return err
		}
		keys, err = appendValues(b, BucketDead, vals)
		return err
	}
	var err error
	if len(recs) == 1 {
		err = s.db.Batch(fn)
	} else {
		err = s.db.Update(fn)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: save %d dead letters to %s: %w", len(recs), s.path, err)
	}
	return keys, nil
}

// Dead returns every dead letter in save order. A record that cannot be
// decoded is reported in the second result as a [*DecodeError] and left
// where it is: Dead only reads.
func (s *Store) Dead() ([]Entry, []*DecodeError, error) {
	var (
		entries []Entry
		bad     []*DecodeError
	)
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		entries, bad, err = readBucket(tx, BucketDead)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot: load dead letters from %s: %w", s.path, err)
	}
	return entries, bad, nil
}

// DeleteDead deletes the dead letters with the given keys in one write
// transaction. Deleting a missing key is not an error.
func (s *Store) DeleteDead(keys ...uint64) error {
	if len(keys) == 0 {
		return nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := bucket(tx, BucketDead)
		if err != nil {
			return err
		}
		return deleteKeys(b, BucketDead, keys)
	})
	if err != nil {
		return fmt.Errorf("snapshot: delete %d dead letters from %s: %w", len(keys), s.path, err)
	}
	return nil
}
