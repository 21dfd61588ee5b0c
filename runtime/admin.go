package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

var (
	// ErrNotFound is returned for a dead letter that does not exist.
	ErrNotFound = errors.New("runtime: not found")
	// ErrRequeued is returned by [Runtime.Requeue] and [Runtime.Discard]
	// for a dead letter that was requeued and is not finished yet.
	ErrRequeued = errors.New("runtime: dead letter already requeued")
)

func (r *Runtime) requeueDone(key uint64) {
	r.reqMu.Lock()
	delete(r.requeuing, key)
	r.reqMu.Unlock()
}

// DeadLetter is a message that failed for good, as the state file keeps it.
type DeadLetter struct {
	// Key identifies the dead letter in the state file; pass it to
	// [Runtime.Requeue] and [Runtime.Discard].
	Key uint64
	// Message is the envelope; Message.Attempt counts the failed attempts.
	Message handoff.Message
	// Err is the last error's text.
	Err string
	// FirstFailed and LastFailed bound the failures.
	FirstFailed, LastFailed time.Time
}

func deadLetterOf(e snapshot.Entry) DeadLetter {
	return DeadLetter{Key: e.Key, Message: e.Record.Message, Err: e.Record.Err,
		FirstFailed: e.Record.FirstFailed, LastFailed: e.Record.SavedAt}
}

// openStore returns the open state file, or ErrNotRunning.
func (r *Runtime) openStore() (*snapshot.Store, error) {
	if !r.storeOpen.Load() {
		return nil, ErrNotRunning
	}
	return r.store, nil
}

// DeadLetters returns up to limit dead letters of class ("" for every
// class) whose keys follow after, in the order they failed, and the after
// of the next page (0 when there is none). It needs a running runtime.
func (r *Runtime) DeadLetters(class string, after uint64, limit int) ([]DeadLetter, uint64, error) {
	st, err := r.openStore()
	if err != nil {
		return nil, 0, err
	}
	if limit <= 0 {
		return nil, 0, fmt.Errorf("runtime: dead letters: limit must be > 0, got %d", limit)
	}
	var entries []snapshot.Entry
	var next uint64
	err = st.View(func(tx *snapshot.Tx) (err error) { entries, next, err = tx.DeadPage(class, after, limit); return err })
	if err != nil {
		return nil, 0, fmt.Errorf("runtime: dead letters: %w", err)
	}
	out := make([]DeadLetter, len(entries))
	for i, e := range entries {
		out[i] = deadLetterOf(e)
	}
	return out, next, nil
}

// GetDeadLetter returns one dead letter, or an error wrapping ErrNotFound.
func (r *Runtime) GetDeadLetter(key uint64) (DeadLetter, error) {
	st, err := r.openStore()
	if err != nil {
		return DeadLetter{}, err
	}
	var rec snapshot.Record
	var ok bool
	err = st.View(func(tx *snapshot.Tx) (err error) { rec, ok, err = tx.GetDead(key); return err })
	if err != nil {
		return DeadLetter{}, fmt.Errorf("runtime: dead letter %d: %w", key, err)
	}
	if !ok {
		return DeadLetter{}, fmt.Errorf("%w: dead letter %d", ErrNotFound, key)
	}
	return deadLetterOf(snapshot.Entry{Key: key, Record: rec}), nil
}

// Requeue hands a dead letter back to its class's pool with its attempt
// count reset. Its record is removed only once it is handled; if it fails
// for good again the record is updated. In an ordered class its key's
// parked messages run after it succeeds. Requeue blocks while the pool is
// full, until ctx ends.
func (r *Runtime) Requeue(ctx context.Context, key uint64) error {
	dl, err := r.GetDeadLetter(key)
	if err != nil {
		return err
	}
	c := r.classes[dl.Message.Class]
	if c == nil {
		return fmt.Errorf("%w: dead letter %d has class %q", ErrUnknownClass, key, dl.Message.Class)
	}
	if !r.accepting.Load() {
		return ErrNotRunning
	}
	r.reqMu.Lock()
	if r.requeuing[key] {
		r.reqMu.Unlock()
		return fmt.Errorf("%w: dead letter %d", ErrRequeued, key)
	}
	r.requeuing[key] = true
	r.reqMu.Unlock()
	it := &item{msg: dl.Message, src: fromDead, key: key}
	it.msg.Attempt = 0
	if c.cfg.Ordered {
		r.block(c, it) // it is its key's blocker; it may run
	}
	if err := c.pool.Submit(ctx, it); err != nil {
		r.requeueDone(key)
		return fmt.Errorf("runtime: requeue dead letter %d: %w", key, err)
	}
	r.inc(c, outRequeued)
	r.log.Info("dead letter requeued", "class", c.cfg.Name, "id", dl.Message.ID, "key", key)
	return nil
}

