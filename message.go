package handoff

import (
	"context"
	"strconv"
	"time"
)

// Message is the source-independent envelope a handler receives.
//
// A message that came from Kafka carries its [Origin]; one handed in with
// the runtime's Submit has a zero Origin and a caller-given ID. Everything
// the state file stores is this envelope, so a message re-pushed after a
// restart looks to its handler exactly like a fresh one except for
// Attempt.
//
// A handler may read a Message concurrently with nothing else; it must not
// keep m, or its Key, Value or Headers, after it returns without copying
// them: the runtime reuses the envelope of a handled Kafka message.
type Message struct {
	// ID is stable across restarts: "topic/partition/offset" for a Kafka
	// record, the caller's ID otherwise. The IDs of Kafka records share
	// memory blocks of about 1 KiB: an ID kept after the handler returns
	// keeps its block alive, so copy it (strings.Clone) to keep a few out
	// of many.
	ID string

	// Class names the message class (and so the pool) that handles it.
	Class string

	// Key is the record key. Nil and empty are kept apart, as Kafka does.
	Key []byte

	// Value is the record value.
	Value []byte

	// Headers are the record headers, in their original order. A
	// middleware may replace them for the message's next steps with
	// runtime.SetHeaders (a tracing middleware carries an attempt's
	// context to the next attempt so); never write into this slice's
	// array, which may be shared.
	Headers []Header

	// Origin says where the message was read from; zero when it was not
	// read from Kafka.
	Origin Origin

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
