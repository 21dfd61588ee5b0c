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
	// Succeeded, Failed and Retried count handler results since start:
	// Failed are attempts that were not retried in place (dead letters,
	// redeliveries, parked or deferred messages included).
	Succeeded, Failed, Retried uint64
	// Rate is the class's handling capacity in messages per second:
	// Workers divided by the recent mean handler time. DrainEstimate is how
	// long its queued and running work would take at that rate, in
	// seconds (zero when unknown or idle).
	Rate          float64
	DrainEstimate float64
	// OverBudget is true when DrainEstimate exceeds DrainTimeout: a stop
	// now would snapshot part of this class's queue.
	OverBudget bool
	// Hold says whether the class is suspended by an outage or paused.
	Hold ClassHold
}

// Stats returns every class's stats, in configuration order. Safe for
// concurrent use; it does not wait for handlers.
func (r *Runtime) Stats() []ClassStats {
	out := make([]ClassStats, len(r.order))
	for i, c := range r.order {
		ps := c.pool.Stats()
		cs := ClassStats{
			Name: c.cfg.Name, Topics: append([]string(nil), c.cfg.Topics...), Ordered: c.cfg.Ordered,
			Workers: c.cfg.Workers, QueueSize: c.cfg.QueueSize,
			Queued: ps.Queued, Waiting: ps.Waiting, Running: ps.Running,
			Succeeded: ps.Succeeded, Failed: ps.Failed, Retried: ps.Retried,
		}
		cs.Rate = c.capacity()
		cs.DrainEstimate, cs.OverBudget = r.drainEstimate(c, ps.Queued+ps.Running, cs.Rate)
		cs.Hold = c.holdStats()
		out[i] = cs
	}
	return out
}
