package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/handoff-go/handoff/snapshot"
)

// schedBatch is how many due messages the scheduler reads at a time.
const schedBatch = 256

// scheduler hands delayed messages to their pools when they are due.
//
// The delayed bucket is keyed by big-endian due time, then ID, so the
// scheduler reads due records in order from a cursor and then sleeps until
// the next due time: it never scans the bucket. A record stays in the
// bucket until its message is done, so the cursor moves past records that
// are in a pool. Every record put in the bucket is due after the moment it
// is written, and the cursor never passes the present, so a new record
// always lands after the cursor.
type scheduler struct {
	r      *Runtime
	wakeCh chan struct{}

	mu   sync.Mutex
	next time.Time // when the loop will look again; zero when it sleeps for good
	// writes counts wake calls, so the loop can tell whether a record was
	// written while it was reading.
	writes uint64
}

func newScheduler(r *Runtime) *scheduler {
	return &scheduler{r: r, wakeCh: make(chan struct{}, 1)}
}

// wake tells the loop that a message is due at at, if that is before the
// time it planned to look again.
func (s *scheduler) wake(at time.Time) {
	s.mu.Lock()
	s.writes++
	early := s.next.IsZero() || at.Before(s.next)
	s.mu.Unlock()
	if early {
		select {
		case s.wakeCh <- struct{}{}:
		default:
		}
	}
}

// run hands due messages to their pools until ctx ends.
func (s *scheduler) run(ctx context.Context) {
	var cursor snapshot.DelayedKey
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		seen := s.writes
		s.mu.Unlock()
		now := time.Now()
		var due []snapshot.DelayedEntry
		var next time.Time
		var bad []*snapshot.DecodeError
		err := s.r.store.View(func(tx *snapshot.Tx) (err error) {
			due, next, bad, err = tx.DueDelayed(cursor, now, schedBatch)
			return err
		})
		if err == nil {
			err = s.r.quarantine(bad)
		}
		s.r.log.Debug("delayed messages read", "due", len(due), "undecodable", len(bad), "next", next)
		if err != nil {
			s.r.log.Error("delayed messages not read; retrying in 1s", "err", err)
			due, next = nil, now.Add(time.Second)
		}
		for _, e := range due {
			c := s.r.classes[e.Record.Message.Class]
			cursor = e.Key
			if c == nil {
				s.r.orphan(e.Record, func(tx *snapshot.Tx) error { return tx.DeleteDelayed(e.Key) })
				continue
			}
			it := fromRecord(e.Record, fromDelayed)
			it.delayedKey = e.Key
			if err := c.pool.Submit(ctx, it); err != nil {
				return // stopping: the record stays for the next start
			}
			s.r.inc(c, outDelivered)
		}
		if len(due) == schedBatch {
			continue
		}
		s.mu.Lock()
		if s.writes != seen {
			// A record was written during the read and may be due
			// before next: look again.
			s.mu.Unlock()
			continue
		}
		s.next = next
		s.mu.Unlock()
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.wakeCh:
		}
	}
}