// Discard deletes a dead letter. In an ordered class its key's parked
// messages are released.
func (r *Runtime) Discard(key uint64) error {
	dl, err := r.GetDeadLetter(key)
	if err != nil {
		return err
	}
	r.reqMu.Lock()
	busy := r.requeuing[key]
	r.reqMu.Unlock()
	if busy {
		return fmt.Errorf("%w: dead letter %d", ErrRequeued, key)
	}
	if err := r.store.Update(func(tx *snapshot.Tx) error { return tx.DeleteDead(key) }); err != nil {
		return fmt.Errorf("runtime: discard dead letter %d: %w", key, err)
	}
	c := r.classes[dl.Message.Class]
	r.inc(c, outDiscarded)
	r.log.Info("dead letter discarded", "class", dl.Message.Class, "id", dl.Message.ID, "key", key)
	if c != nil && c.cfg.Ordered {
		r.unblockKey(c, dl.Message.Key, dl.Message.ID)
	}
	return nil
}

// ParkedKey is a key of an ordered class whose messages wait behind a
// blocker (a dead letter or a message waiting for redelivery).
type ParkedKey = snapshot.ParkedCount

// ParkedKeys lists every parked key with its count.
func (r *Runtime) ParkedKeys() ([]ParkedKey, error) {
	st, err := r.openStore()
	if err != nil {
		return nil, err
	}
	var keys []ParkedKey
	var bad []*snapshot.DecodeError
	err = st.View(func(tx *snapshot.Tx) (err error) { keys, bad, err = tx.ParkedKeys(); return err })
	if err == nil && len(bad) > 0 {
		err = st.Update(func(tx *snapshot.Tx) error { return tx.Quarantine(bad...) })
	}
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// DelayedMessage is a message waiting in the state file for its due time.
type DelayedMessage = snapshot.DelayedEntry

// Delayed lists up to limit delayed messages after the given key, in due
// order (pass the last one's Key for the next page, nil for the first).
func (r *Runtime) Delayed(after snapshot.DelayedKey, limit int) ([]DelayedMessage, error) {
	st, err := r.openStore()
	if err != nil {
		return nil, err
	}
	var page []DelayedMessage
	err = st.View(func(tx *snapshot.Tx) (err error) { page, err = tx.ListDelayed(after, limit); return err })
	return page, err
}

// Schedule hands m to class's pool at the time at. Until then it waits in
// the state file, so a restart loses none. A time not after now means now
// (as [Runtime.Submit]). m.ID is required; a second message with an ID
// already waiting is ignored.
func (r *Runtime) Schedule(ctx context.Context, class string, m *handoff.Message, at time.Time) error {
	c, msg, err := r.accept("schedule", class, m)
	if err != nil {
		return err
	}
	if !at.After(time.Now()) {
		return r.Submit(ctx, class, m)
	}
	var added []bool
	err = r.store.Batch(func(tx *snapshot.Tx) (err error) {
		added, err = tx.SaveDelayed(snapshot.Delayed{Due: at, Record: snapshot.Record{Message: msg, Reason: reasonScheduled, SavedAt: time.Now()}})
		return err
	})
	if err != nil {
		return fmt.Errorf("runtime: schedule %s to class %q: %w", m.ID, class, err)
	}
	if added[0] {
		r.inc(c, outScheduled)
		r.sched.wake(at)
	}
	return nil
}
