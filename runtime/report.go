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

	// Succeeded and Failed count handler results over the whole run.
	// Failed messages became dead letters.
	Succeeded uint64
	Failed    uint64

	// Drained is how many messages finished during the drain phase.
	Drained uint64
	// DrainTimedOut is true when the drain ended at DrainTimeout (or a
	// second signal) with work left.
	DrainTimedOut bool
	// Snapshotted is how many messages were saved to the state file at
	// the stop: Unstarted plus Interrupted, less those that were already
	// there because they had been re-pushed.
	Snapshotted int
	// Unstarted is how many messages were taken out of the pools unstarted.
	Unstarted int
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
	return fmt.Sprintf("repushed=%d succeeded=%d failed=%d drained=%d snapshotted=%d unstarted=%d interrupted=%d stragglers=%d drain=%s snapshot=%s stop=%s",
		r.Repushed, r.Succeeded, r.Failed, r.Drained, r.Snapshotted, r.Unstarted, r.Interrupted, r.Stragglers,
		r.Drain.Round(time.Millisecond), r.Snapshot.Round(time.Millisecond), r.Stop.Round(time.Millisecond))
}
