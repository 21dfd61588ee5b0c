package snapshot

import "github.com/handoff-go/handoff/snapshot/internal/store"

// TEMPORARY: the names below are the identifiers of the store before it
// moved to snapshot/internal/store, kept so that callers compile while
// they move to State. Each goes as soon as nothing outside snapshot uses it.

type (
	Applied         = store.Applied
	Change          = store.Change
	Changelog       = store.Changelog
	ChangelogError  = store.ChangelogError
	ChangelogKey    = store.ChangelogKey
	ChangelogRecord = store.ChangelogRecord
	DeadID          = store.DeadID
	DecodeError     = store.DecodeError
	Delayed         = store.Delayed
	DelayedEntry    = store.DelayedEntry
	DelayedKey      = store.DelayedKey
	Entry           = store.Entry
	FormatError     = store.FormatError
	Options         = store.Options
	ParkedCount     = store.ParkedCount
	ParkedEntry     = store.ParkedEntry
	ParkedKey       = store.ParkedKey
	Pause           = store.Pause
	Progress        = store.Progress
	Quarantined     = store.Quarantined
	Record          = store.Record
	Store           = State // the State, which embeds the store while callers move
	Tx              = store.Tx
)

var (
	DeadIDOf          = store.DeadIDOf
	DecodeRecord      = store.DecodeRecord
	DelayedKeyAt      = store.DelayedKeyAt
	OwnerMarker       = store.OwnerMarker
	ParseChangelogKey = store.ParseChangelogKey
	ParseDeadID       = store.ParseDeadID
	ParseOwnerMarker  = store.ParseOwnerMarker
	ErrChangelog      = store.ErrChangelog
	ErrCorrupt        = store.ErrCorrupt
	ErrDamaged        = store.ErrDamaged
	ErrDeadID         = store.ErrDeadID
	ErrFileReplaced   = store.ErrFileReplaced
	ErrLocked         = store.ErrLocked
	ErrNewerFormat    = store.ErrNewerFormat
	ErrNoID           = store.ErrNoID
	ErrNotFound       = store.ErrNotFound
	ErrNotState       = store.ErrNotState
)

const (
	BucketDead         = store.BucketDead
	BucketDelayed      = store.BucketDelayed
	BucketParked       = store.BucketParked
	BucketPending      = store.BucketPending
	BucketProgress     = store.BucketProgress
	BucketQuarantine   = store.BucketQuarantine
	MaxProgressOffsets = store.MaxProgressOffsets
	MetaGroup          = store.MetaGroup
	MetaInstance       = store.MetaInstance
	ReasonRequeued     = store.ReasonRequeued
)
