package runtime

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime/internal/hold"
	"github.com/handoff-go/handoff/snapshot"
)

// item is what a pool carries: the message's envelope and its
// bookkeeping, 256 bytes (one Go size class; the envelope is 192 of
// them). What only some messages need is in its itemExt, which a fetched
// message does without until it fails. A queued message costs its item,
// its pool entry and its tracker slot besides its record's bytes (bench's
// queued-memory measure).
type item struct {
	// m is the message's envelope as it came: what its first handler is
	// handed, and what the runtime saves, until a change to the message
	// (a retry's Attempt) makes a copy (see writeEnv). Once a handler may have
	// an envelope, the runtime never writes to it again. Read the
	// envelope through env.
	m   handoff.Message
	src source
	// timed is set by a fetched message's fetch loop for one message in
	// sampleEvery: its handler calls are timed (see sample).
	timed bool
	// verdict is set by the retry decision for the result (and its wait
	// in ext).
	verdict verdict
	// unsaved is set when a move of the message to another bucket
	// failed; see failures.save.
	unsaved bool
	// diverted is set when the handler wrapper saved the message
	// elsewhere instead of running it; see Runtime.diverted.
	diverted atomic.Bool
	// head is what a fetched message shares with its batch: its
	// partition's tracker (see tracker) and, in a class that recycles its
	// messages, its slab (see recycle). slot places it in the tracker.
	head *batchHead
	slot slot
	// hold is the message's part in its class's outage detection and
	// suspension (package runtime/internal/hold).
	hold hold.Mark
	// attempt is the running attempt of a class with middleware, until
	// its outcome is told (attempt.go).
	attempt attemptSlot
	// x is the rest, nil until something is set in it: write through
	// ext, read through extOrZero.
	x *itemExt
}

// itemExt is the part of an item that a fetched message on its first
// attempt does not need: where a stored message's record is, the failure
// history, a parked key's release.
type itemExt struct {
	// msg, when set, is the message's envelope since it changed (see
	// writeEnv): m stays as the handlers before saw it.
	msg *handoff.Message

	// key of the record the message came from (fromPending, fromDead),
	// and reason that record's Reason (fromRecord).
	key        uint64
	reason     string
	delayedKey snapshot.DelayedKey
	parkedKey  snapshot.ParkedKey

	// firstFailed and redeliveries carry the failure history.
	firstFailed  time.Time
	redeliveries int
	// deleting: the message is done and its pending record's delete is
	// queued (snapshot.DoneQueue), not written yet.
	deleting bool
	// saved, for a re-pushed saved Kafka message, ties the fetched copy
	// of its offset to it (progress.go).
	saved *savedOffset
	// wait is set with item.verdict by the retry decision.
	wait time.Duration
	// release, when set, is called when the item leaves the pool: done,
	// failed, or parked again. It belongs to release relGen of its key.
	release func()
	relGen  uint64
	// share is a share class's record: its acknowledgement and lock
	// (share.go).
	share *shareAcquired
}

// tracker returns a fetched message's partition tracker, nil for
// another message.
func (it *item) tracker() *tracker {
	if it.head == nil {
		return nil
	}
	return it.head.tr
}

// env returns the message's current envelope: what a handler is handed
// and what the runtime saves.
func (it *item) env() *handoff.Message {
	if it.x != nil && it.x.msg != nil {
		return it.x.msg
	}
	return &it.m
}

// writeEnv returns the item's envelope to write in: a copy of the one the
// handlers were handed, which stays as they saw it (a handler may keep
// its *Message, see handoff.Message). The retry's Attempt and the hold's
// Uncount write through it: one allocation per failed attempt, none per
// delivery.
func (it *item) writeEnv() *handoff.Message {
	m := *it.env()
	it.ext().msg = &m
	return &m
}

// moved reports whether the item's envelope changed since it came (see
// writeEnv: a retry's Attempt, the hold's Uncount): a stored message's record
// then no longer says what it is.
func (it *item) moved() bool { return it.x != nil && it.x.msg != nil }

// ext returns the item's itemExt to write in, making it on first use.
func (it *item) ext() *itemExt {
	if it.x == nil {
		it.x = new(itemExt)
	}
	return it.x
}

// extOrZero returns a copy of the item's itemExt, zero when it has none.
func (it *item) extOrZero() itemExt {
	if it.x == nil {
		return itemExt{}
	}
	return *it.x
}

// itemKey is an ordered pool's KeyFunc: a string over the message's Key
// bytes, not a copy, for every message. The pool hashes it in the call
// and keeps only the hash (pool.Config.KeyFunc), so the string need not
// outlive the Submit that asked for it.
func itemKey(it *item) string {
	return unsafe.String(unsafe.SliceData(it.env().Key), len(it.env().Key))
}

