package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// DelayedKey is the key of a delayed record: its due time as 8 bytes of
// big-endian Unix nanoseconds, then its message ID. Keys sort by due
// time, and by ID among records due at the same nanosecond.
type DelayedKey []byte

// Due returns the due time stored in k, in UTC; the zero time when k is
// too short to hold one.
func (k DelayedKey) Due() time.Time {
	if len(k) < 8 {
		return time.Time{}
	}
	n := binary.BigEndian.Uint64(k)
	return time.Unix(0, int64(min(n, math.MaxInt64))).UTC()
}

// ID returns the message ID stored in k.
func (k DelayedKey) ID() string {
	if len(k) < 8 {
		return ""
	}
	return string(k[8:])
}

// Delayed is a message to deliver at Due, for [Tx.SaveDelayed].
type Delayed struct {
	// Due is when the message should be delivered. It is kept to the
	// nanosecond between 1970 and 2262: an earlier time (the zero time
	// included) is stored as the Unix epoch, so it is due at once; a
	// later one as the end of 2262.
	Due time.Time
	// Record is the message and why it waits. Record.Message.ID must not
	// be empty.
	Record Record
}

// DelayedEntry is a stored delayed record with its key.
type DelayedEntry struct {
	// Key is the record's key, for [Tx.DeleteDelayed] or as the after
	// of the next read.
	Key DelayedKey
	// Due is Key.Due().
	Due time.Time
	// Record is the stored record.
	Record Record
}

// DelayedKeyAt returns the lowest key a record due at due can have: as
// the after of [Tx.DueDelayed] it reads from the first record due at due.
func DelayedKeyAt(due time.Time) DelayedKey {
	return binary.BigEndian.AppendUint64(make(DelayedKey, 0, 8), dueNanos(due))
}

// delayedKey returns the key of a message with the given ID due at due.
func delayedKey(due time.Time, id string) DelayedKey {
	k := make([]byte, 8, 8+len(id))
	binary.BigEndian.PutUint64(k, dueNanos(due))
	return append(k, id...)
}

