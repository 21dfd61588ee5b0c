package runtime

import (
	"strconv"
	"sync"
	"time"
	"unsafe"

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
	// tr and slot place a Kafka message in its partition's tracker.
	tr   *tracker
	slot slot
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

// idBlockSize is the size of the blocks kafkaIDs carves IDs from: about
// 40 IDs of a 25-byte "topic/partition/offset" per allocation.
const idBlockSize = 1024

// kafkaIDs makes the IDs of one partition's records. It carves them from
// shared blocks instead of allocating a string per message: the fetch
// loop's one allocation per record otherwise. The bytes behind an ID are
// never written again once it is handed out, as unsafe.String requires.
// An ID kept after its message is handled keeps its block alive, at most
// idBlockSize bytes; the runtime copies the IDs it keeps (parking).
type kafkaIDs struct {
	prefix []byte // "topic/partition/"
	block  []byte
}

func newKafkaIDs(topic string, partition int) *kafkaIDs {
	return &kafkaIDs{prefix: kafkaIDPrefix(topic, partition)}
}

// id returns the ID of the record at offset.
func (k *kafkaIDs) id(offset int64) string {
	const maxOffsetLen = 20 // digits of the largest int64, and a sign
	if cap(k.block)-len(k.block) < len(k.prefix)+maxOffsetLen {
		k.block = make([]byte, 0, max(idBlockSize, len(k.prefix)+maxOffsetLen))
	}
	start := len(k.block)
	k.block = append(k.block, k.prefix...)
	k.block = strconv.AppendInt(k.block, offset, 10)
	return unsafe.String(&k.block[start], len(k.block)-start)
}
