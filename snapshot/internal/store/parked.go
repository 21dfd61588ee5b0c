package store

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
	// Key is the record's key, for [Tx.DeleteParked].
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
// A nil and an empty key are the same key here. class and key together
// must stay under 32 KiB (bbolt's key limit), or Park fails. Park is
// called per message from many goroutines: in [Store.Batch] they share
// fsyncs.
func (tx *Tx) Park(class string, key []byte, recs ...Record) error {
	return tx.errorf(tx.park(class, key, encodeAll(recs), recs), "park %d messages of class %s", len(recs), class)
}

// park puts vals under (class, key) with the parked bucket's next
// sequence numbers. Errors name the class and sequence number, not the
// message key, which stays out of logs.
// With capture on each put is captured, routed by recs[i] (recs may be
// nil: then by the decoded value).
func (tx *Tx) park(class string, key []byte, vals [][]byte, recs []Record) error {
	if len(vals) == 0 {
		return nil
	}
	if err := tx.markRecords(); err != nil {
		return err
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
	for i, v := range vals {
		seq++
		binary.BigEndian.PutUint64(s, seq) // Put copies the key
		if err := b.Put(k, v); err != nil {
			return fmt.Errorf("put %s key of class %s sequence %d: %w", BucketParked, class, seq, err)
		}
		if tx.cap != nil {
			var r *Record
			if recs != nil {
				r = &recs[i]
			}
			if err := tx.capPut(BucketParked, k, v, r, mapNone); err != nil {
				return err
			}
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
// records. A record that cannot be read is skipped and reported in bad;
// the delivery path passes bad to [Tx.Quarantine] in a write
// transaction, so that it cannot stall the key.
func (tx *Tx) Parked(class string, key []byte) (parked []ParkedEntry, bad []*DecodeError, err error) {
	c, err := tx.cursor(BucketParked)
	if err != nil {
		return nil, nil, tx.errorf(err, "read parked messages of class %s", class)
	}
	prefix := appendParkedPrefix(nil, class, key)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var r Record
		switch {
		case v == nil:
			err = fmt.Errorf("%w: nested bucket where a record belongs", ErrCorrupt)
		case len(k) != len(prefix)+8:
			_, _, _, err = splitParkedKey(k)
		default:
			r, err = decodeRecord(v)
		}
		if err != nil {
			bad = append(bad, &DecodeError{Bucket: BucketParked, Key: slices.Clone(k), Err: err})
			continue
		}
		parked = append(parked, ParkedEntry{Key: slices.Clone(k), Record: r})
	}
	return parked, bad, nil
}

// ParkedKeys returns every (class, key) with parked records, in key
// order of the parked bucket (by class length and class, then by key
// length and key), with their count and the SavedAt of the first. It
// reads every key of the parked bucket but decodes only the first record
// of each (class, key). A record whose key cannot be parsed, or a first
// record that cannot be decoded, is left out and reported in bad, for
// [Tx.Quarantine] as with [Tx.Parked].
func (tx *Tx) ParkedKeys() (keys []ParkedCount, bad []*DecodeError, err error) {
	c, err := tx.cursor(BucketParked)
	if err != nil {
		return nil, nil, tx.errorf(err, "list parked keys")
	}
	var (
		group  []byte // (class, key) prefix of keys' last element; bbolt memory
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
			keys = append(keys, pc)
		}
		pc := &keys[len(keys)-1]
		if !oldest {
			r, err := decodeRecord(v)
			if err != nil {
				bad = append(bad, &DecodeError{Bucket: BucketParked, Key: slices.Clone(k), Err: err})
				continue
			}
			pc.Oldest, oldest = r.SavedAt, true
		}
		pc.Count++
	}
	keys = slices.DeleteFunc(keys, func(pc ParkedCount) bool { return pc.Count == 0 })
	return keys, bad, nil
}

// DeleteParked deletes the parked records with the given keys. Deleting
// a missing key is not an error.
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
		if tx.cap != nil {
			if err := tx.capDelete(BucketParked, k, b.Get(k)); err != nil {
				return err
			}
		}
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("delete %s key %d of %d: %w", BucketParked, i+1, len(keys), err)
		}
	}
	return nil
}
