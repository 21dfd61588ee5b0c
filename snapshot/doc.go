// Package snapshot is the embedded durable store of handoff: one bbolt
// state file per service instance, holding the messages saved at shutdown
// (pending), the dead letters, and the stored values that could not be
// decoded (quarantine).
//
// It knows nothing of Kafka or of the runtime. Every write is one bbolt
// transaction that is fsynced before the call returns, so a record is
// durable exactly when the call that wrote it returned nil. A [Store] is
// safe for concurrent use.
//
// # Bucket layout
//
// [Open] creates four top-level buckets:
//
//	pending     8-byte key -> record   saved at shutdown, re-pushed on start
//	dead        8-byte key -> record   dead letters
//	quarantine  8-byte key -> quarantine entry
//	meta        "format"   -> 1 byte, the file format version (1)
//
// Keys of pending, dead and quarantine are big-endian uint64 sequence
// numbers of their bucket, starting at 1 and never reused, so key order is
// save order. A bucket is only ever appended to, so pages are filled to
// 100% (bbolt's FillPercent 1.0). Open refuses a file whose meta format is
// not 1.
//
// # Record format
//
// A record (a [Record] in the pending or dead bucket) is written by
// [AppendRecord] and read by [DecodeRecord]. Its fields follow one
// another with no padding:
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
// [Store.LoadPending] moves a pending value that fails to decode into the
// quarantine bucket as
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
// # Decoding invariants
//
// Both decoders, checked by FuzzDecodeRecord and FuzzDecodeQuarantined:
// they never panic on any input; every failure of DecodeRecord wraps
// [ErrCorrupt]; what they return shares no memory with their input (bbolt
// memory is only valid inside its transaction); and a record that decodes
// encodes back to bytes that decode to an equal record.
package snapshot
