package runtime

import (
	"fmt"
	"time"
)

// Report tells what one [Runtime.Run] did. Counts are messages.
type Report struct {
	// Repushed is how many messages of the state file were handed to
	// their pools at start, before the first fetch, and with the
	// changelog at each partition's assignment, before its first fetch.
	Repushed int
	// Restored is how many records (saved messages, dead letters, parked
	// and delayed messages) the assignments brought back from the
	// changelog into the state file: records another instance, or this
	// one on a disk since lost, saved. RestoredPartitions is how many
	// partitions' state was restored. Both are zero with LocalStateOnly.
	Restored, RestoredPartitions int
	// Followed is how many records other instances wrote to the
	// changelogs of this instance's partitions while it owned them (a
	// message scheduled, or a submitted one saved or dead-lettered,
	// through an instance that does not own its key's partition), which
	// this instance applied as they came. Zero with LocalStateOnly.
	Followed int
	// Quarantined is how many records of the state file could not be
	// decoded at start and were moved to the quarantine bucket.
	Quarantined int
	// UnknownClass is how many saved messages named a class that no
	// longer exists; they became dead letters.
	UnknownClass int

	// BlockedKeys is how many keys of ordered classes were blocked (behind
	// a dead letter or a redelivery) or releasing at start.
	BlockedKeys int

	// Succeeded is how many messages were handled (their handler
	// returned nil) over the whole run, requeued dead letters included.
	Succeeded uint64
	// Retried is how many failed attempts were retried in place.
	Retried uint64
	// DeadLettered is how many messages were saved as dead letters: failed
	// for good, bad input, or a saved message of an unknown class.
	DeadLettered uint64
	// Redelivered is how many failed messages were stored for a delayed
	// redelivery of their class's RetryPolicy.
	Redelivered uint64
	// Parked is how many messages of ordered classes were saved behind a
	// blocked key.
	Parked uint64
	// Released is how many parked messages were handed back to their pool
	// once their key was unblocked.
	Released uint64
	// Deferred is how many Kafka records were stored until the time of
	// their [HeaderDeliverAt] header.
	Deferred uint64
	// Scheduled is how many messages [Runtime.Schedule] stored for later.
	Scheduled uint64
	// Delivered is how many delayed messages (deferred, scheduled or
	// redelivered) were handed to their pool when due.
	Delivered uint64
	// Requeued is how many dead letters [Runtime.Requeue] handed back to
	// their pool.
	Requeued uint64
	// Discarded is how many dead letters [Runtime.Discard] deleted.
	Discarded uint64
	// Published is how many dead letters were published to their class's
	// DeadLetterTopic.
	Published uint64
	// Unpublished is how many dead letters of classes with a
	// DeadLetterTopic were not published: the write failed, the publish
	// queue was full, or the stop's budget ran out first. The state file
	// keeps them.
	Unpublished uint64
	// Held is how many submitted messages that failed were kept in
	// memory because their dead-letter or redelivery write failed; each
	// was saved once a retry of the write succeeded, or by the stop's
	// snapshot (counted in Snapshotted) to run again after the restart.
	Held uint64

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
	// ShareReleased is how many records of share classes (see
	// Class.ShareGroup) the stop released to their share group for other
	// members to take: those not started at the quiesce (counted nowhere
	// else), and those the hard stop took out (counted in Unstarted,
	// Waiting and Interrupted too). Nothing of a share class is
	// snapshotted; one at its group's delivery limit becomes a dead
	// letter instead (counted in DeadLettered).
	ShareReleased int
	// Revoked is how many unstarted Kafka messages rebalances took out of
	// the pools and gave back to their partitions' next owners.
	Revoked int
	// Unstarted is how many messages were taken out of the pools unstarted.
	Unstarted int
	// Waiting is how many were waiting out a retry backoff; they are saved
	// with their attempt count.
	Waiting int
	// Interrupted is how many handlers were cut short by the hard stop
	// (they will run again after the restart).
	Interrupted int
	// Stragglers is how many of the Interrupted had not returned by
	// HardStopGrace; their goroutines finish on their own.
	Stragglers int

	// Quiesce is how long the stop took to end fetching and the other
	// feeds of the pools.
	Quiesce time.Duration
	// Drain is how long the pools worked on once fetching had stopped.
	Drain time.Duration
	// HardStop is how long taking out the unstarted messages and waiting
	// for the cancelled handlers took.
	HardStop time.Duration
	// Snapshot is how long the snapshot transaction took.
	Snapshot time.Duration
	// Commit is how long the final offset commit took.
	Commit time.Duration
	// Leave is how long closing the partition readers, leaving the group
	// and closing the state file took.
	Leave time.Duration
	// Stop is the whole stop, from its start to Run's return.
	Stop time.Duration
}

func (r *Report) String() string {
	return fmt.Sprintf("repushed=%d succeeded=%d retried=%d dead_lettered=%d redelivered=%d parked=%d drained=%d snapshotted=%d unstarted=%d waiting=%d interrupted=%d stragglers=%d drain=%s snapshot=%s stop=%s",
		r.Repushed, r.Succeeded, r.Retried, r.DeadLettered, r.Redelivered, r.Parked, r.Drained, r.Snapshotted, r.Unstarted, r.Waiting, r.Interrupted, r.Stragglers,
		r.Drain.Round(time.Millisecond), r.Snapshot.Round(time.Millisecond), r.Stop.Round(time.Millisecond))
}