// dueNanos returns t as Unix nanoseconds, clamped to [0, MaxInt64].
func dueNanos(t time.Time) uint64 {
	switch {
	case t.Before(time.Unix(0, 0)):
		return 0
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return uint64(t.UnixNano())
}

// splitDelayedKey returns the ID part of a delayed key, or an error
// wrapping ErrCorrupt when k has no ID. The ID aliases k.
func splitDelayedKey(k []byte) ([]byte, error) {
	if len(k) <= 8 {
		return nil, fmt.Errorf("%w: delayed key is %d bytes, want more than 8", ErrCorrupt, len(k))
	}
	return k[8:], nil
}

// SaveDelayed stores messages to deliver later and reports for each item
// whether it was stored: false when a record with the same message ID is
// already waiting (an earlier item of the same call included), which is
// then left as it is. Once a record is deleted its ID may be delayed
// again. Many goroutines delaying one message each share fsyncs when
// they do it in [Store.Batch].
//
// An item with an empty message ID fails the call, before anything is
// written, with an error wrapping [ErrNoID]. An ID of more than 32 KiB
// (less 8 bytes) does not fit a bbolt key and fails the call.
func (tx *Tx) SaveDelayed(items ...Delayed) ([]bool, error) {
	if err := checkIDs(items, tx.s.path); err != nil {
		return nil, err
	}
	saved, err := tx.saveDelayed(items, encodeDelayed(items))
	if err != nil {
		return nil, tx.errorf(err, "save %d delayed messages", len(items))
	}
	return saved, nil
}

func checkIDs(items []Delayed, path string) error {
	for i := range items {
		if items[i].Record.Message.ID == "" {
			return fmt.Errorf("%w: delayed message %d of %d for %s", ErrNoID, i+1, len(items), path)
		}
	}
	return nil
}

func encodeDelayed(items []Delayed) [][]byte {
	return encodeEach(len(items), func(i int) *Record { return &items[i].Record })
}

// saveDelayed puts the encoded records vals of items under their delayed
// keys and indexes them by ID, skipping IDs already indexed (the first
// item of an ID wins). It may run again in a fresh transaction (Batch):
// its keys are allocated anew.
//
// It puts into each bucket in key order: bbolt splits nodes only at
// commit, so within one transaction unordered puts into a node cost a
// move of the node's entries each, quadratic for a big call (100k
// records took 40s unordered, under 1s ordered).
func (tx *Tx) saveDelayed(items []Delayed, vals [][]byte) ([]bool, error) {
	saved := make([]bool, len(items))
	if len(items) == 0 {
		return saved, nil
	}
	b, err := tx.bucket(BucketDelayed)
	if err != nil {
		return nil, err
	}
	ids, err := tx.bucket(bucketDelayedIDs)
	if err != nil {
		return nil, err
	}
	id := func(i int) string { return items[i].Record.Message.ID }
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	// By ID, then by position: the first item of an ID comes first.
	slices.SortStableFunc(order, func(i, j int) int { return strings.Compare(id(i), id(j)) })
	keys := make([]DelayedKey, len(items)) // the index keeps them: not reused
	for n, i := range order {
		if n > 0 && id(order[n-1]) == id(i) || ids.Get([]byte(id(i))) != nil {
			continue
		}
		keys[i] = delayedKey(items[i].Due, id(i))
		if err := ids.Put([]byte(id(i)), keys[i]); err != nil {
			return nil, fmt.Errorf("put %s/%x: %w", bucketDelayedIDs, id(i), err)
		}
		saved[i] = true
	}
	order = slices.DeleteFunc(order, func(i int) bool { return !saved[i] })
	slices.SortFunc(order, func(i, j int) int { return bytes.Compare(keys[i], keys[j]) })
	if len(order) > 0 {
		if err := tx.markRecords(); err != nil {
			return nil, err
		}
	}
	for _, i := range order {
		if err := b.Put(keys[i], vals[i]); err != nil {
			return nil, fmt.Errorf("put %s/%x: %w", BucketDelayed, []byte(keys[i]), err)
		}
		if tx.cap != nil {
			// A delayed key comes back with its ID and due time: look
			// for a mapping left by a restored record.
			if err := tx.capPut(BucketDelayed, keys[i], vals[i], &items[i].Record, mapDrop); err != nil {
				return nil, err
			}
		}
	}
	return saved, nil
}

// DelayedKeyOf returns the key of the delayed record waiting with message
// ID id, and whether there is one.
func (tx *Tx) DelayedKeyOf(id string) (DelayedKey, bool, error) {
	ids, err := tx.bucket(bucketDelayedIDs)
	if err != nil {
		return nil, false, tx.errorf(err, "look up delayed message %q", id)
	}
	k := ids.Get([]byte(id))
	if k == nil {
		return nil, false, nil
	}
	return DelayedKey(slices.Clone(k)), true, nil
}

// GetDelayed returns the delayed record under key; false when there is
// none. A record that does not decode (or a key of the wrong shape) is
// reported as a [*DecodeError], with true.
func (tx *Tx) GetDelayed(key DelayedKey) (Record, bool, error) {
	b, err := tx.bucket(BucketDelayed)
	if err != nil {
		return Record{}, false, tx.errorf(err, "get %s/%x", BucketDelayed, []byte(key))
	}
	v := b.Get(key)
	if v == nil {
		return Record{}, false, nil
	}
	e, de := decodeDelayed(key, v)
	if de != nil {
		return Record{}, true, de
	}
	return e.Record, true, nil
}

// PutDelayed replaces the delayed record under key with rec, as
// [Tx.PutDead] does for a dead letter: an error wrapping [ErrNotFound]
// when there is none. The key, so the due time and the ID, stays: rec's
// message ID must be the key's, or PutDelayed fails and writes nothing.
func (tx *Tx) PutDelayed(key DelayedKey, rec Record) error {
	if len(key) > 8 && rec.Message.ID != key.ID() {
		return tx.errorf(fmt.Errorf("record ID %q is not the key's", rec.Message.ID), "replace %s/%x", BucketDelayed, []byte(key))
	}
	return tx.replace(BucketDelayed, key, fmt.Sprintf("%x", []byte(key)), &rec)
}

// DueDelayed reads, in due order and starting strictly after the key
// after (nil means from the first), up to limit delayed records due at
// or before now (a limit of zero or less means no limit). next is the
// due time of the first record it did not return, which may be at or
// before now when limit cut the read short; it is the zero time when no
// record follows. It deletes nothing: the caller deletes each record
// once it is delivered, and passes the last key it got as after to read
// on meanwhile.
//
// A record that cannot be read is skipped and reported in bad as a
// [*DecodeError]; the delivery path passes bad to [Tx.Quarantine] in a
// write transaction, so that it cannot stall delivery.
//
// DueDelayed never scans the bucket: it reads the records it returns in
// due and in bad, and, when next is not zero, the key (not the value) of
// the one after them. So a caller counts what it read from the results.
func (tx *Tx) DueDelayed(after DelayedKey, now time.Time, limit int) (due []DelayedEntry, next time.Time, bad []*DecodeError, err error) {
	c, err := tx.cursor(BucketDelayed)
	if err != nil {
		return nil, time.Time{}, nil, tx.errorf(err, "read due delayed messages")
	}
	end := dueNanos(now)
	for k, v := c.seekAfter(after); k != nil; k, v = c.Next() {
		if len(k) >= 8 {
			if n := binary.BigEndian.Uint64(k); n > end || (limit > 0 && len(due) == limit) {
				next = DelayedKey(k).Due()
				break
			}
		}
		e, de := decodeDelayed(k, v)
		if de != nil {
			bad = append(bad, de)
			continue
		}
		due = append(due, e)
	}
	return due, next, bad, nil
}

// ListDelayed returns up to limit delayed records (a limit of zero or
// less means no limit) in due order, starting strictly after the key
// after (nil means from the first): pages for an admin API. A record
// that cannot be decoded is not in the page: err then joins a
// [*DecodeError] for each (errors.Is(err, [ErrCorrupt]) holds) and the
// page is returned with it. ListDelayed only reads.
func (tx *Tx) ListDelayed(after DelayedKey, limit int) ([]DelayedEntry, error) {
	c, err := tx.cursor(BucketDelayed)
	if err != nil {
		return nil, tx.errorf(err, "list delayed messages")
	}
	var (
		page []DelayedEntry
		bad  []error
	)
	for k, v := c.seekAfter(after); k != nil && (limit <= 0 || len(page) < limit); k, v = c.Next() {
		e, de := decodeDelayed(k, v)
		if de != nil {
			bad = append(bad, de)
			continue
		}
		page = append(page, e)
	}
	return page, errors.Join(bad...)
}

// DeleteDelayed deletes the delayed records with the given keys, and
// their ID index entries. Deleting a missing key is not an error.
func (tx *Tx) DeleteDelayed(keys ...DelayedKey) error {
	return tx.errorf(tx.deleteDelayed(keys), "delete %d delayed messages", len(keys))
}

// ForgetDelayed deletes the delayed record under key, with its ID index
// entry, from this file only: nothing is captured, the changelog keeps
// the record. It is for a stale copy of a record of a partition this
// instance does not own, which that partition's owner runs or displaced:
// the owner's changelog decides. Deleting a missing key is not an error.
func (tx *Tx) ForgetDelayed(key DelayedKey) error {
	b, err := tx.bucket(BucketDelayed)
	if err == nil && b.Get(key) != nil {
		err = tx.deleteLocal(BucketDelayed, key)
	}
	return tx.errorf(err, "forget delayed message %x", []byte(key))
}

func (tx *Tx) deleteDelayed(keys []DelayedKey) error {
	if len(keys) == 0 {
		return nil
	}
	b, err := tx.bucket(BucketDelayed)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if len(k) == 0 {
			continue
		}
		if tx.cap != nil {
			if err := tx.capDelete(BucketDelayed, k, b.Get(k)); err != nil {
				return err
			}
		}
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("delete %s/%x: %w", BucketDelayed, []byte(k), err)
		}
		if err := tx.unindexDelayed(k); err != nil {
			return err
		}
	}
	return nil
}

