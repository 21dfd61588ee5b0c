package runtime

import "sync/atomic"

// event names a counted step of a message's way (the outcome label of
// handoff_messages_total, a count of the [Report]); the Outcome of an
// attempt that middleware is told is another thing (attempt.go).
type event int

const (
	evSucceeded event = iota
	evRetried
	evDeadLettered
	evRedelivered
	evParked
	evReleased
	evDeferred
	evScheduled
	evDelivered
	evRequeued
	evRequeuedDone
	evDiscarded
	evPublished
	evUnpublished
	evHeld
	numEvents
)

// eventNames are the outcome label values of handoff_messages_total.
var eventNames = [numEvents]string{"succeeded", "retried", "dead_lettered", "redelivered", "parked", "released",
	"deferred", "scheduled", "delivered", "requeued", "requeued_done", "discarded", "published", "unpublished", "held"}

// counters are event counts, per class and of no class.
type counters [numEvents]atomic.Uint64

// inc counts one o.
func (n *counters) inc(o event) { n[o].Add(1) }

// tally is the runtime's event counts: each class's own (class.stats)
// and those of messages of no configured class. Its methods are safe for
// concurrent use.
type tally struct {
	none    counters
	classes []*class // in config order
}

// inc counts one o for class c (nil when the class is not configured).
// Each count lands in one place, the class's counters or, without a
// class, the tally's own: one atomic add per event on the hot path.
func (t *tally) inc(c *class, o event) {
	if c != nil {
		c.stats[o].Add(1)
	} else {
		t.none[o].Add(1)
	}
}

// total returns the runtime-wide count of o: every class's and those
// without a class.
func (t *tally) total(o event) uint64 {
	n := t.none[o].Load()
	for _, c := range t.classes {
		n += c.count(o)
	}
	return n
}

// handled counts the messages that left the pools for good so far.
func (t *tally) handled() uint64 {
	return t.total(evSucceeded) + t.total(evDeadLettered) + t.total(evRedelivered) +
		t.total(evParked) + t.total(evDeferred)
}

// fill copies the counts into rep.
func (t *tally) fill(rep *Report) {
	rep.Succeeded, rep.Retried, rep.DeadLettered, rep.Redelivered = t.total(evSucceeded), t.total(evRetried), t.total(evDeadLettered), t.total(evRedelivered)
	rep.Parked, rep.Released, rep.Deferred, rep.Scheduled = t.total(evParked), t.total(evReleased), t.total(evDeferred), t.total(evScheduled)
	rep.Delivered, rep.Requeued, rep.Discarded, rep.Published = t.total(evDelivered), t.total(evRequeued), t.total(evDiscarded), t.total(evPublished)
	rep.Unpublished, rep.Held = t.total(evUnpublished), t.total(evHeld)
}

// count returns the class's count of o. Successes are the pool's count:
// every handler that returned nil is one (the result callback settles it),
// and the pool counts them under the lock it takes anyway, so the hot
// path has no counter of its own to write.
func (c *class) count(o event) uint64 {
	if o == evSucceeded {
		return c.pool.Stats().Succeeded
	}
	return c.stats[o].Load()
}
