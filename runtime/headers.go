package runtime

import (
	"fmt"
	"time"

	"github.com/handoff-go/handoff"
)

// HeaderDeliverAt is the Kafka record header that asks for delivery at a
// later time. Its value is an RFC 3339 timestamp, fractional seconds
// allowed ("2026-12-01T08:00:00Z", "2026-12-01T09:00:00.5+01:00"). A record
// with a time in the future is stored in the state file's delayed bucket
// (its offset committed) and handed to its class when due; a time in the
// past means now. A value that does not parse makes the record a dead
// letter.
const HeaderDeliverAt = "handoff-deliver-at"

// Headers of a dead letter published to a class's DeadLetterTopic.
const (
	HeaderOriginTopic     = "handoff-origin-topic"
	HeaderOriginPartition = "handoff-origin-partition"
	HeaderOriginOffset    = "handoff-origin-offset"
	HeaderAttempts        = "handoff-attempts"
	HeaderError           = "handoff-error"
	HeaderClass           = "handoff-class"
	HeaderID              = "handoff-id"
	// HeaderDropped is on a dead letter published as the class's
	// retention drops it from the state (Class.DeadLetterRetention,
	// Class.MaxDeadLetters): "age" or "count". The same dead letter may
	// have been published without it when it failed.
	HeaderDropped = "handoff-dead-letter-dropped"
)

// deliverAt returns the time the message's HeaderDeliverAt asks for, and
// whether it has one.
func deliverAt(m *handoff.Message) (time.Time, bool, error) {
	for _, h := range m.Headers {
		if h.Key != HeaderDeliverAt {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, string(h.Value))
		if err != nil {
			return time.Time{}, true, handoff.Permanent(fmt.Errorf("runtime: bad input: header %s of %s is not an RFC 3339 time: %q", HeaderDeliverAt, m.ID, h.Value))
		}
		return t, true, nil
	}
	return time.Time{}, false, nil
}
