package runtime

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/service"
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
// are in a pool; the scheduler remembers those (handed) until their
// records are deleted.
//
// A new record does not always land after the cursor: its due time is
// fixed before its write commits (a group commit, an fsync), and
// meanwhile the cursor may move past its key. So every write tells the
// scheduler its due time (wake), and when one is not after the cursor the
// next read starts again from that due time, skipping the records it
// already handed over.
type scheduler struct {
	service.Base // run, from Start to Stop
	cfg          schedulerConfig
	wakeCh       chan struct{}

	mu   sync.Mutex
	next time.Time // when the loop will look again; zero when it sleeps for good
	// writes counts wake calls, so the loop can tell whether a record was
	// written while it was reading.
	writes uint64
	// earliest is the earliest due time written since the last read
	// began; zero when none.
	earliest time.Time
	// handed are the keys of the records handed to a pool and not known
	// deleted; deleted are those whose delete has committed since the
	// last read began. The loop drops deleted from handed before it
	// reads, so a read never sees a deleted record as not handed.
	handed  map[string]struct{}
	deleted []snapshot.DelayedKey
}

// schedulerConfig is what the scheduler is built from.
type schedulerConfig struct {
	state   *stateFile
	tally   *tally
	classes map[string]*class // a due message's class: its pool and hold
	// fail makes a due message of a class no longer configured a dead
	// letter, deleting its record (failures.orphan).
	fail *failures
	log  *slog.Logger
	// clog says whether a record may be delivered here (stateLog.mine):
	// with the changelog, only those of partitions restored here (and
	// those of no partition). Delivering the others is their partition
	// owner's. Nil (a test's) delivers every one.
	clog *stateLog
}

func newScheduler(cfg schedulerConfig) *scheduler {
	return &scheduler{cfg: cfg, wakeCh: make(chan struct{}, 1), handed: map[string]struct{}{}}
}

// wake tells the loop that a record due at at was written, and wakes it if
// that is before the time it planned to look again.
func (s *scheduler) wake(at time.Time) {
	s.mu.Lock()
	s.writes++
	if s.earliest.IsZero() || at.Before(s.earliest) {
		s.earliest = at
	}
	early := s.next.IsZero() || at.Before(s.next)
	s.mu.Unlock()
	if early {
		select {
		case s.wakeCh <- struct{}{}:
		default:
		}
	}
}

// forget tells the loop that the records under keys, handed to a pool
// earlier, are deleted: called once their delete has committed.
func (s *scheduler) forget(keys ...snapshot.DelayedKey) {
	if len(keys) == 0 {
		return
	}
	s.mu.Lock()
	s.deleted = append(s.deleted, keys...)
	s.mu.Unlock()
}

// handedOver reports whether key's record is in a pool, or done and not
// yet deleted.
func (s *scheduler) handedOver(key snapshot.DelayedKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.handed[string(key)]
	return ok
}

// beginRead drops the deleted keys from handed and returns where the read
// starts: the cursor, or the earliest due time written since the last
// read when that is not after the cursor.
func (s *scheduler) beginRead(cursor snapshot.DelayedKey) (from snapshot.DelayedKey, writes uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.deleted {
		delete(s.handed, string(k))
	}
	s.deleted = s.deleted[:0]
	from = cursor
	if !s.earliest.IsZero() && cursor != nil && !s.earliest.After(cursor.Due()) {
		from = snapshot.DelayedKeyAt(s.earliest)
	}
	s.earliest = time.Time{}
	return from, s.writes
}

// hand records that key's record goes to a pool; false when it already
// did.
func (s *scheduler) hand(key snapshot.DelayedKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.handed[string(key)]; ok {
		return false
	}
	s.handed[string(key)] = struct{}{}
	return true
}

// unhand undoes hand for a record that did not go to its pool.
func (s *scheduler) unhand(key snapshot.DelayedKey) {
	s.mu.Lock()
	delete(s.handed, string(key))
	s.mu.Unlock()
}

// Start runs the scheduler (run) until Stop; see service.Service.
func (s *scheduler) Start(ctx context.Context) error { return s.StartLoop(ctx, s.run) }

// run hands due messages to their pools until ctx ends.
func (s *scheduler) run(ctx context.Context) {
	var cursor snapshot.DelayedKey
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		from, seen := s.beginRead(cursor)
		now := time.Now()
		due, next, bad, err := s.cfg.state.dueDelayed(from, now, schedBatch)
		if err == nil {
			err = s.cfg.state.quarantine(bad)
		}
		s.cfg.log.Debug("delayed messages read", "due", len(due), "undecodable", len(bad), "next", next)
		if err != nil {
			s.cfg.log.Error("delayed messages not read; retrying in 1s", "err", err)
			due, next = nil, now.Add(time.Second)
		}
		for _, e := range due {
			c := s.cfg.classes[e.Record.Message.Class]
			cursor = e.Key
			if !s.cfg.clog.mine(&e.Record) {
				continue // its partition's owner delivers it; a restore here wakes the scheduler
			}
			if c == nil {
				s.cfg.fail.orphan(e.Record, delayedSource(e.Key))
				continue
			}
			if !s.hand(e.Key) {
				continue // in a pool already: read again after a rewind
			}
			it := fromRecord(e.Record, fromDelayed)
			it.ext().delayedKey = e.Key
			handed, err := c.hold.Deliver(ctx, it, e.Key.Due())
			if !handed {
				s.unhand(e.Key)
			}
			if err != nil {
				return // stopping: the record stays for the next start
			}
			if !handed {
				continue // its class is suspended or paused: read again once lifted
			}
			s.cfg.tally.inc(c, evDelivered)
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
