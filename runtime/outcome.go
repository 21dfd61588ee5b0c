package runtime

import "sync/atomic"

// outcome names a counted result of handling; see [Report].
type outcome int

const (
	outSucceeded outcome = iota
	outRetried
	outDeadLettered
	outRedelivered
	outParked
	outReleased
	outDeferred
	outScheduled
	outDelivered
	outRequeued
	outRequeuedDone
	outDiscarded
	outPublished
	outUnpublished
	outHeld
	numOutcomes
)

// outcomeNames are the outcome label values of handoff_messages_total.
var outcomeNames = [numOutcomes]string{"succeeded", "retried", "dead_lettered", "redelivered", "parked", "released",
	"deferred", "scheduled", "delivered", "requeued", "requeued_done", "discarded", "published", "unpublished", "held"}

// counters are outcome counts, runtime-wide and per class.
type counters [numOutcomes]atomic.Uint64

// inc counts one o.
func (n *counters) inc(o outcome) { n[o].Add(1) }

// tally is the runtime's outcome counts: each class's own (class.stats)
// and those of messages of no configured class. Its methods are safe for
// concurrent use.
type tally struct {
	none    counters
	classes []*class // in config order
}

// inc counts one o for class c (nil when the class is not configured).
// Each count lands in one place, the class's counters or, without a
// class, the tally's own: one atomic add per outcome on the hot path.
func (t *tally) inc(c *class, o outcome) {
	if c != nil {
		c.stats[o].Add(1)
	} else {
		t.none[o].Add(1)
	}
}

// total returns the runtime-wide count of o: every class's and those
// without a class.
func (t *tally) total(o outcome) uint64 {
	n := t.none[o].Load()
	for _, c := range t.classes {
		n += c.count(o)
	}
	return n
}

// handled counts the messages that left the pools for good so far.
func (t *tally) handled() uint64 {
	return t.total(outSucceeded) + t.total(outDeadLettered) + t.total(outRedelivered) +
		t.total(outParked) + t.total(outDeferred)
}

// fill copies the counts into rep.
func (t *tally) fill(rep *Report) {
	rep.Succeeded, rep.Retried, rep.DeadLettered, rep.Redelivered = t.total(outSucceeded), t.total(outRetried), t.total(outDeadLettered), t.total(outRedelivered)
	rep.Parked, rep.Released, rep.Deferred, rep.Scheduled = t.total(outParked), t.total(outReleased), t.total(outDeferred), t.total(outScheduled)
	rep.Delivered, rep.Requeued, rep.Discarded, rep.Published = t.total(outDelivered), t.total(outRequeued), t.total(outDiscarded), t.total(outPublished)
	rep.Unpublished, rep.Held = t.total(outUnpublished), t.total(outHeld)
}

// count returns the class's count of o. Successes are the pool's count:
// every handler that returned nil is one (the result callback settles it),
// and the pool counts them under the lock it takes anyway, so the hot
// path has no counter of its own to write.
func (c *class) count(o outcome) uint64 {
	if o == outSucceeded {
		return c.pool.Stats().Succeeded
	}
	return c.stats[o].Load()
}
