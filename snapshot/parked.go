package snapshot

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
)

// ParkedKey is the key of a parked record: uvarint(len(class)), class,
// uvarint(len(key)), key, then an 8-byte big-endian sequence number of
// the parked bucket. The lengths make the (class, key) prefix of one
// ordering key never a prefix of another's, so all records parked under
// one (class, key) are contiguous and in park order.
type ParkedKey []byte

// ParkedEntry is a stored parked record with its key.
type ParkedEntry struct {
	// Key is the record's key, for [Store.DeleteParked].
	Key ParkedKey
	// Record is the stored record.
	Record Record
}

// ParkedCount describes the records parked under one (class, key).
type ParkedCount struct {
	// Class is the ordered class the key belongs to.
	Class string
	// Key is the message key; nil for the empty (or nil) key.
	Key []byte
	// Count is the number of records parked under it.
	Count int
	// Oldest is the SavedAt of its first parked record.
	Oldest time.Time
}

// appendParkedPrefix appends the (class, key) part of a parked key.
func appendParkedPrefix(dst []byte, class string, key []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(class)))
	dst = append(dst, class...)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	return append(dst, key...)
}

// appendParkedKey appends the parked key of (class, key) with sequence
// number seq.
func appendParkedKey(dst []byte, class string, key []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(appendParkedPrefix(dst, class, key), seq)
}

// splitParkedKey splits a parked key into its class, message key and
// sequence number; class and key alias k. It fails, wrapping ErrCorrupt,
// on a truncated key, trailing bytes or a length not in its shortest
// uvarint form, so that every key it accepts is the one appendParkedKey
// writes for what it returns.
func splitParkedKey(k []byte) (class, key []byte, seq uint64, err error) {
	off := 0
	field := func(name string) []byte {
		if err != nil {
			return nil
		}
		n, w := binary.Uvarint(k[off:])
		switch {
		case w <= 0:
			err = fmt.Errorf("%w: parked key: bad %s length at byte %d", ErrCorrupt, name, off)
			return nil
		case w != uvarintLen(n):
			err = fmt.Errorf("%w: parked key: %s length not in shortest form at byte %d", ErrCorrupt, name, off)
			return nil
		case n > uint64(len(k)-off-w):
			err = fmt.Errorf("%w: parked key: %s length %d exceeds the %d bytes left", ErrCorrupt, name, n, len(k)-off-w)
			return nil
		}
		off += w
		b := k[off : off+int(n) : off+int(n)]
		off += int(n)
		return b
	}
	class = field("class")
	key = field("key")
	if err != nil {
		return nil, nil, 0, err
	}
	if len(k)-off != 8 {
		return nil, nil, 0, fmt.Errorf("%w: parked key: sequence is %d bytes, want 8", ErrCorrupt, len(k)-off)
	}
	return class, key, binary.BigEndian.Uint64(k[off:]), nil
}

// parseParkedKey is splitParkedKey returning copies: a nil key for an
// empty one.
func parseParkedKey(k []byte) (class string, key []byte, seq uint64, err error) {
	c, kk, seq, err := splitParkedKey(k)
	if err != nil {
		return "", nil, 0, err
	}
	if len(kk) > 0 {
		key = slices.Clone(kk)
	}
	return string(c), key, seq, nil
}

// uvarintLen returns the length of the shortest uvarint encoding of n.
func uvarintLen(n uint64) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}

// Park stores recs, in this order, behind the other records parked under
// (class, key): the messages of an ordered class's key that wait for a
// dead letter of that key to be requeued and succeed, or be discarded.
// A nil and an empty key are the same key here. All of recs are stored
// in one write transaction; a single record goes through the group commit
// of [Store.Batch], as Park is called per message from many goroutines.
// With no records Park does not touch the
// file. class and key together must stay under 32 KiB (bbolt's key
// limit), or Park fails.
func (s *Store) Park(class string, key []byte, recs ...Record) error {
	if len(recs) == 0 {
		return nil
	}
	vals := encodeAll(recs)
	run := s.writer(len(recs))
	// Batch may run fn again in a fresh transaction: park then takes new
	// sequence numbers from that transaction's view, which is safe.
	if err := run(func(tx *Tx) error { return tx.park(class, key, vals) }); err != nil {
		return fmt.Errorf("snapshot: park %d messages of class %s in %s: %w", len(recs), class, s.path, err)
	}
	return nil
}

// Park stores recs behind the records parked under (class, key), as
// [Store.Park] does.
func (tx *Tx) Park(class string, key []byte, recs ...Record) error {
	return tx.errorf(tx.park(class, key, encodeAll(recs)), "park %d messages of class %s", len(recs), class)
}

// park puts vals under (class, key) with the parked bucket's next
// sequence numbers. Errors name the class and sequence number, not the
// message key, which stays out of logs.
func (tx *Tx) park(class string, key []byte, vals [][]byte) error {
	if len(vals) == 0 {
		return nil
	}
	b, err := tx.bucket(BucketParked)
	if err != nil {
		return err
	}
	seq := b.Sequence()
	if seq > math.MaxUint64-uint64(len(vals)) {
		return fmt.Errorf("bucket %s sequence %d exhausted", BucketParked, seq)
	}
	k := appendParkedKey(nil, class, key, 0)
	s := k[len(k)-8:]
	for _, v := range vals {
		seq++
		binary.BigEndian.PutUint64(s, seq) // Put copies the key
		if err := b.Put(k, v); err != nil {
			return fmt.Errorf("put %s key of class %s sequence %d: %w", BucketParked, class, seq, err)
		}
	}
	if err := b.SetSequence(seq); err != nil {
		return fmt.Errorf("set sequence of bucket %s: %w", BucketParked, err)
	}
	return nil
}

