package store

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrDeadID is wrapped by the error [ParseDeadID] returns for text that
// is not a dead letter ID, and by the one [Tx.FindDead] returns for a
// bare number in a file whose dead letters have group-wide IDs.
var ErrDeadID = errors.New("snapshot: bad dead letter ID")

// DeadID is a dead letter's ID: the same on every instance of a group,
// whichever state file holds the record now, and stable when its
// partition moves. It is derived from the dead letter's changelog key,
// the key of the state file that wrote it first: the first 8 bytes of
// that file's changelog ID and the dead letter's key in that file. Its
// text form is those 8 bytes in lower-case hex, a dash and the key in
// decimal, e.g. "3f2a9c01d4e5b6a7-12".
//
// A file that never ran with the changelog ([Store.SetChangelog]) has
// no file ID: its dead letters' IDs are Local, their keys in that file
// alone, written as the bare decimal key ("12"), as before IDs existed.
//
// The zero DeadID is Local key 0, which no dead letter has.
type DeadID struct {
	// File is the first 8 bytes of the changelog ID of the file that
	// wrote the dead letter; zero when Local.
	File [8]byte
	// Seq is the dead letter's key in that file's dead bucket.
	Seq uint64
	// Local says the ID names a key of a file without a changelog ID.
	Local bool
}

// String returns the text form: "<16 hex digits>-<decimal key>", or the
// decimal key alone for a Local ID.
func (id DeadID) String() string {
	if id.Local {
		return strconv.FormatUint(id.Seq, 10)
	}
	return hex.EncodeToString(id.File[:]) + "-" + strconv.FormatUint(id.Seq, 10)
}

// ParseDeadID parses the text form of [DeadID.String]: 16 hex digits (of
// either case), a dash and a decimal key greater than zero; or a bare
// decimal key, which is a Local ID. Other text is an error wrapping
// [ErrDeadID] that says the form.
func ParseDeadID(s string) (DeadID, error) {
	bad := func() (DeadID, error) {
		return DeadID{}, fmt.Errorf("%w: %q (want 16 hex digits, a dash and a number, e.g. 3f2a9c01d4e5b6a7-12)", ErrDeadID, s)
	}
	file, seq, dashed := strings.Cut(s, "-")
	if !dashed {
		file, seq = "", s
	}
	if seq == "" || seq[0] == '+' {
		return bad()
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil || n == 0 {
		return bad()
	}
	if !dashed {
		return DeadID{Seq: n, Local: true}, nil
	}
	var id DeadID
	if len(file) != 2*len(id.File) {
		return bad()
	}
	if _, err := hex.Decode(id.File[:], []byte(file)); err != nil {
		return bad()
	}
	id.Seq = n
	return id, nil
}

// DeadIDOf returns the ID of the dead letter whose changelog key is ck,
// and false when ck is not a dead letter's.
func DeadIDOf(ck ChangelogKey) (DeadID, bool) {
	if ck.Bucket != BucketDead || len(ck.Local) != 8 {
		return DeadID{}, false
	}
	id := DeadID{Seq: binary.BigEndian.Uint64(ck.Local)}
	copy(id.File[:], ck.FileID[:])
	return id, true
}

// DeadID returns the ID of the dead letter under key in this file: that
// of the changelog key it was restored from when it was (its writer's),
// else that of this file's own changelog key, else (a file that never
// ran with the changelog) the Local ID of key. It does not check that a
// dead letter is under key.
func (tx *Tx) DeadID(key uint64) (DeadID, error) {
	id, err := tx.deadID(key)
	return id, tx.errorf(err, "dead letter ID of %d", key)
}

func (tx *Tx) deadID(key uint64) (DeadID, error) {
	ck, ok, err := tx.RecordIdentity(BucketDead, seqKey(key))
	if err != nil {
		return DeadID{}, err
	}
	if !ok {
		return DeadID{Seq: key, Local: true}, nil // a file never on the changelog
	}
	id, ok := DeadIDOf(ck)
	if !ok {
		return DeadID{}, fmt.Errorf("%w: %s/%016x maps to a %s changelog key", ErrCorrupt, BucketDead, key, ck.Bucket)
	}
	return id, nil
}

// FindDead returns the key in this file of the dead letter with ID id,
// and false when this file has no dead letter with that ID. A Local ID
// names a key of this file only while the file has no changelog ID: in
// one that has, it is an error wrapping [ErrDeadID] (a bare number of
// such a file may be another file's key, so it names no dead letter for
// sure).
func (tx *Tx) FindDead(id DeadID) (uint64, bool, error) {
	key, ok, err := tx.findDead(id)
	return key, ok, tx.errorf(err, "find dead letter %s", id)
}

func (tx *Tx) findDead(id DeadID) (uint64, bool, error) {
	dead, err := tx.bucket(BucketDead)
	if err != nil {
		return 0, false, err
	}
	own, hasOwn, err := tx.fileID()
	if err != nil {
		return 0, false, err
	}
	if id.Local {
		if hasOwn {
			return 0, false, fmt.Errorf("%w: %d is a bare key, which may be another state file's; this file's dead letters are named by group-wide IDs (16 hex digits, a dash and a number): list them for their IDs",
				ErrDeadID, id.Seq)
		}
		return id.Seq, dead.Get(seqKey(id.Seq)) != nil, nil
	}
	keys := tx.tx.Bucket([]byte(bucketChangelogKeys))
	mine := func(key uint64) bool {
		return keys == nil || keys.Get(mapKey(mapLocalPrefix, []byte{bucketCode(BucketDead)}, seqKey(key))) == nil
	}
	if hasOwn && bytes.Equal(own[:8], id.File[:]) && dead.Get(seqKey(id.Seq)) != nil && mine(id.Seq) {
		return id.Seq, true, nil
	}
	if keys == nil {
		return 0, false, nil
	}
	// A restored dead letter: its changelog key maps to its key here.
	// The mapping is keyed by the full 16-byte file ID, which the ID has
	// the first half of: find each file ID of that prefix (one, but for
	// a chance of 2^-64) and look its key up.
	prefix := mapKey(mapChangelogPrefix, []byte{changelogKeyVersion, bucketCode(BucketDead)}, id.File[:])
	c := keys.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); {
		if len(k) < 1+changelogKeyHeader {
			k, _ = c.Next()
			continue
		}
		file := bytes.Clone(k[3 : 1+changelogKeyHeader])
		want := mapKey(mapChangelogPrefix, []byte{changelogKeyVersion, bucketCode(BucketDead)}, file, seqKey(id.Seq))
		if got, v := c.Seek(want); bytes.Equal(got, want) {
			if len(v) != 9 || v[0] != bucketCode(BucketDead) {
				return 0, false, fmt.Errorf("%w: %s/%x maps to %x, not a dead letter's key", ErrCorrupt, bucketChangelogKeys, want, v)
			}
			key := binary.BigEndian.Uint64(v[1:])
			return key, dead.Get(v[1:]) != nil, nil
		}
		next, carry := nextID(file)
		if carry {
			break
		}
		k, _ = c.Seek(mapKey(mapChangelogPrefix, []byte{changelogKeyVersion, bucketCode(BucketDead)}, next))
	}
	return 0, false, nil
}

// nextID returns the file ID after id in byte order, and true when id
// was the last (all 0xff).
func nextID(id []byte) ([]byte, bool) {
	next := bytes.Clone(id)
	for i := len(next) - 1; i >= 0; i-- {
		next[i]++
		if next[i] != 0 {
			return next, false
		}
	}
	return next, true
}
