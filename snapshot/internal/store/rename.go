package store

import (
	"bytes"
	"errors"
	"fmt"
)

// RenameClass gives every record of class from (pending, dead letters,
// delayed and parked messages) the class to instead, and moves from's
// pause to to unless to has one. It is how a renamed class keeps its
// saved messages: without it they become dead letters of an unknown
// class at the next start. It returns how many records it renamed, per
// bucket (BucketPending, BucketDead, BucketDelayed, BucketParked; a
// moved pause counts under "pause"). Records that do not decode are left
// where they are (a later read quarantines them). Parked messages of
// from are parked behind to's of the same key, in their order.
//
// It also records to as a class the file has seen ([Tx.AddClasses]). It
// reads every record of those buckets: O(records) in one transaction.
// Running it again changes nothing.
func (tx *Tx) RenameClass(from, to string) (map[string]int, error) {
	if from == "" || to == "" || from == to {
		return nil, tx.errorf(errors.New("need two different non-empty class names"), "rename class %q to %q", from, to)
	}
	counts := map[string]int{}
	for _, name := range []string{BucketPending, BucketDead, BucketDelayed} {
		n, err := tx.renameIn(name, from, to)
		if err != nil {
			return counts, tx.errorf(err, "rename class %q to %q in %s", from, to, name)
		}
		counts[name] = n
	}
	n, err := tx.renameParked(from, to)
	if err != nil {
		return counts, tx.errorf(err, "rename class %q to %q in %s", from, to, BucketParked)
	}
	counts[BucketParked] = n
	moved, err := tx.renamePause(from, to)
	if err != nil {
		return counts, tx.errorf(err, "move the pause of class %q to %q", from, to)
	}
	if moved {
		counts["pause"] = 1
	}
	// The file has now seen the new name (see AddClasses).
	if _, err := tx.AddClasses(to); err != nil {
		return counts, err
	}
	return counts, nil
}

// renameIn rewrites, under the same keys, the records of class from in
// bucket name with class to.
func (tx *Tx) renameIn(name, from, to string) (int, error) {
	b, err := tx.bucket(name)
	if err != nil {
		return 0, err
	}
	var keys, vals [][]byte
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		r, err := decodeRecord(v)
		if err != nil || r.Message.Class != from {
			continue
		}
		r.Message.Class = to
		keys = append(keys, bytes.Clone(k))
		vals = append(vals, appendRecord(nil, &r))
	}
	if len(keys) == 0 {
		return 0, nil
	}
	if err := tx.markRecords(); err != nil {
		return 0, err
	}
	// Put after the walk: a cursor is not to be used across writes.
	for i := range keys {
		if err := b.Put(keys[i], vals[i]); err != nil {
			return 0, fmt.Errorf("put %x: %w", keys[i], err)
		}
		if tx.cap != nil {
			if err := tx.capPut(name, keys[i], vals[i], nil, mapKeep); err != nil {
				return 0, err
			}
		}
	}
	return len(keys), nil
}

// renameParked moves the parked messages of class from to class to, key
// by key in their order.
func (tx *Tx) renameParked(from, to string) (int, error) {
	b, err := tx.bucket(BucketParked)
	if err != nil {
		return 0, err
	}
	type group struct {
		key  []byte
		vals [][]byte
	}
	var (
		groups []group
		old    [][]byte
	)
	prefix := parkedClassPrefix(nil, from)
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		class, key, _, err := splitParkedKey(k)
		if err != nil || string(class) != from {
			continue
		}
		r, err := decodeRecord(v)
		if err != nil {
			continue
		}
		r.Message.Class = to
		if n := len(groups); n == 0 || !bytes.Equal(groups[n-1].key, key) {
			groups = append(groups, group{key: bytes.Clone(key)})
		}
		g := &groups[len(groups)-1]
		g.vals = append(g.vals, appendRecord(nil, &r))
		old = append(old, bytes.Clone(k))
	}
	for _, k := range old {
		if tx.cap != nil {
			if err := tx.capDelete(BucketParked, k, b.Get(k)); err != nil {
				return 0, err
			}
		}
		if err := b.Delete(k); err != nil {
			return 0, fmt.Errorf("delete %x: %w", k, err)
		}
	}
	for _, g := range groups {
		if err := tx.park(to, g.key, g.vals, nil); err != nil {
			return 0, err
		}
	}
	return len(old), nil
}

// parkedClassPrefix appends the class part of a parked key: every key
// of the class starts with it.
func parkedClassPrefix(dst []byte, s string) []byte {
	p := appendParkedPrefix(dst, s, nil)
	return p[:len(p)-1] // without the key's zero length
}

// renamePause moves from's pause to to, unless to has its own.
func (tx *Tx) renamePause(from, to string) (bool, error) {
	b, err := tx.bucket(bucketMeta)
	if err != nil {
		return false, err
	}
	v := b.Get([]byte(pausePrefix + from))
	if v == nil {
		return false, nil
	}
	v = bytes.Clone(v)
	if err := b.Delete([]byte(pausePrefix + from)); err != nil {
		return false, err
	}
	if b.Get([]byte(pausePrefix+to)) != nil {
		return false, nil
	}
	return true, b.Put([]byte(pausePrefix+to), v)
}