// PutParked replaces the parked record under key with rec, keeping its
// place in its key's order, as [Tx.PutDead] does for a dead letter: an
// error wrapping [ErrNotFound] when there is none.
func (tx *Tx) PutParked(key ParkedKey, rec Record) error {
	return tx.replace(BucketParked, key, parkedKeyText(key), &rec)
}

// parkedKeyText names a parked key in errors by its class and sequence
// number, leaving out the message key.
func parkedKeyText(k []byte) string {
	class, _, seq, err := splitParkedKey(k)
	if err != nil {
		return fmt.Sprintf("(malformed key of %d bytes)", len(k))
	}
	return fmt.Sprintf("class %s sequence %d", class, seq)
}

// Parked returns the records parked under (class, key) in park order. A
// nil and an empty key are the same key here. It reads only those
// records. A record that cannot be read is skipped and moved to the
// quarantine bucket (see [Store.Quarantined]) in a write transaction of
// its own, so that it cannot stall the key; Parked fails when that move
// does.
func (s *Store) Parked(class string, key []byte) ([]ParkedEntry, error) {
	prefix := appendParkedPrefix(nil, class, key)
	var (
		out []ParkedEntry
		bad []*DecodeError
	)
	err := s.view(func(tx *Tx) error {
		c, err := tx.cursor(BucketParked)
		if err != nil {
			return err
		}
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var r Record
			switch {
			case v == nil:
				err = fmt.Errorf("%w: nested bucket where a record belongs", ErrCorrupt)
			case len(k) != len(prefix)+8:
				_, _, _, err = splitParkedKey(k)
			default:
				r, err = DecodeRecord(v)
			}
			if err != nil {
				bad = append(bad, &DecodeError{Bucket: BucketParked, Key: slices.Clone(k), Err: err})
				continue
			}
			out = append(out, ParkedEntry{Key: slices.Clone(k), Record: r})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot: read parked messages of class %s from %s: %w", class, s.path, err)
	}
	if len(bad) > 0 {
		if err := s.quarantine(BucketParked, bad); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ParkedKeys returns every (class, key) with parked records, in key
// order of the parked bucket (by class length and class, then by key
// length and key), with their count and the SavedAt of the first. It
// reads every key of the parked bucket but decodes only the first record
// of each (class, key). A record whose key cannot be parsed, or a first
// record that cannot be decoded, is left out and moved to the quarantine
// bucket in a write transaction of its own, as [Store.Parked] does;
// ParkedKeys fails when that move does.
func (s *Store) ParkedKeys() ([]ParkedCount, error) {
	var (
		out []ParkedCount
		bad []*DecodeError
	)
	err := s.view(func(tx *Tx) error {
		c, err := tx.cursor(BucketParked)
		if err != nil {
			return err
		}
		var (
			group  []byte // (class, key) prefix of out's last element; bbolt memory
			oldest bool   // whether that element has its Oldest
		)
		for k, v := c.First(); k != nil; k, v = c.Next() {
			class, key, _, err := splitParkedKey(k)
			if err == nil && v == nil {
				err = fmt.Errorf("%w: nested bucket where a record belongs", ErrCorrupt)
			}
			if err != nil {
				bad = append(bad, &DecodeError{Bucket: BucketParked, Key: slices.Clone(k), Err: err})
				continue
			}
			if p := k[:len(k)-8]; group == nil || !bytes.Equal(p, group) {
				group, oldest = p, false
				pc := ParkedCount{Class: string(class)}
				if len(key) > 0 {
					pc.Key = slices.Clone(key)
				}
				out = append(out, pc)
			}
			pc := &out[len(out)-1]
			if !oldest {
				r, err := DecodeRecord(v)
				if err != nil {
					bad = append(bad, &DecodeError{Bucket: BucketParked, Key: slices.Clone(k), Err: err})
					continue
				}
				pc.Oldest, oldest = r.SavedAt, true
			}
			pc.Count++
		}
		out = slices.DeleteFunc(out, func(pc ParkedCount) bool { return pc.Count == 0 })
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot: list parked keys of %s: %w", s.path, err)
	}
	if len(bad) > 0 {
		if err := s.quarantine(BucketParked, bad); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DeleteParked deletes the parked records with the given keys in one
// write transaction. Deleting a missing key is not an error. Concurrent
// calls share one transaction (the group commit of [Store.Batch]).
func (s *Store) DeleteParked(keys ...ParkedKey) error {
	if len(keys) == 0 {
		return nil
	}
	if err := s.batch(func(tx *Tx) error { return tx.deleteParked(keys) }); err != nil {
		return fmt.Errorf("snapshot: delete %d parked messages from %s: %w", len(keys), s.path, err)
	}
	return nil
}

// DeleteParked deletes parked records, as [Store.DeleteParked] does.
func (tx *Tx) DeleteParked(keys ...ParkedKey) error {
	return tx.errorf(tx.deleteParked(keys), "delete %d parked messages", len(keys))
}

func (tx *Tx) deleteParked(keys []ParkedKey) error {
	if len(keys) == 0 {
		return nil
	}
	b, err := tx.bucket(BucketParked)
	if err != nil {
		return err
	}
	for i, k := range keys {
		if len(k) == 0 {
			continue
		}
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("delete %s key %d of %d: %w", BucketParked, i+1, len(keys), err)
		}
	}
	return nil
}
