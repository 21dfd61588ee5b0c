// Package snapshot is the embedded durable store of handoff: one bbolt
// state file per service instance, holding the messages saved at shutdown
// (pending), the dead letters, the messages to deliver later (delayed),
// the messages parked behind a dead letter of their ordering key
// (parked), and the stored values that could not be decoded (quarantine).
//
// It knows nothing of Kafka or of the runtime. Every write is one bbolt
// transaction that is fsynced before the call returns, so a record is
// durable exactly when the call that wrote it returned nil. Several
// writes that must happen together (save a dead letter and delete its
// pending record) go in one [Store.Update] through the methods of [Tx].
// A [Store] is safe for concurrent use.
//
// # Bucket layout
//
// [Open] creates seven top-level buckets:
//
//	pending      8-byte key     -> record   saved at shutdown, re-pushed on start
//	dead         8-byte key     -> record   dead letters
//	quarantine   8-byte key     -> quarantine entry
//	delayed      due(8) + ID    -> record   to deliver at due
//	delayed_ids  ID             -> its key in delayed
//	parked       class key seq  -> record   parked behind a dead letter
//	meta         "format"       -> 1 byte, the file format version (1)
//	             "group"        -> the consumer group the file belongs to
//	             "instance"     -> the instance name that last started on it
//
// Keys of pending, dead and quarantine are big-endian uint64 sequence
// numbers of their bucket, starting at 1 and never reused, so key order is
// save order. These buckets are only ever appended to, so their pages are
// filled to 100% (bbolt's FillPercent 1.0). Open refuses a file whose
// meta format is not 1.
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
// # Record format
//
// A record (a [Record] in the pending, dead, delayed or parked bucket)
// is written by [AppendRecord] and read by [DecodeRecord]. Its fields
// follow one another with no padding:
//
//	version      1 byte, 1
//	id           string   Message.ID
//	class        string   Message.Class
//	key          bytes    Message.Key
//	value        bytes    Message.Value
//	headers      uvarint  0 for a nil Headers, else len(Headers)+1,
//	             then for each header: key string, value bytes
//	topic        string   Message.Origin.Topic
//	partition    varint   Message.Origin.Partition
//	offset       varint   Message.Origin.Offset
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
// # Quarantine entry format
//
// The readers on the delivery path, [Store.LoadPending],
// [Store.ScanPending], [Store.DueDelayed], [Store.Parked] and
// [Store.ParkedKeys], move a value that fails to decode (or a key of the
// wrong shape) into the quarantine bucket, so that it cannot stall
// delivery, as
//
//	version      1 byte, 1
//	bucket       string   the bucket it came from
//	key          string   its key there, as raw bytes
//	error        string   the decode error text
//	at           time     when it was moved
//	raw          the original value, to the end of the entry
//
// using the encodings above. [Store.Quarantined] lists them.
//
// The admin readers ([Store.Dead], [Store.DeadPage], [Store.GetDead],
// [Store.ListDelayed]) only read and report such values as
// [*DecodeError]s.
//
// # Decoding invariants
//
// The decoders of records, quarantine entries and parked keys, checked by
// FuzzDecodeRecord, FuzzDecodeQuarantined and FuzzParkedKey: they never
// panic on any input; every failure of DecodeRecord and of the parked
// key decoder wraps [ErrCorrupt]; what they return shares no memory with
// their input (bbolt memory is only valid inside its transaction); and
// what decodes encodes back to bytes that decode to an equal value (for
// a parked key, to the very same bytes).
package snapshot
