package snapshot

import "github.com/handoff-go/handoff/snapshot/internal/store"

// The value types the runtime and the CLI hand around, the errors they
// test for, and the few names of the format a caller needs (see "What
// stays exported" in the package documentation): aliases of the store's.

type (
	// Record is a saved message with why and when it was saved.
	Record = store.Record
	// Delayed is a record to save as delayed, due at Due.
	Delayed = store.Delayed
	// Entry is a pending record or a dead letter with its key in the file.
	Entry = store.Entry
	// DeadID is a dead letter's identity, the same on every instance.
	DeadID = store.DeadID
	// DelayedKey is a delayed record's key: its due time and its ID.
	DelayedKey = store.DelayedKey
	// DelayedEntry is a delayed record with its key.
	DelayedEntry = store.DelayedEntry
	// ParkedKey is a parked record's key.
	ParkedKey = store.ParkedKey
	// ParkedEntry is a parked record with its key.
	ParkedEntry = store.ParkedEntry
	// ParkedCount is a parked (class, key) with its count and oldest.
	ParkedCount = store.ParkedCount
	// Progress is what a stop saves of an input partition's done work
	// past its commit.
	Progress = store.Progress
	// Pause is a class's pause as the file keeps it.
	Pause = store.Pause
	// Quarantined is a record moved aside because it did not decode.
	Quarantined = store.Quarantined
	// Options are Open's.
	Options = store.Options
	// Applied is what an apply of changelog records wrote.
	Applied = store.Applied
	// ChangelogRecord is a changelog record as a restore or a follow
	// read it.
	ChangelogRecord = store.ChangelogRecord
	// DecodeError is a record that did not decode.
	DecodeError = store.DecodeError
	// FormatError is a file this version cannot read.
	FormatError = store.FormatError
	// ChangelogError is a write that committed to the file but not to
	// the changelog (it wraps ErrChangelog).
	ChangelogError = store.ChangelogError
)

var (
	DelayedKeyAt = store.DelayedKeyAt
	ParseDeadID  = store.ParseDeadID
)

var (
	ErrChangelog    = store.ErrChangelog
	ErrCorrupt      = store.ErrCorrupt
	ErrDamaged      = store.ErrDamaged
	ErrDeadID       = store.ErrDeadID
	ErrFileReplaced = store.ErrFileReplaced
	ErrLocked       = store.ErrLocked
	ErrNewerFormat  = store.ErrNewerFormat
	ErrNoID         = store.ErrNoID
	ErrNotFound     = store.ErrNotFound
	ErrNotState     = store.ErrNotState
)

// The buckets' names, as Counts keys them, and the limits and reasons a
// caller needs by name.
const (
	BucketDead         = store.BucketDead
	BucketDelayed      = store.BucketDelayed
	BucketParked       = store.BucketParked
	BucketPending      = store.BucketPending
	BucketQuarantine   = store.BucketQuarantine
	MaxProgressOffsets = store.MaxProgressOffsets
	ReasonRequeued     = store.ReasonRequeued
	MetaGroup          = store.MetaGroup
	MetaInstance       = store.MetaInstance
)
