// Package store is the embedded durable store of handoff: one bbolt
// state file per service instance, holding the messages saved at shutdown
// (pending), the dead letters, the messages to deliver later (delayed),
// the messages parked behind a dead letter of their ordering key
// (parked), and the stored values that could not be decoded (quarantine).
//
// It knows nothing of Kafka or of the runtime. A [Store] is one open
// file and is safe for concurrent use.
//
// # Reading and writing
//
// Every read and write of the records is a method of [Tx], as bbolt
// keeps them, run in a transaction of the Store:
//
//   - [Store.Update] runs fn in one write transaction and commits it with
//     one fsync: what fn wrote is durable exactly when Update returned
//     nil, and all of it or none of it is. Several writes that must
//     happen together (save a dead letter and delete its pending record)
//     go in one Update. The shutdown snapshot is one Update.
//   - [Store.Batch] is the same for small writes made by many goroutines
//     at once (a dead letter, a parked or delayed message, a delete per
//     handled message): concurrent calls share one transaction and one
//     fsync, and fn may run more than once.
//   - [Store.View] runs fn in a read-only transaction, which neither
//     blocks writers nor waits for them. The write methods of Tx fail in
//     it.
//
// A Store opened with [Options.ReadOnly] allows View only. It changes
// nothing in the file, and it can read the file of a running service:
// bbolt locks a file opened for writing exclusively, so the read-only
// Open then reads a consistent copy (see [Options.ReadOnly]); this is
// what the CLI's inspect, dead list and dead show use.
//
// A read on the delivery path ([Tx.LoadPending], [Tx.DueDelayed],
// [Tx.Parked], [Tx.ParkedKeys]) skips a record that fails to decode and
// reports it; the caller moves it with [Tx.Quarantine] in a write
// transaction, so that it cannot stall delivery (see below).
//
// # Fast paths on Store
//
// Store has one method of its own besides Open, Close, Path, the three
// transactions and the changelog's ([Store.SetChangelog],
// [Store.UpdateLocal], [Store.BatchLocal], [Store.ResendUnsent], see
// "Changelog" below):
// [Store.ScanPending], the re-push of the saved
// messages at start. It reads the pending bucket on a goroutine of its
// own, inside one read transaction, while the caller works through the
// records a batch at a time and writes to the file (the runtime's
// BenchmarkRepush measures it). That caller cannot run inside the read
// transaction: a write that grows the file's memory map waits for every
// read transaction to end. Everything else, counts and pages included,
// is one transaction either way and needs no path of its own.
//
// # Bucket layout
//
// [Open] creates nine top-level buckets:
//
//	pending      8-byte key     -> record   saved at shutdown, re-pushed on start
//	dead         8-byte key     -> record   dead letters
//	quarantine   8-byte key     -> quarantine entry
//	delayed      due(8) + ID    -> record   to deliver at due
//	delayed_ids  ID             -> its key in delayed
//	parked       class key seq  -> record   parked behind a dead letter
//	meta         "format"       -> 1 byte, the file format version (1 to 3; none in a file with no record yet)
//	             "feature/NAME" -> the description of a feature the records need (format 3)
//	             "group"        -> the consumer group the file belongs to ([MetaGroup])
//	             "instance"     -> the instance that last started on it ([MetaInstance])
//	             "changelog-file-id"       -> the file's 16-byte changelog ID
//	             "changelog/TOPIC/PART"    -> 8 bytes big-endian: the next changelog offset to apply
//	changelog_keys   'L' code local     -> changelog key    a restored record's key in the file it came from
//	                 'C' changelog key  -> code local       the same, the other way
//	changelog_unsent changelog key      -> 'p' | 't' uvarint(len) topic partition(4)
//	                                       a change committed locally, not in the changelog
//
// (See "Changelog" below for the last three.)
//
// Keys of pending, dead and quarantine are big-endian uint64 sequence
// numbers of their bucket, starting at 1 and never reused, so key order is
// save order. These buckets are only ever appended to, so their pages are
// filled to 100% (bbolt's FillPercent 1.0). Open refuses a file whose
// meta format is newer than 3, or lists a feature this build does not
// know (see "Format versions" below).
//
// A delayed key ([DelayedKey]) is the due time as 8 bytes of big-endian
// Unix nanoseconds, clamped to [0, 2^63-1], followed by the message ID,
// so a cursor meets records in due order (by ID within one nanosecond)
// and the scheduler reads only what is due. delayed_ids maps each
// waiting ID to its delayed key: a second record with the same ID is not
// stored while the first waits. A message ID may not be empty.
//
// A parked key ([ParkedKey]) is
//
//	uvarint(len(class)) class uvarint(len(key)) key seq
//
// where seq is 8 bytes of big-endian sequence number of the parked bucket.
// Lengths are in their shortest uvarint form. The (class, key) part of
// one ordering key is never a prefix of another's, so the records parked
// under one (class, key) are contiguous and in park order. A nil and an
// empty message key are the same ordering key.
//
// # Changelog
//
// A Store can mirror its record buckets to a changelog, a compacted
// Kafka topic per input topic whose partition p holds the state of input
// partition p, as Kafka Streams does for its stores; this package knows
// nothing of Kafka: [Store.SetChangelog] takes a [Changelog] of two
// funcs, Route (the input partition of a record; false keeps it local)
// and Send. Until SetChangelog is called nothing is captured, and a
// transaction with capture off allocates nothing for it.
//
// Keys and values. A changelog key is
//
//	version(1) code(1) file ID(16) local key
//
// where code is 'p' pending, 'd' dead, 'l' delayed or 'k' parked, the
// file ID is 16 random bytes SetChangelog creates once per file (meta
// "changelog-file-id"), and the local key is the record's key in its
// bucket ([ParseChangelogKey] parses one). The value is the stored
// record, byte for byte; a delete is a tombstone (nil value). Code 'o'
// is a partition's [Progress] ([Tx.PutProgress]), under a zero file ID
// and the partition (4 bytes big-endian) as its local key, so that the
// latest one of a partition replaces the others whichever file wrote it;
// [Tx.ApplyChangelog] keeps the last one it reads in the meta bucket.
//
// Capture. Every write method of [Tx] that puts or deletes a record of
// those four buckets (the Save, Put and Delete methods, RequeueDead,
// Park, RenameClass) records a [Change] in the transaction: a put is
// routed by the record written, a delete by the record deleted (read
// before the delete; one that does not decode stays local, as does
// Quarantine's removal of an undecodable value). After the commit, the
// Store calls Send with the transaction's changes (a Batch group's in
// one Send), in commit order: a lock of the Store is taken before the
// bbolt transaction begins and released once Send has returned. Update
// and Batch then call the wait Send returned, outside the lock; when it
// fails they return a [*ChangelogError] (wrapping [ErrChangelog]): the
// transaction did commit locally, and the Store records its changes in
// changelog_unsent in a follow-up transaction. [Store.UpdateLocal] is a
// transaction that sends nothing and records its changes there itself
// ([Store.BatchLocal] the same, shared with concurrent callers as Batch
// is);
// [Store.ResendUnsent] sends them (a put with the record's current
// value; a put of a record since deleted is skipped, its delete having
// been captured too) and clears them. The internal buckets
// (changelog_keys, changelog_unsent, meta) are never sent. Writes made
// with capture off (an offline CLI without SetChangelog) are not in the
// changelog.
//
// Restore. [Tx.ApplyChangelog] applies one input partition's changelog
// records, in offset order, and stores the next offset to read as that
// partition's checkpoint in the same transaction; what it writes is not
// captured, but for the tombstones of displaced delayed records (below).
// The last record of a changelog key wins, so compaction changes
// nothing. A record this file wrote ([ChangelogRecord].Writer, or its
// own key without a writer) changes nothing, but a tombstone of its own
// key deletes the local record. Another file's put of this file's own
// key (an update of a record restored there) replaces the local record,
// if there is one (a put never brings back a record this file deleted:
// its tombstone is on its way). A put of another file's key inserts a
// record under a fresh local key (pending and dead letters, and parked
// records behind the local ones of their (class, key), in their order of
// origin: input messages by their offsets, the others in their original
// order; delayed records under their own key) and maps it both ways in
// changelog_keys. Later records of a mapped key replace or delete the
// restored record. One delayed record per message ID stays: the one
// saved first, or one saved after a local record whose message is
// running or done ([Store.SetDelayedHandedOver]); the others are deleted
// and their keys tombstoned with the transaction's capture.
//
// Identity. A changelog key is a record's identity
// ([Tx.RecordIdentity]): the key of the file that created it. When this
// file changes a restored record, the change is written under that key,
// with this file's ID as its Writer: a put in place (PutDead, PutParked,
// PutPending, PutDelayed, RenameClass) sends the record under the mapped
// key, which stays mapped; a delete sends a tombstone of it and removes
// the mapping. So the record keeps its identity and its place in its
// key's order wherever it is restored next. A stalled previous owner's
// late tombstone of the key deletes the record (it finished or moved the
// message), and a late put of it replaces it, or brings it back where it
// was deleted: a duplicate, never a loss. (Earlier versions re-keyed a
// restored record at its first update, under the updating file's ID with
// a tombstone of the mapped key; their changelogs restore in order too.)
//
// Ownership. One more key lives in every changelog partition: the owner
// marker ([OwnerMarker], key "\x02owner", not a record key, so a build
// that knows no markers skips it as undecodable), whose value names the
// file that last began owning the partition. The file remembers the
// latest marker it read or wrote per partition (meta
// "changelog-owner/<topic>/<partition>", [Tx.ChangelogOwner]). When
// another file owned the partition since, the runtime rebuilds it:
// [Tx.RebuildChangelog] deletes the file's records of the partition and
// applies the whole changelog as to an empty file (the file's own keys
// too are inserted under fresh local keys and mapped), keeping only what
// the file has not sent yet (changelog_unsent).
//
// Records the changelog never saw. A file written with capture off (the
// runtime's LocalStateOnly, or 0.2.0) is sent whole once by
// [Store.SendUnlogged] at its first start with the changelog, which then
// marks it (meta "changelog-complete"); [Store.ClearChangelogComplete],
// at a start without the changelog, removes the mark.
//
// Files with changelog bookkeeping. The changelog buckets and meta keys
// need no format feature: a build that predates them (0.2.0) ignores
// unknown buckets and meta keys and reads every record as before; it
// just does not capture, and a record it deletes keeps a stale mapping,
// which this build drops when it meets it. SetChangelog's file ID makes
// a file non-empty ([Tx.Empty]): the runtime checks Empty, for its
// new-file check, before it calls SetChangelog.
//
// # Record format
//
// A record (a [Record] in the pending, dead, delayed or parked bucket) is
// encoded as its fields, one after another with no padding (format 2,
// what this package writes):
//
//	version      1 byte, 2
//	id           string   Message.ID
//	class        string   Message.Class
//	key          bytes    Message.Key
//	value        bytes    Message.Value
//	headers      uvarint  0 for a nil Headers, else len(Headers)+1,
//	             then for each header: key string, value bytes
//	topic        string   Message.Origin.Topic
//	partition    varint   Message.Origin.Partition
//	offset       varint   Message.Origin.Offset
//	timestamp    time     Message.Timestamp (format 2 on)
//	attempt      varint   Message.Attempt
//	first seen   time     Message.FirstSeen
//	reason       string   Record.Reason
//	error        string   Record.Err
//	first failed time     Record.FirstFailed
//	redeliveries varint   Record.Redeliveries
//	saved at     time     Record.SavedAt
//
// with
//
//	uvarint  encoding/binary unsigned varint (binary.AppendUvarint)
//	varint   encoding/binary zig-zag signed varint (binary.AppendVarint)
//	string   uvarint length, then the bytes
//	bytes    uvarint 0 for nil, else length+1, then the bytes; so nil and
//	         empty stay apart
//	time     1 byte 0 for the zero time.Time; else 1 byte 1, varint Unix
//	         seconds, uvarint nanoseconds (below 1e9)
//
// The record ends after the saved-at time: trailing bytes are an error.
// Times are kept to the nanosecond for any year, but not their location
// or monotonic reading: they decode in UTC.
//
// # Format versions
//
// Each record starts with its own format version; the meta bucket's
// "format" names the newest format a record in the file needs:
//
//	1  the layout above without the timestamp (handoff before record
//	   timestamps); decodes with a zero Message.Timestamp
//	2  adds the timestamp after the offset
//	3  the file also lists, under meta keys "feature/NAME", the features
//	   its records need (each with a description written by the version
//	   that wrote the first such record); a reader must know every one
//
// The decoder reads every version from the oldest on, so a file keeps
// working across an upgrade without a migration: its old records stay as
// they are until they are rewritten (saved again, requeued, moved), and
// new ones are written in the newest format. The mark is raised by the
// transaction that writes the first record needing it, never by Open: a
// file a newer build only opened (or wrote records into that an older
// build reads too) stays readable by the older build, so a rollback
// starts and loses nothing. A file with records an older build cannot
// read is refused by it with an error naming them: a build that reads
// formats up to 2 says "unsupported file format 03"; from format 3 on, a
// *FormatError (wrapping ErrNewerFormat) names each unknown feature and
// its description. A read-only Open marks nothing. testdata/v1.state is
// a file written by the format-1 code, and TestReadV1File reads it.
//
// To add a feature (a new bucket, a new kind of record, a field an older
// build would misread): declare a feature (name and a description that
// says which records need it and since which version), add it to
// knownFeatures, and call Tx.needFeature in every transaction that writes
// such a record, before the write. Older builds from format 3 on then
// name it; TestFeatureNamedByOlderReader shows the check.
//
// To add record format N+1 (new fields in every record): add its
// constant in record.go and make it recordVersion (the encoder's); add
// its fields to appendRecord and maxEncodedSize, and read them in
// decodeOwned under "if version >= N+1" so that older versions still
// decode (give the new fields a zero value for them); raise
// recordsFormat (and fileFormat) in format.go; before changing the
// encoder, write a fixture with the current code into testdata (as
// v1.state was), and add a test like TestReadV1File for it and its
// values to FuzzDecodeRecord's seeds (v1Values does it for format 1);
// describe the version in the list above. A format is never read
// differently once released: the version byte of a record says exactly
// how it was written. Prefer a feature: a new record format makes every
// record the newer build writes unreadable to the older one.
//
// # Quarantine entry format
//
// [Tx.Quarantine] (and [Store.ScanPending] for its own) moves a value of
// the pending, delayed or parked bucket that fails to decode (or sits
// under a key of the wrong shape) into the quarantine bucket as
//
//	version      1 byte, 1
//	bucket       string   the bucket it came from
//	key          string   its key there, as raw bytes
//	error        string   the decode error text
//	at           time     when it was moved
//	raw          the original value, to the end of the entry
//
// using the encodings above. [Tx.Quarantined] lists them.
//
// The admin readers ([Tx.DeadPage], [Tx.GetDead], [Tx.ListDelayed]) only
// report such values as [*DecodeError]s, and dead letters are never
// quarantined.
//
// # Decoding invariants
//
// The decoders of records (of every format version), quarantine entries
// and parked keys, checked by FuzzDecodeRecord (seeded with records of
// format 1 and 2), FuzzDecodeQuarantined and FuzzParkedKey: they never
// panic on any input; every failure of the record and parked key
// decoders wraps [ErrCorrupt]; what they return shares no memory with
// their input (bbolt memory is only valid inside its transaction); and
// what decodes encodes back to bytes that decode to an equal value (for
// a parked key, to the very same bytes).
//
// # Who knows the format
//
// Only this package. Its encoders and decoders are unexported rather
// than moved to an internal package: nothing else in the module needs
// them (the CLI reads and changes a state file through [Open] and [Tx],
// as the runtime does), and an internal codec package would need
// [Record], the API's value type. It could not import Record from
// snapshot, which would import the codec back (a cycle), and Record
// cannot move to internal/, where users could not name it. The names of
// the buckets that hold records stay exported because the API names
// them: they are the keys of [Tx.Counts] and the Bucket of a
// [DecodeError] or a [Quarantined] entry, and the CLI prints them. The
// ID index, meta and changelog bookkeeping buckets hold no records and
// are unexported.
// [MetaGroup] and [MetaInstance] stay exported: the runtime owns what
// they mean and writes them with [Tx.PutMeta].
package store
