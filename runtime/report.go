package runtime

import (
	"fmt"
	"time"
)

// Report tells what one [Runtime.Run] did. Counts are messages.
type Report struct {
	// Repushed is how many messages of the state file were handed to
	// their pools at start, before the first fetch.
	Repushed int
	// Quarantined is how many records of the state file could not be
	// decoded at start and were moved to the quarantine bucket.
	Quarantined int
	// UnknownClass is how many saved messages named a class that no
	// longer exists; they became dead letters.
	UnknownClass int

	// BlockedKeys is how many keys of ordered classes were blocked (behind
	// a dead letter or a redelivery) or releasing at start.
	BlockedKeys int

	// Outcomes over the whole run. Succeeded: handled. Retried: retries
	// in place. DeadLettered: saved as dead letters (failed for good,
	// bad input, unknown class). Redelivered: stored for a delayed
	// redelivery. Parked: saved behind a blocked key; Released: parked
	// messages handed back to their pool. Deferred: Kafka records stored
	// until their deliver-at header's time; Scheduled: messages stored by
	// Runtime.Schedule; Delivered: delayed messages handed to their pool
	// when due. Requeued, Discarded: dead letters requeued or discarded
	// through the API. Published: dead letters sent to a dead-letter
	// topic.
	Succeeded, Retried, DeadLettered, Redelivered, Parked, Released,
	Deferred, Scheduled, Delivered, Requeued, Discarded, Published uint64

	// Drained is how many messages finished during the drain phase.
	Drained uint64
	// DrainTimedOut is true when the drain ended at DrainTimeout (or a
	// second signal) with work left.
	DrainTimedOut bool
	// Snapshotted is how many messages were saved to the state file at
	// the stop: Unstarted plus Waiting plus Interrupted, less those that
	// were already there because they had been re-pushed and those given
	// back (GivenBack).
	Snapshotted int
	// GivenBack is how many Kafka messages of [StopRedeliver] classes the
	// stop left unsaved and uncommitted (of Unstarted, Waiting and
	// Interrupted): the partition's next owner reads them again.
	GivenBack int
	// Revoked is how many unstarted Kafka messages rebalances took out of
	// the pools and gave back to their partitions' next owners.
	Revoked int
	// Unstarted is how many messages were taken out of the pools unstarted.
	Unstarted int
	// Waiting is how many were waiting out a retry backoff; they are saved
	// with their attempt count.
	Waiting int
	// Interrupted is how many handlers were cut short by the hard stop
	// (they will run again after the restart). Stragglers of them had not
	// returned by HardStopGrace.
	Interrupted int
	Stragglers  int

	// Phase durations of the stop.
	Quiesce, Drain, HardStop, Snapshot, Commit, Leave time.Duration
	// Stop is the whole stop, from its start to Run's return.
	Stop time.Duration
}

func (r *Report) String() string {
	return fmt.Sprintf("repushed=%d succeeded=%d retried=%d dead_lettered=%d redelivered=%d parked=%d drained=%d snapshotted=%d unstarted=%d waiting=%d interrupted=%d stragglers=%d drain=%s snapshot=%s stop=%s",
		r.Repushed, r.Succeeded, r.Retried, r.DeadLettered, r.Redelivered, r.Parked, r.Drained, r.Snapshotted, r.Unstarted, r.Waiting, r.Interrupted, r.Stragglers,
		r.Drain.Round(time.Millisecond), r.Snapshot.Round(time.Millisecond), r.Stop.Round(time.Millisecond))
}

// fillCounts copies the runtime's outcome counters into rep.
func (r *Runtime) fillCounts(rep *Report) {
	rep.Succeeded, rep.Retried, rep.DeadLettered, rep.Redelivered = r.total(outSucceeded), r.total(outRetried), r.total(outDeadLettered), r.total(outRedelivered)
	rep.Parked, rep.Released, rep.Deferred, rep.Scheduled = r.total(outParked), r.total(outReleased), r.total(outDeferred), r.total(outScheduled)
	rep.Delivered, rep.Requeued, rep.Discarded, rep.Published = r.total(outDelivered), r.total(outRequeued), r.total(outDiscarded), r.total(outPublished)
	rep.Revoked = int(r.revoked.Load())
}
