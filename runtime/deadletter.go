package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/internal/deadop"
	"github.com/handoff-go/handoff/runtime/internal/service"
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
	// sched is told a delayed record due at due was written
	// (scheduler.wake); New sets it once the scheduler exists, which is
	// built with these failures. Nil (a test's) wakes none.
	sched *scheduler
	log   *slog.Logger
	// clog says whether a dead letter is this instance's to list
	// (stateLog.mine): with the changelog, those of partitions restored
	// here (and of no partition); and returns the *NotOwnerError of one
	// that is not this instance's and exists in the group
	// (stateLog.deadElsewhere). Nil (a test's) lists every one and
	// knows no other instance.
	clog *stateLog
}

// failures is what happens to a message that failed for good or for
// now: it becomes a dead letter (deadLetter) or a delayed redelivery
// (redeliver, delayed.go), a dead letter is requeued or discarded, a
// saved message of a class no longer configured becomes a dead letter
// (orphan), and a submitted message whose save failed is kept and saved
// again (unsaved.go). Its methods are safe for concurrent use.
type failures struct {
	// Base runs the retries of unsaved failed messages (retryUnsaved)
	// from Start to Stop.
	service.Base
	cfg      failuresConfig
	requeues requeues // dead letters claimed by a requeue or a discard
	unsaved  unsaved  // submitted messages whose save failed
	orphans  orphans  // saved messages of unknown classes, logged as one line at start (rename.go)
}

