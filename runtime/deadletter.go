package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// failuresConfig is what the failures component is built from.
type failuresConfig struct {
	state   *stateFile
	tally   *tally
	classes map[string]*class // a dead letter's class, for its requeue
	// accepting says whether a requeue may start (false before Run and
	// from the start of the stop).
	accepting *atomic.Bool
	// publish queues a dead letter for its class's DeadLetterTopic.
	publish func(c *class, rec snapshot.Record)
	// wake tells the scheduler a delayed record due at due was written.
	wake func(due time.Time)
	log  *slog.Logger
	// owns, when set, says whether a dead letter is this instance's to
	// list: with the changelog, those of partitions restored here (and
	// of no partition).
	owns func(rec *snapshot.Record) bool
}

// failures is what happens to a message that failed for good or for
// now: it becomes a dead letter (deadLetter) or a delayed redelivery
// (redeliver, delayed.go), a dead letter is requeued or discarded, a
// saved message of a class no longer configured becomes a dead letter
// (orphan), and a submitted message whose save failed is kept and saved
// again (unsaved.go). Its methods are safe for concurrent use.
type failures struct {
	cfg      failuresConfig
	requeues requeues // dead letters claimed by a requeue or a discard
	unsaved  unsaved  // submitted messages whose save failed
	orphans  orphans  // saved messages of unknown classes, logged as one line at start (rename.go)
}

func newFailures(cfg failuresConfig) *failures {
	return &failures{cfg: cfg, unsaved: unsaved{added: make(chan struct{}, 1)}}
}

// save saves a failed message for its delayed redelivery or as a dead
// letter, and reports whether the write succeeded.
func (f *failures) save(c *class, it *item, err error) bool {
	it.unsaved = false
	if it.verdict == redeliverLater {
		f.redeliver(c, it, err)
	} else {
		f.deadLetter(c, it, err)
	}
	return !it.unsaved
}

// deadLetter saves a failed message as a dead letter and, in an ordered
// class, parks its key.
func (f *failures) deadLetter(c *class, it *item, herr error) {
	rec := it.record(reasonFailed, herr, time.Now())
	if it.src == fromDead {
		// A requeued dead letter failed again: update it in place, so
		// its key (and a link to it) stays.
		if !f.cfg.state.updateInPlace(it, "update dead letter", func(tx *snapshot.Tx) error { return tx.PutDead(it.extOrZero().key, rec) }) {
			return
		}
	} else if !f.cfg.state.moveTo(it, "save dead letter", func(tx *snapshot.Tx) error { _, err := tx.SaveDead(rec); return err }) {
		return
	}
	f.deadLettered(c, it, rec, herr)
}

// deadLettered is what follows a dead letter's save: it is counted and
// logged, its key blocked in an ordered class, and it is published.
func (f *failures) deadLettered(c *class, it *item, rec snapshot.Record, herr error) {
	f.cfg.tally.inc(c, evDeadLettered)
	f.cfg.log.Warn("message became a dead letter", "class", c.cfg.Name, "id", it.env().ID,
		"attempt", it.env().Attempt, "err", herr)
	if c.cfg.Ordered {
		c.keys.block(it)
	}
	f.cfg.publish(c, rec)
}

// orphan makes a saved message whose class is not configured a dead
// letter, removing its record with del in the same transaction.
func (f *failures) orphan(rec snapshot.Record, del func(tx *snapshot.Tx) error) bool {
	rec.Reason = reasonUnknown
	rec.Err = fmt.Sprintf("runtime: class %q is not configured", rec.Message.Class)
	rec.SavedAt = time.Now()
	err := f.cfg.state.store.Update(func(tx *snapshot.Tx) error {
		if _, err := tx.SaveDead(rec); err != nil {
			return err
		}
		return del(tx)
	})
	if err != nil {
		f.cfg.log.Error("message of unknown class not dead-lettered", "class", rec.Message.Class, "id", rec.Message.ID, "err", err)
		return false
	}
	f.cfg.tally.inc(nil, evDeadLettered)
	f.orphans.add(f.cfg.log, rec.Message)
	return true
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
	return r.fail.list(class, after, limit)
}

// GetDeadLetter returns one dead letter, or an error wrapping ErrNotFound
// (also for one of a partition that is not this instance's: see
// DeadLetters).
func (r *Runtime) GetDeadLetter(key uint64) (DeadLetter, error) { return r.fail.get(key) }