// HoldMark returns the item's part in its class's hold.
func (it *item) HoldMark() *hold.Mark { return &it.hold }

// Uncount takes back n attempts counted in a streak that tripped its
// class's suspension, and the first failure time when none is left.
func (it *item) Uncount(n int) {
	m := it.writeEnv()
	m.Attempt -= n
	if m.Attempt <= 0 {
		m.Attempt = 0
		if it.x != nil {
			it.x.firstFailed = time.Time{}
		}
	}
}

// source says where a message in a pool came from, and so what must be
// done with that origin when the message is done, saved elsewhere or
// saved again. Its methods below are the only place that tells the
// sources apart.
type source uint8

const (
	fromKafka   source = iota // settle its offset in tr
	fromSubmit                // nothing to clean up
	fromShare                 // acknowledge its share record (share.go)
	fromPending               // delete pending record key
	fromDelayed               // delete delayed record delayedKey
	fromParked                // delete parked record parkedKey
	fromDead                  // a requeued dead letter: delete dead record key
)

// persisted reports whether the message has a record in the state file.
func (s source) persisted() bool { return s >= fromPending }

// deferrable reports whether the message's HeaderDeliverAt applies: a
// Kafka record's, whether fetched or re-pushed from the state file (saved
// unstarted at a stop before its header was looked at). A delayed,
// parked or requeued message has passed that check already.
func (it *item) deferrable() bool {
	return it.src == fromKafka || it.src == fromShare || it.src == fromPending && it.env().Origin.IsKafka()
}

// settle marks a Kafka message's offset done or persisted in its
// tracker, so the commit may pass it; other messages have no offset.
func (it *item) settle() {
	if it.src == fromKafka {
		it.tracker().settle(it.slot)
	}
}

// abandon counts a fetched message's offset abandoned in its tracker: it
// stays unsettled (Kafka delivers it again) and nothing will settle it,
// so a revoke does not wait for it. It does nothing for another message.
func (it *item) abandon() {
	if it.src == fromKafka {
		it.tracker().abandoned.Add(1)
	}
}

// source describes the record the message came from, for the state's
// moves (snapshot.Source): none for a Kafka or submitted message.
func (it *item) source() snapshot.Source {
	x := it.extOrZero()
	switch it.src {
	case fromPending:
		return snapshot.Source{From: snapshot.FromPending, Key: x.key}
	case fromDelayed:
		return snapshot.Source{From: snapshot.FromDelayed, Delayed: x.delayedKey}
	case fromParked:
		return snapshot.Source{From: snapshot.FromParked, Parked: x.parkedKey}
	case fromDead:
		return snapshot.Source{From: snapshot.FromDead, Key: x.key}
	}
	return snapshot.Source{}
}

// sourceUpdate is the overwrite of the record the message came from
// with rec (a requeued dead letter stays a dead letter: failed, keeping
// its error when rec has none).
func (it *item) sourceUpdate(rec snapshot.Record) snapshot.StopUpdate {
	if it.src == fromDead {
		rec.Reason = reasonFailed
	}
	return snapshot.StopUpdate{From: it.source(), Record: rec}
}

// Reasons recorded with saved messages.
const (
	reasonUnstarted   = "unstarted"
	reasonInterrupted = "interrupted"
	reasonBackoff     = "backoff"
	reasonFailed      = "failed"
	reasonRedelivery  = "redelivery"
	reasonScheduled   = "scheduled"
	reasonParked      = "parked"
	reasonUnknown     = "unknown class"
)

// record returns the item as a state-file record.
func (it *item) record(reason string, err error, now time.Time) snapshot.Record {
	x := it.extOrZero()
	rec := snapshot.Record{Message: *it.env(), Reason: reason, SavedAt: now, FirstFailed: x.firstFailed, Redeliveries: x.redeliveries}
	if err != nil {
		rec.Err = err.Error()
	}
	return rec
}

// fromRecord makes an item of a stored record.
func fromRecord(rec snapshot.Record, src source) *item {
	m := rec.Message
	return &item{m: m, src: src, x: &itemExt{firstFailed: rec.FirstFailed, redeliveries: rec.Redeliveries, reason: rec.Reason}}
}

// update returns the record that replaces a stored message's own (its
// attempt count moved): the message as it is now, under its record's
// Reason, which says why it is stored (a requeued dead letter, a
// redelivery: what blocks an ordered key at the next start), or under
// reason when the record had none.
func (it *item) update(reason string, now time.Time) snapshot.Record {
	if r := it.extOrZero().reason; r != "" {
		reason = r
	}
	return it.record(reason, nil, now)
}
