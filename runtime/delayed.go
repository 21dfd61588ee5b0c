package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// Messages that wait in the state file's delayed bucket for their due
// time come from three places: a failed message's persisted redelivery
// (redeliver), a Kafka record whose HeaderDeliverAt is in the future
// (scheduler.deferDelivery) and Runtime.Schedule. The scheduler
// (scheduler.go) hands them to their pools when due.

// redeliver stores a failed message for a delayed redelivery. When a
// message with its ID was scheduled meanwhile (the ID of a message in a
// pool may be scheduled again), that one wins and this one becomes a dead
// letter, saying so, rather than be dropped.
func (f *failures) redeliver(c *class, it *item, herr error) {
	x := it.ext()
	x.redeliveries++
	now := time.Now()
	due := now.Add(x.wait)
	rec := it.record(reasonRedelivery, herr, now)
	saved, superseded, dead := f.cfg.state.saveRedelivery(it, due, rec, x.redeliveries-1)
	if !saved {
		x.redeliveries--
		return
	}
	if superseded {
		x.redeliveries--
		f.deadLettered(c, it, dead, herr)
		return
	}
	f.cfg.tally.inc(c, evRedelivered)
	f.cfg.log.Info("message failed; redelivery scheduled", "class", c.cfg.Name, "id", it.env().ID,
		"attempt", it.env().Attempt, "redelivery", x.redeliveries, "due", due, "err", herr)
	if c.cfg.Ordered {
		c.keys.block(it)
	}
	if f.cfg.sched != nil {
		f.cfg.sched.wake(due)
	}
}

// deferDelivery stores a Kafka message whose header asks for a later
// delivery, and reports whether it did; if not, the message runs now
// rather than wait in memory. A record read again (its offset was not
// committed when a stop gave back an earlier one, or a crash came before
// the commit) finds its delayed record waiting already, under its ID:
// that one delivers it when due, and this read only settles the offset.
func (s *scheduler) deferDelivery(c *class, it *item, at time.Time) bool {
	rec := it.record(reasonScheduled, nil, time.Now())
	saved, again := s.cfg.state.saveDeferred(it, at, rec)
	if !saved {
		return false
	}
	if again {
		s.cfg.log.Debug("deferred record read again; its delayed record is waiting already", "class", c.cfg.Name, "id", it.env().ID, "due", at)
		return true
	}
	s.cfg.tally.inc(c, evDeferred)
	s.wake(at)
	return true
}

// Schedule hands m to class's pool at the time at. Until then it waits in
// the state file, so a restart loses none. A time not after now means now
// (as [Runtime.Submit], and it blocks as Submit does, while the pool is
// full, until ctx ends). m.ID is required; a second message with the ID
// of one still waiting is ignored, but an ID whose message has been
// handed to its pool (it runs, or is done) may be scheduled again: a
// handler may schedule its own next run under its own ID. Schedule
// writes the state file (one fsync, shared with concurrent writers), and
// with the changelog waits for its write to the changelog, before it
// returns.
//
// During the stop Schedule still takes messages, from the moment the
// stop begins (when Submit starts returning [ErrNotRunning]) through the
// drain and the hard stop, until the stop's snapshot, which waits for the
// calls under way. So a handler's follow-up work survives the stop: a
// message scheduled then is saved, with its due time (now, when at is not
// after now: no pool takes messages any more), as a delayed message like
// any other, and runs when due after the restart, at this instance or
// at its key's partition's next owner. Schedule returns [ErrNotRunning]
// before Run has started and from the stop's snapshot on; a handler
// still running then is interrupted anyway, and runs again after the
// restart.
//
// With the changelog (Config.LocalStateOnly off) and a class with topics,
// the message belongs to the partition its key hashes to (see State that
// outlives the pod in the package doc) and is delivered by that
// partition's owner: this instance, or another that reads the changelog
// write while it runs (within about a second) and delivers it when due.
// The ID's duplicate check is this instance's.
func (r *Runtime) Schedule(ctx context.Context, class string, m *handoff.Message, at time.Time) error {
	if !r.life.schedules.enter() {
		return ErrNotRunning
	}
	defer r.life.schedules.leave()
	c, msg, err := r.check("schedule", class, m)
	if err != nil {
		return err
	}
	if now := time.Now(); !at.After(now) {
		if r.life.accepting.Load() {
			err := r.submit(ctx, c, msg)
			if !errors.Is(err, ErrNotRunning) {
				return err
			}
			// The stop began meanwhile: saved for the next start.
		}
		at = now
	}
	return r.sched.schedule(c, msg, at)
}

// schedule stores msg of class c, due at at; see [Runtime.Schedule].
func (s *scheduler) schedule(c *class, msg handoff.Message, at time.Time) error {
	rec := snapshot.Record{Message: msg, Reason: reasonScheduled, SavedAt: time.Now()}
	added, replaced, err := s.cfg.state.saveSchedule(rec, at, s.handedOver, s.cfg.clog.mine)
	if err != nil {
		return fmt.Errorf("runtime: schedule %s to class %q: %w", msg.ID, c.cfg.Name, err)
	}
	s.forget(replaced)
	if added[0] {
		s.cfg.tally.inc(c, evScheduled)
		s.wake(at)
	}
	return nil
}

// DelayedMessage is a message waiting in the state file for its due time:
// scheduled ([Runtime.Schedule] or a [HeaderDeliverAt] header) or waiting
// for a redelivery of its class's RetryPolicy.
type DelayedMessage struct {
	// Message is the envelope as it will be handed to its class.
	Message handoff.Message
	// Due is when it will be handed to its class.
	Due time.Time
	// Redelivery is true for a failed message's persisted redelivery,
	// false for a scheduled one.
	Redelivery bool
	// Err is the last error's text, for a redelivery.
	Err string
	// Redeliveries counts the redeliveries it has had, this one included.
	Redeliveries int
	// Cursor is this message's place in the listing: pass it to
	// [Runtime.Delayed] to list what is due after it.
	Cursor Cursor
}

// Delayed returns up to limit delayed messages in due order, starting
// after the cursor after (the zero Cursor for the first page), and the
// cursor of the next page (zero when this page is the last). With the
// changelog it leaves out those of partitions that are not this
// instance's (their owner lists them), so a page may come back short. It
// reads the state file and needs a running runtime.
func (r *Runtime) Delayed(after Cursor, limit int) ([]DelayedMessage, Cursor, error) {
	return r.sched.list(after, limit)
}

// list is [Runtime.Delayed].
func (s *scheduler) list(after Cursor, limit int) ([]DelayedMessage, Cursor, error) {
	if _, err := listing(s.cfg.state, "delayed messages", limit); err != nil {
		return nil, "", err
	}
	from, err := after.delayedKey()
	if err != nil {
		return nil, "", err
	}
	entries, err := s.cfg.state.listDelayed(from, limit)
	if err != nil {
		return nil, "", fmt.Errorf("runtime: delayed messages: %w", err)
	}
	out := make([]DelayedMessage, 0, len(entries))
	for _, e := range entries {
		if !s.cfg.clog.mine(&e.Record) {
			continue // its partition's owner lists it (a page may come back short)
		}
		out = append(out, DelayedMessage{Message: e.Record.Message, Due: e.Due, Redelivery: e.Record.Reason == reasonRedelivery,
			Err: e.Record.Err, Redeliveries: e.Record.Redeliveries, Cursor: delayedCursor(e.Key)})
	}
	var next Cursor
	if len(entries) == limit {
		next = delayedCursor(entries[len(entries)-1].Key)
	}
	return out, next, nil
}
