package store

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"
)

// quarantineVersion is the first byte of every quarantine value.
const quarantineVersion = 1

// Quarantined is a stored value that failed to decode, kept with where it
// came from and why. Its key is a sequence number of the quarantine
// bucket.
type Quarantined struct {
	// Key is the entry's key in the quarantine bucket.
	Key uint64
	// Bucket is the bucket the value was moved from, e.g. [BucketPending].
	Bucket string
	// OrigKey is the value's key in Bucket.
	OrigKey []byte
	// Err is the text of the decode error.
	Err string
	// Raw is the value exactly as it was stored.
	Raw []byte
	// At is when the value was moved, in UTC.
	At time.Time
}

// Quarantined returns every quarantined value in the order they were
// moved. A quarantine entry that is itself unreadable is returned with
// its whole stored value in Raw, an empty Bucket and the reason in Err,
// so that nothing is hidden from an operator.
func (tx *Tx) Quarantined() ([]Quarantined, error) {
	b, err := tx.bucket(BucketQuarantine)
	if err != nil {
		return nil, tx.errorf(err, "list quarantine")
	}
	var out []Quarantined
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil {
			continue // a nested bucket: not ours, nothing to show
		}
		q, err := decodeQuarantined(v)
		if err != nil {
			q = Quarantined{Err: err.Error(), Raw: slices.Clone(v)}
		}
		if len(k) == 8 {
			q.Key = binary.BigEndian.Uint64(k)
		}
		out = append(out, q)
	}
	return out, nil
}

// Quarantine moves the values that bad names, the decode errors of the
// readers on the delivery path ([Tx.LoadPending], [Tx.DueDelayed],
// [Tx.Parked] and [Tx.ParkedKeys]), from their buckets to the quarantine
// bucket, with their keys and decode errors, so that they cannot stall
// delivery. Each value is checked again first: one that is gone, or now
// reads, stays out of it, so bad may come from an earlier (read-only)
// transaction. A delayed record also leaves the ID index. A decode error
// of another bucket (a dead letter's) fails the call before anything is
// written: dead letters are only reported. With nothing in bad,
// Quarantine does nothing.
func (tx *Tx) Quarantine(bad ...*DecodeError) error {
	if len(bad) == 0 {
		return nil
	}
	return tx.errorf(tx.quarantine(bad, time.Now()), "quarantine %d undecodable %s records", len(bad), bucketsOf(bad))
}

// bucketsOf names the buckets of bad, in order of first appearance.
func bucketsOf(bad []*DecodeError) string {
	var names []string
	for _, de := range bad {
		if !slices.Contains(names, de.Bucket) {
			names = append(names, de.Bucket)
		}
	}
	return strings.Join(names, " and ")
}

func (tx *Tx) quarantine(bad []*DecodeError, now time.Time) error {
	dst, err := tx.bucket(BucketQuarantine)
	if err != nil {
		return err
	}
	for _, de := range bad {
		switch de.Bucket {
		case BucketPending, BucketDelayed, BucketParked:
		default:
			return fmt.Errorf("bucket %s is not read on the delivery path: nothing of it is quarantined", de.Bucket)
		}
	}
	dst.FillPercent = 1.0
	for _, de := range bad {
		name := de.Bucket
		src, err := tx.bucket(name)
		if err != nil {
			return err
		}
		v := src.Get(de.Key)
		if v == nil {
			continue // deleted since, or a nested bucket
		}
		if checkStored(name, de.Key, v) == nil {
			continue
		}
		seq, err := dst.NextSequence()
		if err != nil {
			return fmt.Errorf("next sequence of bucket %s: %w", BucketQuarantine, err)
		}
		qv := appendQuarantined(nil, name, de.Key, de.Err.Error(), now, v)
		if err := dst.Put(seqKey(seq), qv); err != nil {
			return fmt.Errorf("put %s/%016x: %w", BucketQuarantine, seq, err)
		}
		if tx.cap != nil {
			// The value does not decode: it has no route and stays out
			// of the changelog; only a restored record's mapping goes.
			if err := tx.capDelete(name, de.Key, nil); err != nil {
				return err
			}
		}
		if err := src.Delete(de.Key); err != nil {
			return fmt.Errorf("delete %s/%x: %w", name, de.Key, err)
		}
		if name == BucketDelayed {
			if err := tx.unindexDelayed(de.Key); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkStored returns why the value v stored under key k of bucket name
// cannot be read, or nil when it can: its key must have the bucket's
// shape and its value must decode.
func checkStored(name string, k, v []byte) error {
	switch name {
	case BucketDelayed:
		if _, err := splitDelayedKey(k); err != nil {
			return err
		}
	case BucketParked:
		if _, _, _, err := splitParkedKey(k); err != nil {
			return err
		}
	default:
		if len(k) != 8 {
			return fmt.Errorf("%w: key is %d bytes, want 8", ErrCorrupt, len(k))
		}
	}
	_, err := decodeRecord(v)
	return err
}

// appendQuarantined appends a quarantine value: version, bucket, original
// key, error text, time, then the raw value up to the end.
func appendQuarantined(dst []byte, bucket string, key []byte, errText string, at time.Time, raw []byte) []byte {
	dst = slices.Grow(dst, 1+4*binary.MaxVarintLen64+len(bucket)+len(key)+len(errText)+1+2*binary.MaxVarintLen64+len(raw))
	dst = append(dst, quarantineVersion)
	dst = appendString(dst, bucket)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = appendString(dst, errText)
	dst = appendTime(dst, at)
	return append(dst, raw...)
}

// decodeQuarantined decodes a value written by appendQuarantined. Like
// decodeRecord it never panics and shares no memory with b.
func decodeQuarantined(b []byte) (Quarantined, error) {
	if len(b) == 0 {
		return Quarantined{}, fmt.Errorf("snapshot: corrupt quarantine entry: empty")
	}
	if b[0] != quarantineVersion {
		return Quarantined{}, fmt.Errorf("snapshot: corrupt quarantine entry: unknown format version %d", b[0])
	}
	d := decoder{b: slices.Clone(b), off: 1}
	var q Quarantined
	q.Bucket = d.string("bucket")
	n := d.uvarint("original key", "length")
	if d.err == nil {
		q.OrigKey = d.span("original key", n)
	}
	q.Err = d.string("error")
	q.At = d.time("time")
	if d.err != nil {
		return Quarantined{}, fmt.Errorf("snapshot: corrupt quarantine entry: %w", d.err)
	}
	q.Raw = d.b[d.off:len(d.b):len(d.b)]
	return q, nil
}
