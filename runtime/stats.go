package runtime

// ClassStats is a point-in-time view of one class.
type ClassStats struct {
	Name    string
	Topics  []string
	Ordered bool
	// Workers and QueueSize are the class's pool bounds.
	Workers, QueueSize int
	// Queued counts messages waiting for a worker (including those behind
	// a busy key), Waiting those waiting out a retry backoff, Running the
	// handlers running now.
	Queued, Waiting, Running int
	// Succeeded, Failed and Retried count handler results since
	// [Runtime.Started]: Failed are failed attempts that were not retried
	// in place (dead letters, delayed redeliveries, held messages).
	// Parked counts messages saved behind a blocked key of an ordered
	// class without running, which are not failures.
	Succeeded, Failed, Retried, Parked uint64
	// Partitions is how many partitions of the class's topics this
	// instance fetches now. Lag is their consumer lag (last stable offset,
	// or high watermark with ReadUncommitted, minus the group's committed
	// offset, summed), as last sampled; -1
	// before the first sample. OldestUnsettled is the age, in seconds,
	// of the oldest Kafka message fetched and neither done nor saved
	// (zero when none).
	Partitions      int
	Lag             int64
	OldestUnsettled float64
	// Rate is the class's handling capacity in messages per second:
	// Workers divided by the recent mean handler time, where handlers
	// still running count by the time they have run so far (so a hang
	// lowers it at once). DrainEstimate is how long its queued and
	// running work would take at that rate, in seconds, and at least
	// LongestRunning (a handler that has run for t is taken to need t
	// more); zero when unknown or idle.
	Rate          float64
	DrainEstimate float64
	// LongestRunning is how long, in seconds, the longest-running handler
	// of the class has run so far; zero when none runs.
	LongestRunning float64
	// OverBudget is true when DrainEstimate exceeds DrainTimeout: a stop
	// now would snapshot part of this class's queue.
	OverBudget bool
	// Hold says whether the class is suspended by an outage or paused.
	Hold ClassHold
	// Share is a share class's acknowledgements (see Class.ShareGroup);
	// zero for another class.
	Share ShareStats
}

// Stats returns every class's stats, in configuration order. Safe for
// concurrent use; it does not wait for handlers.
func (r *Runtime) Stats() []ClassStats {
	out := make([]ClassStats, len(r.classes.order))
	for i, c := range r.classes.order {
		ps := c.pool.Stats()
		cs := ClassStats{
			Name: c.cfg.Name, Topics: append([]string(nil), c.cfg.topicsOf()...), Ordered: c.cfg.Ordered,
			Workers: c.cfg.Workers, QueueSize: c.cfg.QueueSize,
			Queued: ps.Queued, Waiting: ps.Waiting, Running: ps.Running,
			Succeeded: ps.Succeeded, Retried: ps.Retried, Parked: c.count(evParked),
		}
		// A diverted message's result is counted after the pool's
		// failed count moved: never more than it.
		cs.Failed = ps.Failed - min(c.diverted.Load(), ps.Failed)
		cs.Partitions, cs.Lag = r.kafka.classLag(c)
		cs.OldestUnsettled = r.kafka.oldestUnsettled(c).Seconds()
		runningFor, longest := c.pool.RunningTimes()
		cs.DrainEstimate, cs.Rate, cs.OverBudget = c.drainEstimate(ps, runningFor, longest, r.cfg.DrainTimeout)
		cs.LongestRunning = longest.Seconds()
		cs.Hold = ClassHold(c.hold.Stats())
		cs.Share = c.share.stats() // share.go
		out[i] = cs
	}
	return out
}
