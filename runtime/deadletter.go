package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// deadLetter saves a failed message as a dead letter and, in an ordered
// class, parks its key.
func (r *Runtime) deadLetter(c *class, it *item, herr error) {
	rec := it.record(reasonFailed, herr, time.Now())
	if it.src == fromDead {
		// A requeued dead letter failed again: update it in place.
		if !r.moveTo(it, "update dead letter", func(tx *snapshot.Tx) error { return tx.PutDead(it.key, rec) }) {
			return
		}
	} else if !r.moveTo(it, "save dead letter", func(tx *snapshot.Tx) error { _, err := tx.SaveDead(rec); return err }) {
		return
	}
	r.deadLettered(c, it, rec, herr)
}

// deadLettered is what follows a dead letter's save: it is counted and
// logged, its key blocked in an ordered class, and it is published.
func (r *Runtime) deadLettered(c *class, it *item, rec snapshot.Record, herr error) {
	r.inc(c, outDeadLettered)
	r.log.Warn("message became a dead letter", "class", c.cfg.Name, "id", it.msg.ID,
		"attempt", it.msg.Attempt, "err", herr)
	if c.cfg.Ordered {
		r.block(c, it)
	}
	r.dlq.publish(c, rec)
}

// DeadLetter is a message that failed for good, as the state file keeps it.
type DeadLetter struct {
	// Key identifies the dead letter in the state file; pass it to
	// [Runtime.Requeue] and [Runtime.Discard].
	Key uint64
	// Message is the envelope; Message.Attempt counts the failed attempts.
	Message handoff.Message
	// Reason says why it was saved ("failed"; "unknown class" for a
	// message of a class the runtime was not configured with).
	Reason string
	// Err is the last error's text.
	Err string
	// Redeliveries counts the persisted delayed redeliveries it had.
	Redeliveries int
	// FirstFailed and LastFailed bound the failures.
	FirstFailed, LastFailed time.Time
}

func deadLetterOf(e snapshot.Entry) DeadLetter {
	return DeadLetter{Key: e.Key, Message: e.Record.Message, Reason: e.Record.Reason, Err: e.Record.Err,
		Redeliveries: e.Record.Redeliveries, FirstFailed: e.Record.FirstFailed, LastFailed: e.Record.SavedAt}
}

// DeadLetters returns up to limit dead letters of class ("" for every
// class) in the order they failed, starting after the cursor after (the
// zero Cursor for the first page), and the cursor of the next page (zero
// when there is none). It reads the state file and needs a running
// runtime; it does not wait for handlers.
func (r *Runtime) DeadLetters(class string, after Cursor, limit int) ([]DeadLetter, Cursor, error) {
	st, err := r.listing("dead letters", limit)
	if err != nil {
		return nil, "", err
	}
	from, err := after.deadKey()
	if err != nil {
		return nil, "", err
	}
	var entries []snapshot.Entry
	var next uint64
	err = st.View(func(tx *snapshot.Tx) (err error) { entries, next, err = tx.DeadPage(class, from, limit); return err })
	if err != nil {
		return nil, "", fmt.Errorf("runtime: dead letters: %w", err)
	}
	out := make([]DeadLetter, len(entries))
	for i, e := range entries {
		out[i] = deadLetterOf(e)
	}
	return out, deadCursor(next), nil
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
// full, until ctx ends. It returns an error wrapping [ErrRequeued] while
// the same dead letter's requeue has not finished (or its discard is
// being written), [ErrNotFound] once it is gone (a requeue of it
// succeeded, or it was discarded), and [ErrNotRunning] once the stop has
// begun. Concurrent and repeated Requeues of one dead letter run it once.
func (r *Runtime) Requeue(ctx context.Context, key uint64) error {
	// Claim the dead letter before reading it: a requeue of it that ends
	// now deletes its record before it lets go of the claim, so what is
	// read under the claim is not a record already done. (Read first, the
	// record could be one whose requeue succeeded in between, and the
	// message would run twice.)
	if !r.requeues.start(key) {
		return fmt.Errorf("%w: dead letter %d", ErrRequeued, key)
	}
	dl, err := r.GetDeadLetter(key)
	if err != nil {
		r.requeues.finish(key)
		return err
	}
	c := r.classes[dl.Message.Class]
	if c == nil {
		r.requeues.finish(key)
		return fmt.Errorf("%w: dead letter %d has class %q", ErrUnknownClass, key, dl.Message.Class)
	}
	if !r.accepting.Load() {
		r.requeues.finish(key)
		return ErrNotRunning
	}
	it := &item{msg: dl.Message, src: fromDead, key: key}
	it.msg.Attempt = 0
	if c.cfg.Ordered {
		r.block(c, it) // it is its key's blocker; it may run
	}
	if err := c.pool.Submit(ctx, it); err != nil {
		r.requeues.finish(key)
		return fmt.Errorf("runtime: requeue dead letter %d: %w", key, err)
	}
	r.inc(c, outRequeued)
	r.log.Info("dead letter requeued", "class", c.cfg.Name, "id", dl.Message.ID, "key", key)
	return nil
}

// Discard deletes a dead letter. In an ordered class its key's parked
// messages are released. It writes the state file once (one fsync) and
// returns ctx's error without writing when ctx has ended; the write
// itself is not interrupted. It returns an error wrapping [ErrRequeued]
// while the dead letter's requeue has not finished.
func (r *Runtime) Discard(ctx context.Context, key uint64) error {
	// Claimed like a requeue, for the same reason, and so that a Requeue
	// cannot hand the record to its pool between our read and our delete
	// (its message would run, and its key be released under it).
	if !r.requeues.start(key) {
		return fmt.Errorf("%w: dead letter %d", ErrRequeued, key)
	}
	defer r.requeues.finish(key)
	dl, err := r.GetDeadLetter(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("runtime: discard dead letter %d: %w", key, err)
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

// requeues are the dead letters claimed by a Requeue or a Discard: a
// requeued one until it leaves its pool (its record deleted or updated
// first), a discarded one until its delete is written. A second requeue
// or a discard of a claimed one is refused; each reads the record only
// once it holds the claim.
type requeues struct {
	mu   sync.Mutex
	keys map[uint64]bool
}

// start claims key and reports whether it was not claimed already.
func (q *requeues) start(key uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.keys[key] {
		return false
	}
	if q.keys == nil {
		q.keys = map[uint64]bool{}
	}
	q.keys[key] = true
	return true
}

// finish lets go of key's claim.
func (q *requeues) finish(key uint64) {
	q.mu.Lock()
	delete(q.keys, key)
	q.mu.Unlock()
}
