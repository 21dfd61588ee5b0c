package handoff

import (
	"context"
	"strconv"
	"time"
)

// Message is the source-independent envelope a handler receives.
//
// What a handler may keep: everything, unless its class recycles its
// messages (runtime.Class.RecycleMessages; then see below). The runtime
// never writes to a Message it handed to a handler, its ID or the bytes
// of its Key, Value and Headers after the handler returns (a retry is
// handed a copy with Attempt+1); so a handler may keep m, or any field of
// it, for as long as it likes (a dedup set of m.ID, a batch of *Message
// flushed later), at the cost of the memory it keeps, which is more than
// its own bytes:
//
//   - The Messages of the records handed on together from one
//     partition's fetch (at most 64) are allocated together, as the Kafka
//     clients allocate their records: a kept *Message keeps the others
//     of its batch alive, with what they refer to.
//   - On franz-go (runtime.ClientFranzGo, the default) Key, Value and
//     header values are slices of the fetch response they came in, as
//     franz-go hands them out: a kept Value keeps that response alive
//     (at most 3 MiB, the runtime's fetch size on franz-go). On kafka-go
//     a record's Key and Value are copied into a block of 16 KiB that the
//     records fetched with it share (no pointers; a record of more than
//     4 KiB gets bytes of its own): a kept Key or Value keeps that block
//     alive. Each header value is a slice of its own.
//   - The ID of a Kafka record shares a block of about 1 KiB of bytes
//     (no pointers) with the IDs of the records fetched with it.
//
// To keep a few messages out of many, copy what you keep (bytes.Clone
// for a Value, strings.Clone for an ID, and a Message with both for the
// envelope). A handler must not write to a Message either: the runtime
// saves the envelope it handed out (a stop's snapshot, a dead letter),
// and a retry of the same message is handed the same Key, Value and
// Headers. (A middleware that replaces the headers with
// runtime.SetHeaders changes those of the Message it was handed, which
// is the envelope the runtime saves, not those of Messages handed out
// earlier.)
//
// In a class that recycles its messages, the runtime writes a later
// message into the Message a handler was handed once that message is
// done: nothing may keep the *Message (or a pointer into it) past the
// call. Its fields stay valid: a copy of the struct (kept := *m), its ID
// and the bytes of its Key, Value and Headers are never reused.
//
// A message that came from Kafka carries its [Origin] and the record's
// Timestamp; one handed in with the runtime's Submit has a zero Origin
// and a caller-given ID. Everything the state file stores is this
// envelope, so a message re-pushed after a restart looks to its handler
// exactly like a fresh one except for Attempt.
//
// Nil and empty stay apart, for Key, Value and each header's Value, as
// Kafka keeps them: a record produced without a key has a nil Key, one
// with a zero-length key an empty non-nil Key. A tombstone (a record
// with a null value, which a compacted topic reads as a delete) arrives
// with a nil Value; a record whose value is zero bytes long arrives with
// an empty non-nil Value. The state file, the dead-letter topic and the
// CLI's replay keep the difference too.
type Message struct {
	// ID is stable across restarts: "topic/partition/offset" for a Kafka
	// record, the caller's ID otherwise. The IDs of Kafka records share
	// blocks of about 1 KiB (see above).
	ID string

	// Class names the message class (and so the pool) that handles it.
	Class string

	// Key is the record key: nil for a record without a key, empty for
	// a zero-length key.
	Key []byte

	// Value is the record value: nil for a null value (a tombstone),
	// empty for a zero-length value.
	Value []byte

	// Headers are the record headers, in their original order; nil when
	// the record has none. A header's Value is nil for a null header
	// value, empty for a zero-length one. A middleware may replace them
	// for the message's next steps with runtime.SetHeaders (a tracing
	// middleware carries an attempt's context to the next attempt so);
	// never write into this slice's array, which may be shared.
	Headers []Header

	// Origin says where the message was read from; zero when it was not
	// read from Kafka.
	Origin Origin

	// Timestamp is the record's timestamp, to the millisecond, in UTC:
	// the time its producer set (CreateTime). There is no timestamp type:
	// kafka-go's decoder gives neither a batch's timestamp type nor its
	// max timestamp, which is where Kafka puts the append time of a topic
	// with message.timestamp.type=LogAppendTime; on such a topic
	// Timestamp is still the producer's time. It is kept across
	// restarts, dead letters and replays (a dead letter published to its
	// topic and a replayed record carry it as their timestamp). Zero when
	// the message was not read from Kafka, the record has none (-1), or
	// it was saved by a handoff whose state file had no timestamps
	// (format 1).
	Timestamp time.Time

	// Attempt counts the attempts that already failed: zero on the first
	// delivery. An attempt cut short by a stop is not counted.
	Attempt int

	// FirstSeen is when handoff first saw the message (fetched or
	// submitted). It is kept across restarts.
	FirstSeen time.Time
}

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// Origin is the Kafka position a message was read from.
type Origin struct {
	Topic     string
	Partition int
	Offset    int64
}

// IsKafka reports whether the origin names a Kafka record.
func (o Origin) IsKafka() bool { return o.Topic != "" }

// String returns "topic/partition/offset", or "" for a zero Origin.
func (o Origin) String() string {
	if !o.IsKafka() {
		return ""
	}
	return o.Topic + "/" + strconv.Itoa(o.Partition) + "/" + strconv.FormatInt(o.Offset, 10)
}

// HandlerFunc handles one message. Returning nil marks it done; returning
// an error marks it failed (see [Permanent]). The context is cancelled,
// with a cause, when the runtime's hard stop begins; a handler that returns
// an error after that is not failed but interrupted: its message is saved
// and handled again after the restart.
type HandlerFunc func(ctx context.Context, m *Message) error