// Start runs the retries of the unsaved failed messages (retryUnsaved)
// until Stop; see service.Service.
func (f *failures) Start(ctx context.Context) error { return f.StartLoop(ctx, f.retryUnsaved) }

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
	if it.src == fromShare {
		it.x.share.deadLettering(&rec) // share.go
	}
	if it.src == fromDead {
		// A requeued dead letter failed again: update it in place, so
		// its key (and a link to it) stays.
		if !f.cfg.state.updateDeadLetter(it, rec) {
			return
		}
	} else if !f.cfg.state.saveDeadLetter(it, rec) {
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
// letter, removing its record from in the same transaction.
func (f *failures) orphan(rec snapshot.Record, from snapshot.Source) bool {
	rec.Reason = reasonUnknown
	rec.Err = fmt.Sprintf("runtime: class %q is not configured", rec.Message.Class)
	rec.SavedAt = time.Now()
	err := f.cfg.state.saveOrphan(rec, from)
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
	// Key is the dead letter's ID, the same on every instance of the
	// group and kept when its partition moves to another instance: the
	// first 8 bytes of the changelog ID of the state file that wrote it,
	// in hex, a dash and its key in that file, e.g.
	// "3f2a9c01d4e5b6a7-12" (with LocalStateOnly, and on a file that
	// never ran with the changelog, its key in this file: "12"). Pass it
	// to [Runtime.Requeue], [Runtime.Discard] and
	// [Runtime.GetDeadLetter].
	Key string
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

func deadLetterOf(id snapshot.DeadID, rec *snapshot.Record) DeadLetter {
	return DeadLetter{Key: id.String(), Message: rec.Message, Reason: rec.Reason, Err: rec.Err,
		Redeliveries: rec.Redeliveries, FirstFailed: rec.FirstFailed, LastFailed: rec.SavedAt}
}

// ErrBadKey is wrapped by the error [Runtime.GetDeadLetter],
// [Runtime.Requeue] and [Runtime.Discard] return for a key that is not of
// a dead letter ID's form. A bare number (the form of keys before IDs) in
// a state file that runs with the changelog, where a number could name
// another instance's dead letter, names none: [ErrNotFound], with the
// ID's form in the error.
var ErrBadKey = errors.New("runtime: bad dead letter key")

// ErrNotOwner is wrapped by every [*NotOwnerError].
var ErrNotOwner = errors.New("runtime: dead letter of a partition this instance does not own")

// NotOwnerError is returned by [Runtime.GetDeadLetter], [Runtime.Requeue]
// and [Runtime.Discard] (with the changelog) for a dead letter that
// exists in the group's changelog in a partition this instance does not
// own: only the partition's owner lists, requeues and discards it, so
// the request was not applied. It names the partition and its owner.
type NotOwnerError struct {
	// Key is the dead letter's ID.
	Key string
	// Topic and Partition are the input partition it belongs to.
	Topic     string
	Partition int
	// Owner is the group member that owns the partition: its
	// Config.Instance with static membership (franz-go), else its client
	// ID @ host and member ID; "" when no member does (a rebalance).
	Owner string
}

// Error says which instance to ask.
func (e *NotOwnerError) Error() string {
	owner := "no instance owns it now (the group is rebalancing or empty): try again"
	if e.Owner != "" {
		owner = fmt.Sprintf("it is owned by instance %s: send the request there", e.Owner)
	}
	return fmt.Sprintf("runtime: dead letter %s belongs to topic %s partition %d, which this instance does not own; %s",
		e.Key, e.Topic, e.Partition, owner)
}

// Unwrap returns [ErrNotOwner].
func (e *NotOwnerError) Unwrap() error { return ErrNotOwner }

// DeadLetters returns up to limit dead letters of class ("" for every
// class) in the order they failed here, starting after the cursor after
// (the zero Cursor for the first page), and the cursor of the next page
// (zero when there is none). With the changelog it lists those of the
// partitions this instance owns (and of no partition). It reads the
// state file and needs a running runtime; it does not wait for
// handlers. A cursor is this instance's: another instance's pages have
// cursors of their own.
func (r *Runtime) DeadLetters(class string, after Cursor, limit int) ([]DeadLetter, Cursor, error) {
	return r.fail.list(class, after, limit)
}

// GetDeadLetter returns the dead letter with ID key. It returns an error
// wrapping [ErrBadKey] for a key that is not an ID, a [*NotOwnerError]
// (with the changelog) for one of a partition another instance owns,
// and one wrapping [ErrNotFound] for one that exists nowhere. Finding
// the owner reads the changelogs of the partitions this instance does
// not own and asks the group's coordinator: that blocks until ctx ends.
func (r *Runtime) GetDeadLetter(ctx context.Context, key string) (DeadLetter, error) {
	_, dl, err := r.fail.get(ctx, key)
	return dl, err
}

// Requeue hands the dead letter with ID key back to its class's pool
// with its attempt and redelivery counts reset: a failure gets its
// class's retries and redeliveries again, and a redelivery takes the
// dead letter's record with it. Its record is removed only once it is
// handled; if it fails for good again the record is updated. In an
// ordered class its key's parked messages run after it succeeds.
// Requeue blocks while the pool is full, until ctx ends. It returns an
// error wrapping [ErrRequeued] while the same dead letter's requeue has
// not finished (or its discard is being written), [ErrNotFound] once it
// is gone (a requeue of it succeeded, or it was discarded), and
// [ErrNotRunning] once the stop has begun; for a key of a partition
// another instance owns, or not an ID, the errors of
// [Runtime.GetDeadLetter]: nothing is requeued then. Concurrent and
// repeated Requeues of one dead letter run it once.
func (r *Runtime) Requeue(ctx context.Context, key string) error {
	return r.throughOwner(ctx, deadop.Requeue, key, r.fail.requeue(ctx, key))
}

// Discard deletes the dead letter with ID key. In an ordered class its
// key's parked messages are released. It writes the state file once
// (one fsync) and returns ctx's error without writing when ctx has
// ended; the write itself is not interrupted. It returns an error
// wrapping [ErrRequeued] while the dead letter's requeue has not
// finished, and the errors of [Runtime.GetDeadLetter] (a
// [*NotOwnerError] for a dead letter another instance owns): nothing is
// deleted then.
func (r *Runtime) Discard(ctx context.Context, key string) error {
	return r.throughOwner(ctx, deadop.Discard, key, r.fail.discard(ctx, key))
}

// throughOwner returns err, the outcome of action on key here, unless it
// is a [*NotOwnerError] naming an owner (found in the changelog): then the
// action is asked of the owner (viaOwner, deadops.go).
func (r *Runtime) throughOwner(ctx context.Context, action, key string, err error) error {
	if ne, ok := errors.AsType[*NotOwnerError](err); ok && ne.Owner != "" {
		return r.viaOwner(ctx, action, key, ne)
	}
	return err
}

// list is [Runtime.DeadLetters].
func (f *failures) list(class string, after Cursor, limit int) ([]DeadLetter, Cursor, error) {
	if _, err := listing(f.cfg.state, "dead letters", limit); err != nil {
		return nil, "", err
	}
	from, err := after.deadKey()
	if err != nil {
		return nil, "", err
	}
	found, next, _, err := f.cfg.state.deadList(snapshot.DeadQuery{Class: class, From: from, Limit: limit, Scan: true,
		Match: func(rec *snapshot.Record) bool {
			// Another partition's owner lists it (a page may come back short).
			return f.cfg.clog.mine(rec)
		}})
	if err != nil {
		return nil, "", fmt.Errorf("runtime: dead letters: %w", err)
	}
	out := make([]DeadLetter, 0, len(found))
	for i := range found {
		out = append(out, deadLetterOf(found[i].ID, &found[i].Record))
	}
	return out, deadCursor(next), nil
}

// get is [Runtime.GetDeadLetter], with the dead letter's key in this
// file.
func (f *failures) get(ctx context.Context, key string) (uint64, DeadLetter, error) {
	id, err := snapshot.ParseDeadID(key)
	if err != nil {
		return 0, DeadLetter{}, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	if _, err := f.cfg.state.get(); err != nil {
		return 0, DeadLetter{}, err
	}
	local, rec, ok, err := f.cfg.state.findDead(id)
	if errors.Is(err, snapshot.ErrDeadID) {
		// A bare number of the old form on a file with IDs: it names no
		// dead letter here (the error says the form).
		return 0, DeadLetter{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return 0, DeadLetter{}, fmt.Errorf("runtime: dead letter %s: %w", key, err)
	}
	if ok && f.cfg.clog.mine(&rec) {
		return local, deadLetterOf(id, &rec), nil
	}
	// Not here, or here in a partition that moved (the new owner
	// restored it and lists, requeues and discards it; this file's copy
	// is unused): with the changelog, it may be another instance's.
	if f.cfg.clog != nil {
		if err := f.cfg.clog.deadElsewhere(ctx, id); err != nil {
			return 0, DeadLetter{}, err
		}
	}
	return 0, DeadLetter{}, fmt.Errorf("%w: dead letter %s", ErrNotFound, key)
}

// claim resolves key and claims its record for a requeue or a discard:
// a requeue of it that ends now deletes its record before it lets go of
// the claim, so what is read under the claim is not a record already
// done. (Read first, the record could be one whose requeue succeeded in
// between, and the message would run twice.) It reads the record again
// under the claim and fails when key names another record of this file
// by then. On success the caller must call f.requeues.finish(local).
func (f *failures) claim(ctx context.Context, key string) (uint64, DeadLetter, error) {
	local, _, err := f.get(ctx, key)
	if err != nil {
		return 0, DeadLetter{}, err
	}
	if !f.requeues.start(local) {
		return 0, DeadLetter{}, fmt.Errorf("%w: dead letter %s", ErrRequeued, key)
	}
	again, dl, err := f.get(ctx, key)
	if err == nil && again != local {
		err = fmt.Errorf("%w: dead letter %s (it was saved again meanwhile)", ErrNotFound, key)
	}
	if err != nil {
		f.requeues.finish(local)
		return 0, DeadLetter{}, err
	}
	return local, dl, nil
}

// requeue is [Runtime.Requeue] on this instance.
func (f *failures) requeue(ctx context.Context, key string) error {
	return f.requeueChecked(ctx, key, nil)
}

// requeueChecked is requeue that, when check is set, first checks the
// claimed dead letter with it and requeues nothing when it returns an
// error; logArgs are added to the log line (an operation's ID).
func (f *failures) requeueChecked(ctx context.Context, key string, check func(DeadLetter) error, logArgs ...any) error {
	local, dl, err := f.claim(ctx, key)
	if err != nil {
		return err
	}
	if check != nil {
		if err := check(dl); err != nil {
			f.requeues.finish(local)
			return fmt.Errorf("dead letter %s: %w", key, err)
		}
	}
	c := f.cfg.classes[dl.Message.Class]
	if c == nil {
		f.requeues.finish(local)
		return fmt.Errorf("%w: dead letter %s has class %q", ErrUnknownClass, key, dl.Message.Class)
	}
	if !f.cfg.accepting.Load() {
		f.requeues.finish(local)
		return ErrNotRunning
	}
	m := dl.Message
	m.Attempt = 0
	it := &item{m: m, src: fromDead, x: &itemExt{key: local}}
	if c.cfg.Ordered {
		c.keys.block(it) // it is its key's blocker; it may run
	}
	if err := c.pool.Submit(ctx, it); err != nil {
		f.requeues.finish(local)
		return fmt.Errorf("runtime: requeue dead letter %s: %w", key, err)
	}
	f.cfg.tally.inc(c, evRequeued)
	f.cfg.log.Info("dead letter requeued", append([]any{"class", c.cfg.Name, "id", dl.Message.ID, "key", key}, logArgs...)...)
	return nil
}

// discard is [Runtime.Discard] on this instance.
func (f *failures) discard(ctx context.Context, key string) error {
	return f.discardChecked(ctx, key, nil)
}

// discardChecked is discard with a check and log arguments, as
// requeueChecked.
func (f *failures) discardChecked(ctx context.Context, key string, check func(DeadLetter) error, logArgs ...any) error {
	// Claimed like a requeue, for the same reason, and so that a Requeue
	// cannot hand the record to its pool between our read and our delete
	// (its message would run, and its key be released under it).
	local, dl, err := f.claim(ctx, key)
	if err != nil {
		return err
	}
	defer f.requeues.finish(local)
	if check != nil {
		if err := check(dl); err != nil {
			return fmt.Errorf("dead letter %s: %w", key, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("runtime: discard dead letter %s: %w", key, err)
	}
	if err := f.cfg.state.deleteDead(local); err != nil {
		return fmt.Errorf("runtime: discard dead letter %s: %w", key, err)
	}
	c := f.cfg.classes[dl.Message.Class]
	f.cfg.tally.inc(c, evDiscarded)
	f.cfg.log.Info("dead letter discarded", append([]any{"class", dl.Message.Class, "id", dl.Message.ID, "key", key}, logArgs...)...)
	f.removed(c, &dl.Message)
	return nil
}

// removed is what follows the delete of dead letter m of class c (nil
// for a class not configured) by a discard or the retention: in an
// ordered class its key's parked messages are released.
func (f *failures) removed(c *class, m *handoff.Message) {
	if c != nil && c.cfg.Ordered {
		c.keys.unblock(m.Key, m.ID)
	}
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

// claimed returns the keys claimed now.
func (q *requeues) claimed() []uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Collect(maps.Keys(q.keys))
}

// finish lets go of key's claim.
func (q *requeues) finish(key uint64) {
	q.mu.Lock()
	delete(q.keys, key)
	q.mu.Unlock()
}