// Requeue hands a dead letter back to its class's pool with its attempt
// and redelivery counts reset: a failure gets its class's retries and
// redeliveries again, and a redelivery takes the dead letter's record
// with it. Its record is removed only once it is handled; if it fails
// for good again the record is updated. In an ordered class its key's
// parked messages run after it succeeds. Requeue blocks while the pool is
// full, until ctx ends. It returns an error wrapping [ErrRequeued] while
// the same dead letter's requeue has not finished (or its discard is
// being written), [ErrNotFound] once it is gone (a requeue of it
// succeeded, or it was discarded), and [ErrNotRunning] once the stop has
// begun. Concurrent and repeated Requeues of one dead letter run it once.
func (r *Runtime) Requeue(ctx context.Context, key uint64) error { return r.fail.requeue(ctx, key) }

// Discard deletes a dead letter. In an ordered class its key's parked
// messages are released. It writes the state file once (one fsync) and
// returns ctx's error without writing when ctx has ended; the write
// itself is not interrupted. It returns an error wrapping [ErrRequeued]
// while the dead letter's requeue has not finished.
func (r *Runtime) Discard(ctx context.Context, key uint64) error { return r.fail.discard(ctx, key) }

// list is [Runtime.DeadLetters].
func (f *failures) list(class string, after Cursor, limit int) ([]DeadLetter, Cursor, error) {
	st, err := listing(f.cfg.state, "dead letters", limit)
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
	out := make([]DeadLetter, 0, len(entries))
	for _, e := range entries {
		if f.cfg.owns != nil && !f.cfg.owns(&e.Record) {
			continue // its partition's owner lists it (a page may come back short)
		}
		out = append(out, deadLetterOf(e))
	}
	return out, deadCursor(next), nil
}

// get is [Runtime.GetDeadLetter].
func (f *failures) get(key uint64) (DeadLetter, error) {
	st, err := f.cfg.state.get()
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
	if f.cfg.owns != nil && !f.cfg.owns(&rec) {
		// Its partition moved: the new owner restored it and lists,
		// requeues and discards it; this file's copy is unused.
		return DeadLetter{}, fmt.Errorf("%w: dead letter %d: its partition is not this instance's", ErrNotFound, key)
	}
	return deadLetterOf(snapshot.Entry{Key: key, Record: rec}), nil
}

// requeue is [Runtime.Requeue].
func (f *failures) requeue(ctx context.Context, key uint64) error {
	// Claim the dead letter before reading it: a requeue of it that ends
	// now deletes its record before it lets go of the claim, so what is
	// read under the claim is not a record already done. (Read first, the
	// record could be one whose requeue succeeded in between, and the
	// message would run twice.)
	if !f.requeues.start(key) {
		return fmt.Errorf("%w: dead letter %d", ErrRequeued, key)
	}
	dl, err := f.get(key)
	if err != nil {
		f.requeues.finish(key)
		return err
	}
	c := f.cfg.classes[dl.Message.Class]
	if c == nil {
		f.requeues.finish(key)
		return fmt.Errorf("%w: dead letter %d has class %q", ErrUnknownClass, key, dl.Message.Class)
	}
	if !f.cfg.accepting.Load() {
		f.requeues.finish(key)
		return ErrNotRunning
	}
	m := dl.Message
	m.Attempt = 0
	it := &item{m: m, src: fromDead, x: &itemExt{key: key}}
	if c.cfg.Ordered {
		c.keys.block(it) // it is its key's blocker; it may run
	}
	if err := c.pool.Submit(ctx, it); err != nil {
		f.requeues.finish(key)
		return fmt.Errorf("runtime: requeue dead letter %d: %w", key, err)
	}
	f.cfg.tally.inc(c, evRequeued)
	f.cfg.log.Info("dead letter requeued", "class", c.cfg.Name, "id", dl.Message.ID, "key", key)
	return nil
}

// discard is [Runtime.Discard].
func (f *failures) discard(ctx context.Context, key uint64) error {
	// Claimed like a requeue, for the same reason, and so that a Requeue
	// cannot hand the record to its pool between our read and our delete
	// (its message would run, and its key be released under it).
	if !f.requeues.start(key) {
		return fmt.Errorf("%w: dead letter %d", ErrRequeued, key)
	}
	defer f.requeues.finish(key)
	dl, err := f.get(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("runtime: discard dead letter %d: %w", key, err)
	}
	if err := f.cfg.state.store.Update(func(tx *snapshot.Tx) error { return tx.DeleteDead(key) }); err != nil {
		return fmt.Errorf("runtime: discard dead letter %d: %w", key, err)
	}
	c := f.cfg.classes[dl.Message.Class]
	f.cfg.tally.inc(c, evDiscarded)
	f.cfg.log.Info("dead letter discarded", "class", dl.Message.Class, "id", dl.Message.ID, "key", key)
	if c != nil && c.cfg.Ordered {
		c.keys.unblock(dl.Message.Key, dl.Message.ID)
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
