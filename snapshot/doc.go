// Package snapshot is the component of handoff that owns "saved": the
// state file of a service instance — the messages saved at a stop
// (pending), the dead letters, the messages to deliver later (delayed),
// the messages parked behind a dead letter of their ordering key
// (parked), what did not decode (quarantine), the pauses — and the
// writes of it to the changelog topic that carries a partition's state to
// its next owner. The runtime and the CLI reach the file only through it.
//
// # State
//
// [Open] is the one way to open a state file: for the runtime, for the
// CLI read-only or offline ([Options.ReadOnly]), and for tests. It blocks
// up to [Options.LockTimeout] while another process holds the file
// (zero: 1s), then fails with [ErrLocked]. A [State] is one open file and is
// safe for concurrent use; every read and write is one call of one of
// its methods and one transaction, so a caller never sees, and never
// writes, half of an operation. A write blocks for the file's fsync and,
// once [State.OpenChangelog] turned the changelog on, for the changelog's
// acknowledgement of the write; a read neither blocks writers nor waits
// for them.
//
// # "Saved" is one call
//
// A message leaves the runtime's hands in one call: a move
// ([State.MoveToDead], [State.MoveToRedelivery], [State.MoveToDelayed],
// [State.MoveToParked], [State.UpdateDead], and [State.OrphanToDead],
// [State.Unpark], [State.DeleteDone] for the records of done messages).
// Each takes the message's [Source], the record it came from (the zero
// Source: a Kafka or submitted message, no record), and in ONE
// transaction deletes that record, saves the message in its new place and
// hands the changelog both writes (a tombstone and a record), which the
// store captures from the transaction itself.
// The lock story is the file's: a move holds bbolt's one writer lock for
// its transaction, shared with the moves of other goroutines unless
// [Move].Alone asks for its own (one fsync for many); nothing of the
// runtime's is held inside it but the [Move].Check it passes, which must
// not call the State. A move returns:
//
//   - nil once the file and, with a changelog, the changelog have it: the
//     caller settles the message's origin (commits its Kafka offset,
//     tells the scheduler a delayed record is gone) after the call, never
//     before;
//   - an error wrapping [ErrChangelog] when the file has it but the
//     changelog does not: the caller settles only once
//     [Changelog.Resend] succeeded ([Changelog.Await]);
//   - any other error when nothing was written: the message stays where
//     it was (Kafka delivers it again, its record stays).
//
// The stop's snapshot is one call too ([State.SaveStop]): the unfinished
// messages saved, the records of done ones deleted, the updated records
// and each partition's [Progress], in one transaction.
//
// # The changelog
//
// [State.OpenChangelog] turns the changelog on and returns its side of
// the state, a [Changelog]: it sends every write of the file to the
// changelog partition of the input partition its record belongs to (the
// caller's Route), keeps which partitions this instance owns and their
// checkpoints, restores a partition ([Changelog.Restore]: read from the
// file's checkpoint, or whole and rebuilt after a break, judged by the
// owner markers), claims it ([Changelog.Claim]), follows what other
// instances write to it ([Changelog.Follow]), and keeps the settles of
// messages whose changelog write failed until a [Changelog.Resend]. A nil
// *Changelog is the changelog off: every method answers as the file alone
// would (every record is this instance's, nothing to restore), so the
// caller never asks whether it is on. The Kafka side is a small
// interface, [Log] (send, read a partition to its end, name the topic),
// that the runtime implements over its Kafka client; this package
// imports no Kafka client. What a restore or a follow applied comes
// back as values ([Restoration], [Followed]): the runtime pushes the
// messages into its pools and blocks keys. The meta topic (pauses,
// dead-letter operations), the repartition's record moves and the
// group's dead-letter views are still the runtime's (runtime/changelog.go
// is their adapter).
//
// # Offline: the CLI
//
// The command line (cmd/handoff) opens a file with [Open] too: read-only
// for what only reads (inspect, dead list, dead show; a running
// service's file is read from a consistent copy), for writing on a
// stopped service's file (Open fails with [ErrLocked] after
// Options.LockTimeout while a service holds it). It sets no changelog,
// so its writes reach the file only. What it uses, each one transaction:
// [State.FileInfo] (group, instance, format, classes, pauses, changelog
// ID, checkpoints), [State.Counts], [State.Walk] (every record bucket in
// one read; the records that do not decode returned by bucket, for
// [State.Quarantine]), [State.Quarantined]; the dead letters with their
// IDs ([State.ListDead], [State.DeadByID], [State.DeadByMessageID],
// [State.DeadRefs]: the undecodable ones apart, as [UndecodableDead]);
// [State.RequeueDead] (to pending, with a fresh budget), [State.Delete]
// (a discard's dead letters, replay's acknowledged records, as [Source]s),
// [State.RenameClasses], [State.PutPause], [State.DeletePause]. Its
// cluster listing reads a group's changelog without a file:
// [IsChangelogDead] tells a dead letter's writes, [DecodeChangelogDead]
// decodes the last one of a key.
//
// # What stays exported
//
// [State], its [Options], the value types the runtime and the CLI hand
// around ([Record], [Entry], [DeadID], [DelayedKey], [DelayedEntry],
// [ParkedKey], [ParkedEntry], [ParkedCount], [Progress], [Pause],
// [Applied], [ChangelogRecord], [Quarantined]) and
// the errors (ErrLocked, ErrNotState, ErrNewerFormat, ErrDamaged...) are
// aliases of package snapshot/internal/store's. Of the format, only what
// a caller needs by name is exported: the bucket names Counts keys its
// result by (BucketPending...), the dead-letter ID's parser
// ([ParseDeadID]) and what the CLI's cluster listing asks of a changelog
// record ([IsChangelogDead], [DecodeChangelogDead]); the changelog key,
// the owner marker and the record codec are not parsed outside the
// package (the runtime's changelog reads go through [Changelog]).
// MetaGroup and MetaInstance have no user outside the package since the
// CLI reads
// [State.FileInfo]. The file's transactions (store.Tx,
// store.Store), its buckets' layout and the key codecs are internal:
// nothing outside package snapshot opens a transaction.
//
// # Zero values
//
// A zero State is not usable: Open makes one. The zero [Source] is a
// message without a record; the zero [Move] is a shared transaction
// without a check; a zero [DoneQueue] is empty and ready.
package snapshot
