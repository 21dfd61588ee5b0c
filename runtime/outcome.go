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

// inc counts one o for class c (nil when the class is not configured).
// Each count lands in one place, the class's counters or, without a
// class, the runtime's own: one atomic add per outcome on the hot path.
func (r *Runtime) inc(c *class, o outcome) {
	if c != nil {
		c.stats[o].Add(1)
	} else {
		r.stats[o].Add(1)
	}
}

// total returns the runtime-wide count of o: every class's and those
// without a class.
func (r *Runtime) total(o outcome) uint64 {
	n := r.stats[o].Load()
	for _, c := range r.order {
		n += c.count(o)
	}
	return n
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
