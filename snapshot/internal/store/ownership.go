package store

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Ownership of a partition's changelog. A file's records of an input
// partition are a cache of the partition's changelog, valid while the
// file owned the partition without a break. An instance that begins
// owning a partition writes an owner marker to its changelog, under one
// key per partition (compaction keeps the latest), naming its file; the
// file remembers the latest marker it read or wrote for each partition
// (meta "changelog-owner/<topic>/<partition>"). A marker of another file
// later than this file's own means the partition was owned elsewhere
// meanwhile: the next assignment rebuilds the partition from its
// changelog ([Tx.RebuildChangelog]) instead of trusting the file, whose
// records the other owner may have finished with tombstones that
// compaction has since removed (delete.retention.ms).

// ownerMarkerKey is the changelog key of every owner marker: its first
// byte is not a record key's version (1), so [ParseChangelogKey] refuses
// it and a build that knows no markers reports it as undecodable and
// skips it.
var ownerMarkerKey = []byte("\x02owner")

// ownerMarkerVersion is the first byte of a marker's value, before the
// 16-byte file ID.
const ownerMarkerVersion = 1

// Meta keys: the latest owner marker the file knows of, per input
// partition; the mark that every record of the file is in the
// changelog ([Store.SendUnlogged]).
const (
	metaOwnerPrefix = "changelog-owner/"
	metaLoggedKey   = "changelog-complete"
)

// OwnerMarker returns the changelog key and value of the owner marker
// naming the file with ID id.
func OwnerMarker(id [16]byte) (key, value []byte) {
	return bytes.Clone(ownerMarkerKey), append([]byte{ownerMarkerVersion}, id[:]...)
}

// ParseOwnerMarker reports whether key is an owner marker's and, when it
// is, returns the file ID its value names. A marker's tombstone or a
// value of another shape is an error wrapping [ErrCorrupt], with ok
// true.
func ParseOwnerMarker(key, value []byte) (id [16]byte, ok bool, err error) {
	if !bytes.Equal(key, ownerMarkerKey) {
		return id, false, nil
	}
	if len(value) != 1+16 || value[0] != ownerMarkerVersion {
		return id, true, fmt.Errorf("%w: owner marker value of %d bytes", ErrCorrupt, len(value))
	}
	copy(id[:], value[1:])
	return id, true, nil
}

// ownerKey returns the meta key of the owner remembered for an input
// partition.
func ownerKey(topic string, partition int32) []byte {
	return fmt.Appendf(nil, "%s%s/%d", metaOwnerPrefix, topic, partition)
}

// ChangelogOwner returns the file ID named by the latest owner marker of
// (topic, partition) the file remembers ([Tx.SetChangelogOwner]), and
// false when it remembers none.
func (tx *Tx) ChangelogOwner(topic string, partition int32) (id [16]byte, ok bool, err error) {
	b, err := tx.bucket(bucketMeta)
	if err != nil {
		return id, false, tx.errorf(err, "read the changelog owner of %s/%d", topic, partition)
	}
	v := b.Get(ownerKey(topic, partition))
	if v == nil {
		return id, false, nil
	}
	if len(v) != 16 {
		return id, false, tx.errorf(fmt.Errorf("%w: owner is %d bytes, want 16", ErrCorrupt, len(v)), "read the changelog owner of %s/%d", topic, partition)
	}
	copy(id[:], v)
	return id, true, nil
}

// SetChangelogOwner remembers id as the file named by the latest owner
// marker of (topic, partition): one read from the changelog, or the
// file's own once its marker is acknowledged.
func (tx *Tx) SetChangelogOwner(topic string, partition int32, id [16]byte) error {
	b, err := tx.bucket(bucketMeta)
	if err == nil {
		err = b.Put(ownerKey(topic, partition), bytes.Clone(id[:]))
	}
	return tx.errorf(err, "store the changelog owner of %s/%d", topic, partition)
}

// RebuildChangelog replaces the file's records of one input partition
// with those of recs, the partition's whole changelog read from its
// start in offset order, and stores next as the partition's checkpoint,
// in this write transaction: the partition was owned elsewhere since
// this file last owned it, so its local copy is not trusted. belongs
// reports whether a record of the file belongs to the partition (it
// must not keep the record).
//
// Every local record that belongs to the partition is deleted with its
// changelog mapping, except one with a change of its own not yet in the
// changelog (an unsent change: [Store.ResendUnsent] sends it); without a
// checkpoint for the partition (the file never restored it), records the
// file restored from other files are left unread: they are other
// partitions'. Then recs are
// applied as [Tx.ApplyChangelog] applies another file's records to an
// empty file: the file's own keys too are inserted under fresh local
// keys and mapped, and a key with an unsent change of this file (put or
// tombstone) is skipped, the file's change being the newer. It returns
// what it inserted and how many local records it deleted. The changes
// are not captured.
func (tx *Tx) RebuildChangelog(topic string, partition int32, recs []ChangelogRecord, next int64, belongs func(*Record) bool) (Applied, int, error) {
	applied, dropped, err := tx.rebuild(topic, partition, recs, belongs)
	if err != nil {
		return Applied{}, 0, tx.errorf(err, "rebuild %s/%d from %d changelog records", topic, partition, len(recs))
	}
	if err := tx.SetChangelogCheckpoint(topic, partition, next); err != nil {
		return Applied{}, 0, err
	}
	return applied, dropped, nil
}

