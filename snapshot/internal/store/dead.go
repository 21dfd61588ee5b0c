package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// SaveDead writes dead letters, in the record format of the pending
// bucket, into the dead bucket under new keys and returns those keys in
// the order of recs. Many goroutines saving one dead letter each share
// fsyncs when they do it in [Store.Batch].
func (tx *Tx) SaveDead(recs ...Record) ([]uint64, error) {
	keys, err := tx.putNew(BucketDead, encodeAll(recs), recs)
	if err != nil {
		return nil, tx.errorf(err, "save %d dead letters", len(recs))
	}
	return keys, nil
}

// GetDead returns the dead letter with the given key; false when there is
// none. A record that does not decode is reported as a [*DecodeError],
// with true.
func (tx *Tx) GetDead(key uint64) (Record, bool, error) {
	return tx.getRecord(BucketDead, key, "dead letter")
}

// getRecord returns the record of bucket name (of sequence keys) under
// key, as GetDead and GetPending do; what names it in an error.
func (tx *Tx) getRecord(name string, key uint64, what string) (Record, bool, error) {
	r, ok, err := tx.getSeq(name, key)
	var de *DecodeError
	if err != nil && !errors.As(err, &de) {
		return Record{}, false, tx.errorf(err, "get %s %d", what, key)
	}
	return r, ok, err
}

// PutDead replaces the dead letter under key with rec: a requeued dead
// letter that failed again keeps its key. It returns an error wrapping
// [ErrNotFound] when there is no dead letter under key (it was discarded
// meanwhile) and writes nothing then; the transaction stays usable.
func (tx *Tx) PutDead(key uint64, rec Record) error {
	return tx.replace(BucketDead, seqKey(key), fmt.Sprintf("%016x", key), &rec)
}

// replace overwrites the record under the existing key k of bucket name
// with rec, or returns an error wrapping ErrNotFound naming the bucket
// and keyText. Used by the Put methods of Tx.
func (tx *Tx) replace(name string, k []byte, keyText string, rec *Record) error {
	b, err := tx.bucket(name)
	if err != nil {
		return tx.errorf(err, "replace %s/%s", name, keyText)
	}
	if len(k) == 0 || b.Get(k) == nil {
		return fmt.Errorf("%w: %s/%s in %s", ErrNotFound, name, keyText, tx.s.path)
	}
	if err := tx.markRecords(); err != nil {
		return tx.errorf(err, "replace %s/%s", name, keyText)
	}
	v := appendRecord(nil, rec)
	if err := b.Put(k, v); err != nil {
		return tx.errorf(err, "replace %s/%s", name, keyText)
	}
	if tx.cap != nil {
		return tx.errorf(tx.capPut(name, k, v, rec, mapKeep), "replace %s/%s", name, keyText)
	}
	return nil
}

// DeleteDead deletes the dead letters with the given keys. Deleting a
// missing key is not an error.
func (tx *Tx) DeleteDead(keys ...uint64) error {
	return tx.errorf(tx.deleteSeq(BucketDead, keys), "delete %d dead letters", len(keys))
}

// DeadPage returns up to limit dead letters of class ("" means every
// class) with keys greater than after, in key order (save order), and
// the key to pass as after for the next page: 0 when no dead letter of
// class follows. A limit of zero or less means no limit. Pages read in
// one transaction are consistent with each other; in transactions of
// their own they are not: a dead letter saved between two pages shows up
// on a later page.
//
// Filtering by class reads only the start of each record, yet a filtered
// page may still walk the whole bucket. A dead letter that cannot be
// decoded is not in the page: err then joins a [*DecodeError] for each
// (errors.Is(err, [ErrCorrupt]) holds) and the page is returned with it.
// Nothing is moved: DeadPage only reads.
func (tx *Tx) DeadPage(class string, after uint64, limit int) ([]Entry, uint64, error) {
	if after == math.MaxUint64 {
		return nil, 0, nil
	}
	b, err := tx.bucket(BucketDead)
	if err != nil {
		return nil, 0, tx.errorf(err, "list dead letters")
	}
	var (
		page []Entry
		bad  []error
		next uint64
		last uint64 // last key looked at, the after of the next page
	)
	c := b.Cursor()
	for k, v := c.Seek(seqKey(after + 1)); k != nil; k, v = c.Next() {
		if class != "" && v != nil {
			if cl, ok := recordClass(v); ok && string(cl) != class {
				if len(k) == 8 {
					last = binary.BigEndian.Uint64(k)
				}
				continue
			}
		}
		if limit > 0 && len(page) == limit {
			next = last
			break
		}
		if len(k) == 8 {
			last = binary.BigEndian.Uint64(k)
		}
		e, de := decodeEntry(BucketDead, k, v)
		if de != nil {
			bad = append(bad, de)
			continue
		}
		page = append(page, e)
	}
	return page, next, errors.Join(bad...)
}

// deadSearchChunk is how many dead letters DeadSearch decodes at a time.
const deadSearchChunk = 512

