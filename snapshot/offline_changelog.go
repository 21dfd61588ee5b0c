package snapshot

import (
	"fmt"

	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// ChangelogDead is a dead letter read from a changelog partition, as
// [DecodeChangelogDead] returns it: what 'handoff dead list --brokers'
// lists of a group's dead letters without any state file.
type ChangelogDead struct {
	// ID is the dead letter's ID: the one its owner's state file and
	// admin API name it by.
	ID DeadID
	// Writer is the changelog ID of the state file that wrote it first
	// (its key's file).
	Writer [16]byte
	// Record is the dead letter.
	Record Record
}

// IsChangelogDead reports whether key and value, a record read from a
// changelog partition, are a write of a dead letter's key: a put, or a
// tombstone (nil value) deleting it. The partition's last write of such
// a key is the dead letter ([DecodeChangelogDead]) or its deletion.
// Every other record of a changelog (the other buckets' records, a
// partition's progress, the owner marker) is false with a nil error; a
// key that is none of these is an error wrapping [ErrCorrupt].
func IsChangelogDead(key, value []byte) (bool, error) {
	if _, marker, _ := store.ParseOwnerMarker(key, value); marker {
		return false, nil // who owns the partition, not a record
	}
	ck, err := store.ParseChangelogKey(key)
	if err != nil {
		return false, err
	}
	return ck.Bucket == store.BucketDead, nil
}

// DecodeChangelogDead decodes the last write (not a tombstone) of a dead
// letter's key ([IsChangelogDead]) in a changelog partition: the dead
// letter, with its ID and writer. An error wraps [ErrCorrupt]: the value
// is not a record, or the key is not a dead letter's.
func DecodeChangelogDead(key, value []byte) (ChangelogDead, error) {
	ck, err := store.ParseChangelogKey(key)
	if err != nil {
		return ChangelogDead{}, err
	}
	rec, err := store.DecodeRecord(value)
	if err != nil {
		return ChangelogDead{}, err
	}
	id, ok := store.DeadIDOf(ck)
	if !ok {
		if ck.Bucket != store.BucketDead {
			return ChangelogDead{}, fmt.Errorf("%w: a %s record's changelog key, not a dead letter's", ErrCorrupt, ck.Bucket)
		}
		return ChangelogDead{}, fmt.Errorf("%w: dead letter key of %d bytes, want 8", ErrCorrupt, len(ck.Local))
	}
	return ChangelogDead{ID: id, Writer: ck.FileID, Record: rec}, nil
}