func (tx *Tx) rebuild(topic string, partition int32, recs []ChangelogRecord, belongs func(*Record) bool) (Applied, int, error) {
	_, owned, err := tx.ChangelogCheckpoint(topic, partition)
	if err != nil {
		return Applied{}, 0, err
	}
	own, hasOwn, err := tx.fileID()
	if err != nil {
		return Applied{}, 0, err
	}
	unsent, err := tx.bucket(bucketChangelogUnsent)
	if err != nil {
		return Applied{}, 0, err
	}
	keys, err := tx.bucket(bucketChangelogKeys)
	if err != nil {
		return Applied{}, 0, err
	}
	dropped := 0
	for _, name := range []string{BucketPending, BucketDead, BucketDelayed, BucketParked} {
		code := bucketCode(name)
		stale, err := tx.staleOf(name, belongs, func(local []byte) bool {
			// The record's identity: its mapped changelog key when it
			// was restored (an update keeps it), else this file's own.
			ck := keys.Get(mapKey(mapLocalPrefix, []byte{code}, local))
			if ck == nil && hasOwn {
				ck = appendChangelogKey(nil, &own, code, local)
			} else if ck != nil && !owned {
				// Without a checkpoint the file never restored the
				// partition: its records restored from other files
				// are other partitions'.
				return true
			}
			return ck != nil && unsent.Get(ck) != nil // its change is on its way
		})
		if err != nil {
			return Applied{}, 0, err
		}
		for _, local := range stale {
			if err := tx.deleteLocal(name, local); err != nil {
				return Applied{}, 0, err
			}
		}
		dropped += len(stale)
	}
	keep := recs[:0:0]
	for _, r := range recs {
		if unsent.Get(r.Key) == nil {
			keep = append(keep, r)
		}
	}
	// The partition's progress is the read's, or none: a stale local
	// one would skip offsets by an older stop's account.
	if err := tx.DeleteProgress(topic, partition); err != nil {
		return Applied{}, 0, err
	}
	var bad []*DecodeError
	keep, err = tx.applyProgress(topic, partition, keep, &bad)
	if err != nil {
		return Applied{}, 0, err
	}
	tx.rebuilding = true
	defer func() { tx.rebuilding = false }()
	applied, err := tx.applyChangelog(keep)
	applied.Bad = append(bad, applied.Bad...)
	return applied, dropped, err
}

// staleOf returns the local keys of the records of bucket name that
// belong to the partition being rebuilt, but not those skip reports
// (checked first: it spares the decoding).
// A value that does not decode is left where it is.
func (tx *Tx) staleOf(name string, belongs func(*Record) bool, skip func(local []byte) bool) ([][]byte, error) {
	c, err := tx.cursor(name)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if skip(k) {
			continue
		}
		rec, err := decodeOwned(v, nil)
		if err != nil || !belongs(&rec) {
			continue
		}
		out = append(out, bytes.Clone(k))
	}
	return out, nil
}

// ChangelogComplete reports whether every record of the file is known
// to be in the changelog: set by [Store.SendUnlogged], cleared by
// [Store.ClearChangelogComplete].
func (tx *Tx) ChangelogComplete() (bool, error) {
	b, err := tx.bucket(bucketMeta)
	if err != nil {
		return false, tx.errorf(err, "read %s/%s", bucketMeta, metaLoggedKey)
	}
	return b.Get([]byte(metaLoggedKey)) != nil, nil
}

// ClearChangelogComplete records that the file is written without the
// changelog from now on (a start with the changelog off): the next start
// with the changelog sends every record again ([Store.SendUnlogged]). It
// blocks as [Store.Update] does.
func (s *Store) ClearChangelogComplete() error {
	err := s.boltUpdate(func(btx *bolt.Tx) error {
		b := btx.Bucket([]byte(bucketMeta))
		if b == nil || b.Get([]byte(metaLoggedKey)) == nil {
			return nil
		}
		return b.Delete([]byte(metaLoggedKey))
	})
	if err != nil {
		return fmt.Errorf("snapshot: clear %s/%s of %s: %w", bucketMeta, metaLoggedKey, s.path, err)
	}
	return nil
}