// DeadSearch reads every dead letter of class (every class's for ""),
// counts in total those match accepts, and returns up to limit of them:
// oldest first (key order, the order they were saved), those with keys
// above from (0: from the start); or, newest, newest first, those with
// keys below from (0: from the end). next is the from of the next page
// in the same order: 0 past the last. It walks the whole bucket (the
// class's records only are decoded) whatever the page, to count total;
// memory holds a page and a chunk of records. match must not keep the
// record. A dead letter that cannot be decoded is left out and err joins
// a [*DecodeError] for each, as [Tx.DeadPage] does; the rest is returned
// with it. A limit below 1 returns no page, only total.
func (tx *Tx) DeadSearch(class string, match func(*Record) bool, from uint64, newest bool, limit int) (page []Entry, next uint64, total int, err error) {
	var (
		after uint64
		past  int // matches beyond the page, in its order
		ring  int // newest: page is a ring of the last limit, ring its oldest
		bad   []error
	)
	for {
		entries, n, err := tx.DeadPage(class, after, deadSearchChunk)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				return nil, 0, 0, err
			}
			bad = append(bad, err)
		}
		for i := range entries {
			e := &entries[i]
			if !match(&e.Record) {
				continue
			}
			total++
			switch {
			case !newest && e.Key > from:
				if len(page) < limit {
					page = append(page, *e)
				} else {
					past++
				}
			case newest && (from == 0 || e.Key < from) && limit > 0:
				if len(page) < limit {
					page = append(page, *e)
				} else {
					past++
					page[ring] = *e
					ring = (ring + 1) % limit
				}
			}
		}
		if n == 0 {
			break
		}
		after = n
	}
	if newest {
		page = append(page[ring:], page[:ring]...)
		slices.Reverse(page)
	}
	if past > 0 && len(page) > 0 {
		next = page[len(page)-1].Key
	}
	return page, next, total, errors.Join(bad...)
}

// recordClass returns the class of the encoded record b, read without
// decoding the rest, and false when b does not start as a record does.
// The class aliases b.
func recordClass(b []byte) ([]byte, bool) {
	if len(b) == 0 || b[0] < oldestRecordVersion || b[0] > recordVersion {
		return nil, false
	}
	d := decoder{b: b, off: 1}
	d.span("id", d.uvarint("id", "length"))
	class := d.span("class", d.uvarint("class", "length"))
	return class, d.err == nil
}

// ReasonRequeued is the Reason of a pending record that [Tx.RequeueDead]
// moved from the dead letters.
const ReasonRequeued = "requeued"

// RequeueDead moves the dead letters with the given keys to the pending
// bucket, so that the next start re-pushes them, and returns their new
// pending keys in the order of keys. Each moves
// with a fresh retry budget, as the runtime's own requeue gives: Attempt
// and Redeliveries 0, FirstFailed zero; Reason becomes "requeued" and
// SavedAt now, Err (the last error) stays. It is meant for the offline
// CLI: a running runtime reads the pending bucket only when it starts.
//
// It moves all or nothing: a key with no dead letter (or named twice)
// fails the call with an error wrapping [ErrNotFound], one that does not
// decode with a [*DecodeError], and nothing is written then.
func (tx *Tx) RequeueDead(keys ...uint64) ([]uint64, error) {
	if len(keys) == 0 {
		return []uint64{}, nil
	}
	pending, err := tx.requeueDead(keys, time.Now())
	if err != nil {
		return nil, tx.errorf(err, "requeue %d dead letters", len(keys))
	}
	return pending, nil
}

// requeueDead checks and encodes every record before it writes, so that
// a failure writes nothing.
func (tx *Tx) requeueDead(keys []uint64, now time.Time) ([]uint64, error) {
	dead, err := tx.bucket(BucketDead)
	if err != nil {
		return nil, err
	}
	vals := make([][]byte, len(keys))
	recs := make([]Record, len(keys))
	seen := make(map[uint64]bool, len(keys))
	for i, key := range keys {
		k := seqKey(key)
		v := dead.Get(k)
		if v == nil || seen[key] {
			return nil, fmt.Errorf("%w: %s/%016x", ErrNotFound, BucketDead, key)
		}
		seen[key] = true
		r, err := decodeRecord(v)
		if err != nil {
			return nil, &DecodeError{Bucket: BucketDead, Key: k, Err: err}
		}
		r.Message.Attempt, r.Redeliveries, r.FirstFailed = 0, 0, time.Time{}
		r.Reason = ReasonRequeued
		r.SavedAt = now
		vals[i] = appendRecord(nil, &r)
		recs[i] = r
	}
	for _, key := range keys {
		if tx.cap != nil {
			if err := tx.capDelete(BucketDead, seqKey(key), dead.Get(seqKey(key))); err != nil {
				return nil, err
			}
		}
		if err := dead.Delete(seqKey(key)); err != nil {
			return nil, fmt.Errorf("delete %s/%016x: %w", BucketDead, key, err)
		}
	}
	return tx.putNew(BucketPending, vals, recs)
}