// unindexDelayed deletes the ID index entry of the delayed key k when it
// points to k.
func (tx *Tx) unindexDelayed(k []byte) error {
	id, err := splitDelayedKey(k)
	if err != nil {
		return nil // no ID: nothing indexed
	}
	ids, err := tx.bucket(bucketDelayedIDs)
	if err != nil {
		return err
	}
	if !bytes.Equal(ids.Get(id), k) {
		return nil
	}
	if err := ids.Delete(id); err != nil {
		return fmt.Errorf("delete %s/%x: %w", bucketDelayedIDs, id, err)
	}
	return nil
}

// decodeDelayed decodes the record v stored under the delayed key k.
func decodeDelayed(k, v []byte) (DelayedEntry, *DecodeError) {
	var (
		r   Record
		err error
	)
	if v == nil {
		err = fmt.Errorf("%w: nested bucket where a record belongs", ErrCorrupt)
	} else if _, err = splitDelayedKey(k); err == nil {
		r, err = decodeRecord(v)
	}
	if err != nil {
		return DelayedEntry{}, &DecodeError{Bucket: BucketDelayed, Key: slices.Clone(k), Err: err}
	}
	key := DelayedKey(slices.Clone(k))
	return DelayedEntry{Key: key, Due: key.Due(), Record: r}, nil
}