// sendUnloggedChunk bounds the records one send of SendUnlogged queues.
const sendUnloggedChunk = 4096

// SendUnlogged sends to the changelog, once, the records of a file that
// may hold some the changelog never saw: a file written with the
// changelog off (a start with LocalStateOnly, or a version before the
// changelog). Unless the file is marked complete ([Tx.ChangelogComplete])
// it sends every record that has a route as a put under its identity (a
// record restored from another file under that file's key, any other
// under this file's), waits for the acknowledgements, then marks the
// file complete, and returns how many records it sent. fresh says the
// file had no changelog ID before this run's [Store.SetChangelog]: no
// record of it came from the changelog, so restored records are not
// expected; with fresh false, records restored from another file (mapped
// to that file's key) are left out, as the changelog had them.
//
// Deletions made while the changelog was off are not sent (they are not
// known): a record this file deleted then, but that the changelog still
// holds, comes back to the partition's owner; a record of this file that
// another owner finished before the changelog was turned off here is
// sent again. Both run a message twice; none is lost.
//
// It must run before any partition's restore, with capture on, and
// before other writes: it holds the store's send lock while it reads
// and queues. It fails when capture is off; a failed wait is a
// [*ChangelogError] and leaves the file unmarked.
func (s *Store) SendUnlogged(fresh bool) (int, error) {
	st := s.cl.Load()
	if st == nil {
		return 0, fmt.Errorf("snapshot: send the records of %s to the changelog: changelog capture is off", s.path)
	}
	var done bool
	if err := s.view(func(tx *Tx) (err error) { done, err = tx.ChangelogComplete(); return err }); err != nil {
		return 0, fmt.Errorf("snapshot: send the records of %s to the changelog: %w", s.path, err)
	}
	sent := 0
	if !done {
		var err error
		if sent, err = s.sendAll(st, fresh); err != nil {
			return sent, err
		}
	}
	err := s.boltUpdate(func(btx *bolt.Tx) error {
		b := btx.Bucket([]byte(bucketMeta))
		if b == nil {
			return fmt.Errorf("bucket %s missing", bucketMeta)
		}
		if done {
			return nil
		}
		return b.Put([]byte(metaLoggedKey), []byte{1})
	})
	if err != nil {
		return sent, fmt.Errorf("snapshot: mark %s complete in the changelog: %w", s.path, err)
	}
	return sent, nil
}

// sendAll is SendUnlogged's send: every routed record, in chunks.
func (s *Store) sendAll(st *clState, fresh bool) (int, error) {
	var changes []Change
	s.sendMu.Lock()
	err := s.view(func(tx *Tx) error {
		keys, err := tx.bucket(bucketChangelogKeys)
		if err != nil {
			return err
		}
		for _, name := range []string{BucketPending, BucketDead, BucketDelayed, BucketParked} {
			code := bucketCode(name)
			c, err := tx.cursor(name)
			if err != nil {
				return err
			}
			for k, v := c.First(); k != nil; k, v = c.Next() {
				rec, err := decodeRecord(v)
				if err != nil {
					continue // not a record: stays local, as capture leaves it
				}
				topic, part, ok := st.cl.Route(&rec)
				if !ok {
					continue
				}
				key := appendChangelogKey(nil, &st.fileID, code, k)
				if mapped := keys.Get(mapKey(mapLocalPrefix, []byte{code}, k)); mapped != nil {
					if !fresh {
						continue // restored from the changelog: it has it
					}
					key = bytes.Clone(mapped)
				}
				changes = append(changes, Change{Topic: topic, Partition: part, Key: key, Value: bytes.Clone(v)})
			}
		}
		// The partitions' progress records (progress.go): without them
		// the partition's next owner runs again what this file's
		// instance did past its commit.
		progress, err := tx.progressChanges(st)
		changes = append(changes, progress...)
		return err
	})
	if err != nil {
		s.sendMu.Unlock()
		return 0, fmt.Errorf("snapshot: read the records of %s: %w", s.path, err)
	}
	var waits []func() error
	for start := 0; start < len(changes); start += sendUnloggedChunk {
		if w := st.cl.Send(changes[start:min(start+sendUnloggedChunk, len(changes))]); w != nil {
			waits = append(waits, w)
		}
	}
	s.sendMu.Unlock()
	for _, w := range waits {
		if err := w(); err != nil {
			return 0, &ChangelogError{Path: s.path, Err: err}
		}
	}
	return len(changes), nil
}
