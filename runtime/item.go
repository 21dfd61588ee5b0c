package runtime

import (
	"strconv"
	"sync"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// source says where a message in a pool came from, and so what must be
// done with that origin when the message is done or saved elsewhere.
type source uint8

const (
	fromKafka   source = iota // settle its offset in tr
	fromSubmit                // nothing to clean up
	fromPending               // delete pending record key
	fromDelayed               // delete delayed record delayedKey
	fromParked                // delete parked record parkedKey
	fromDead                  // a requeued dead letter: delete dead record key
)

// persisted reports whether the message has a record in the state file.
func (s source) persisted() bool { return s >= fromPending }

// item is what a pool carries: the message and its bookkeeping.
type item struct {
	msg handoff.Message
	src source
	// tr and seq place a Kafka message in its partition's tracker.
	tr  *tracker
	seq uint64
	// key of the record the message came from (fromPending, fromDead).
	key        uint64
	delayedKey snapshot.DelayedKey
	parkedKey  snapshot.ParkedKey

	// firstFailed and redeliveries carry the failure history.
	firstFailed  time.Time
	redeliveries int
	// verdict and wait are set by the retry decision for the result.
	verdict verdict
	wait    time.Duration
	// release, when set, is told when the item leaves the pool: done,
	// failed, or parked again. It belongs to release relGen of its key.
	release *sync.WaitGroup
	relGen  uint64
}

func itemKey(it *item) string { return string(it.msg.Key) }

// record returns the item as a state-file record.
func (it *item) record(reason string, err error, now time.Time) snapshot.Record {
	rec := snapshot.Record{Message: it.msg, Reason: reason, SavedAt: now, FirstFailed: it.firstFailed, Redeliveries: it.redeliveries}
	if err != nil {
		rec.Err = err.Error()
	}
	return rec
}

// fromRecord makes an item of a stored record.
func fromRecord(rec snapshot.Record, src source) *item {
	return &item{msg: rec.Message, src: src, firstFailed: rec.FirstFailed, redeliveries: rec.Redeliveries}
}

// kafkaIDPrefix returns "topic/partition/": a Kafka record's stable ID is
// that prefix and its offset, so one partition's records share it.
func kafkaIDPrefix(topic string, partition int) []byte {
	b := make([]byte, 0, len(topic)+24)
	b = append(b, topic...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(partition), 10)
	return append(b, '/')
}
