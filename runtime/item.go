package runtime

import (
	"strconv"

	"github.com/handoff-go/handoff"
)

// item is what a pool carries: the message and where to report its end.
type item struct {
	msg handoff.Message
	// tr and seq place a Kafka message in its partition's tracker; tr is
	// nil for a submitted or re-pushed message.
	tr  *tracker
	seq uint64
	// pendingKey is the key of the message's record in the pending bucket
	// when it was re-pushed from the state file, zero otherwise.
	pendingKey uint64
}

func itemKey(it *item) string { return string(it.msg.Key) }

// kafkaID is the stable ID of a Kafka record: topic/partition/offset.
func kafkaID(topic string, partition int, offset int64) string {
	b := make([]byte, 0, len(topic)+24)
	b = append(b, topic...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(partition), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, offset, 10)
	return string(b)
}
