package store

import (
	"encoding/hex"
	"errors"
	"fmt"
)

var (
	// ErrLocked is returned by [Open] when another process (or another
	// open handle in this process) holds the state file's lock for longer
	// than [Options.LockTimeout].
	ErrLocked = errors.New("snapshot: state file in use")

	// ErrNewerFormat is wrapped by the [*FormatError] that [Open] returns
	// for a file a newer version of handoff wrote records into that this
	// build cannot read (a newer format, or a feature it does not know).
	ErrNewerFormat = errors.New("snapshot: state file written by a newer version")

	// ErrCorrupt is wrapped by every [DecodeError]: a stored record that
	// is truncated, has trailing bytes, has an unknown format version,
	// holds an impossible value or sits under a key of the wrong shape.
	ErrCorrupt = errors.New("snapshot: corrupt record")

	// ErrDamaged is wrapped by the error a transaction (or [Open])
	// returns when bbolt fails on a damaged page of the file (its page
	// checks assert, or a page's contents send it out of bounds), which
	// would otherwise crash the process: the file needs a restore from
	// a copy, or moving aside (with the changelog, a new file restores
	// its partitions).
	ErrDamaged = errors.New("snapshot: state file damaged")

	// ErrNotFound is returned, wrapped with the bucket and key, by
	// [Tx.PutPending], [Tx.PutDead], [Tx.PutDelayed], [Tx.PutParked] and
	// [Tx.RequeueDead] when the record they should change is not there
	// (deleted meanwhile, or never saved).
	ErrNotFound = errors.New("snapshot: record not found")

	// ErrNoID is returned, wrapped, by [Tx.SaveDelayed] for a message
	// with an empty ID: a delayed record is keyed and deduplicated by its
	// ID.
	ErrNoID = errors.New("snapshot: message has no ID")

	// ErrNotState is wrapped by the error [Open] returns, with
	// [Options.Existing] or [Options.ReadOnly], for a file that is not a
	// handoff state file: an empty file, or a bbolt file without the
	// buckets a state file has.
	ErrNotState = errors.New("not a handoff state file")
)

// DecodeError names the bucket and key of a stored record that failed to
// decode. [Tx.LoadPending], [Tx.DeadPage] and the other readers report
// one per bad record instead of failing the whole read; [Tx.Quarantine]
// takes those of the delivery path. It wraps the decode error, so
// errors.Is(err, [ErrCorrupt]) holds.
type DecodeError struct {
	// Bucket is the bucket the record was read from, e.g. [BucketPending].
	Bucket string
	// Key is the record's key as stored (normally 8 bytes, big-endian).
	Key []byte
	// Err is the decode error; it wraps [ErrCorrupt].
	Err error
}

// Error returns "snapshot: decode <bucket>/<hex key>: <err>".
func (e *DecodeError) Error() string {
	return fmt.Sprintf("snapshot: decode %s/%s: %v", e.Bucket, hex.EncodeToString(e.Key), e.Err)
}

// Unwrap returns e.Err.
func (e *DecodeError) Unwrap() error { return e.Err }

// ErrChangelog is wrapped by every [*ChangelogError]: a transaction
// committed to the local file whose changes the changelog has not
// acknowledged.
var ErrChangelog = errors.New("snapshot: changelog")

// ChangelogError is returned by [Store.Update], [Store.Batch] and
// [Store.ResendUnsent] when the changelog did not acknowledge the changes
// of a transaction that did commit locally: what fn wrote is in the file,
// not (or not surely) in the changelog. The Store has recorded the
// changes as unsent, for [Store.ResendUnsent]; Err joins the failure to
// record them, if any. It wraps [ErrChangelog] and Err.
type ChangelogError struct {
	// Path is the state file.
	Path string
	// Err is the cause: the wait's error, joined with the failure to
	// record the changes as unsent, if any.
	Err error
}

// Error returns "snapshot: <file>: saved locally, not in the changelog:
// <err>".
func (e *ChangelogError) Error() string {
	return fmt.Sprintf("snapshot: %s: saved locally, not in the changelog: %v", e.Path, e.Err)
}

// Unwrap returns ErrChangelog and e.Err.
func (e *ChangelogError) Unwrap() []error { return []error{ErrChangelog, e.Err} }
