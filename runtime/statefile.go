package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff/snapshot"
)

// stateFile is the state file as the components share it: open from the
// start of Run (open) to the end of its stop (close). The writes that
// move a message from one bucket to another, and the reads that more than
// one component makes, are here. A read transaction cannot write, so
// records found undecodable are moved to the quarantine bucket
// afterwards, in a write of their own.
type stateFile struct {
	log   *slog.Logger
	store *snapshot.State // set by open, before any component uses it
	open  atomic.Bool     // the admin API may use it
	// sched is told that delayed records it handed to a pool are
	// deleted (scheduler.forget); New sets it once the scheduler exists.
	// Nil (a test's) tells none.
	sched *scheduler
	// clog, set by the start when the changelog is on, keeps the settle
	// of a message whose write committed to the file but not to the
	// changelog (stateLog.await).
	clog *stateLog
	// beforeWrite, when set by a test, runs in the transaction of a move
	// (see move) or of the delete of a done parked message before it
	// writes, with the operation's name; an error it returns fails the
	// transaction.
	beforeWrite func(op string, it *item) error
	// beforeSnapshot, when set by a test, runs just before the stop's
	// snapshot transaction.
	beforeSnapshot func(*snapshot.State)
	// writeFails counts the writes that failed, per target
	// (handoff_state_write_failures_total).
	writeFails [numWriteTargets]atomic.Int64
	// lost counts the times the file was found deleted or replaced
	// while open (handoff_state_file_lost_total); replaced is set while
	// another file holds its path (not ready).
	lost     atomic.Int64
	replaced atomic.Bool
}

// watchInterval is how often a running runtime checks that its state
// file is still at its path.
const watchInterval = time.Second

// watch checks every watchInterval until ctx ends that the state file is
// still at its path, and puts it back when it is not (checkGone). It
// blocks until ctx ends.
func (f *stateFile) watch(ctx context.Context, beat func()) {
	every(ctx, watchInterval, func() {
		beat()
		f.checkGone()
	})
}

// checkGone puts the state file back at its path when it was deleted
// while open, loudly: whatever deleted it (an operator, a cleanup of the
// volume) would otherwise take the stop's snapshot, the dead letters and
// every other record with it at the next start. Another file at the path
// is left alone, logged, and makes the runtime not ready.
func (f *stateFile) checkGone() {
	gone, err := f.store.FileGone()
	if err != nil {
		f.log.Warn("state file not checked", "path", f.store.Path(), "err", err)
		return
	}
	if !gone {
		f.replaced.Store(false)
		return
	}
	if f.replaced.Load() {
		return // logged when found
	}
	f.lost.Add(1)
	err = f.store.Recreate()
	switch {
	case errors.Is(err, snapshot.ErrFileReplaced):
		f.replaced.Store(true)
		f.log.Error("state file replaced by another file while running; this process keeps writing to its own, which the next start will not find: stop it and put the right file back",
			"path", f.store.Path(), "err", err)
	case err != nil:
		f.log.Error("state file deleted while running, and not written back; retrying every second", "path", f.store.Path(), "err", err)
	default:
		f.log.Error("state file deleted while running; written back from the open file, nothing lost", "path", f.store.Path())
	}
}

// writeTarget is where a state write failed: the file or its changelog.
type writeTarget int

const (
	toFile writeTarget = iota
	toChangelog
	numWriteTargets
)

var writeTargetNames = [numWriteTargets]string{"file", "changelog"}

// writeFailed counts a write that failed: to the file, or (committed to
// the file) to the changelog when err says so.
func (f *stateFile) writeFailed(err error) {
	if isChangelogErr(err) {
		f.writeFails[toChangelog].Add(1)
		return
	}
	f.writeFails[toFile].Add(1)
}

// opened is what a component gets from New: set to the file by Run.
func (f *stateFile) opened(store *snapshot.State) {
	f.store = store
	f.open.Store(true)
}

// close closes the file; the admin API may no longer use it.
func (f *stateFile) close() error {
	f.checkGone() // a file deleted since the last check gets the stop's snapshot too
	f.open.Store(false)
	return f.store.Close()
}

// get returns the open state file, or ErrNotRunning.
func (f *stateFile) get() (*snapshot.State, error) {
	if !f.open.Load() {
		return nil, ErrNotRunning
	}
	return f.store, nil
}

// quarantine moves bad to the quarantine bucket (a no-op for none).
func (f *stateFile) quarantine(bad []*snapshot.DecodeError) error {
	if len(bad) == 0 {
		return nil
	}
	return f.store.Quarantine(bad...)
}

// parked returns the records parked under class's key, in park order.
func (f *stateFile) parked(class string, key []byte) ([]snapshot.ParkedEntry, error) {
	entries, bad, err := f.store.Parked(class, key)
	if err != nil {
		return nil, err
	}
	return entries, f.quarantine(bad)
}

// decodeErrors splits the error of a listing that reports undecodable
// records in a join of [*snapshot.DecodeError]s (stateFile.deadRecords,
// State.ListDelayed) into those and the rest, nil when there is none.
func decodeErrors(err error) ([]*snapshot.DecodeError, error) {
	if err == nil {
		return nil, nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var bad []*snapshot.DecodeError
	var rest []error
	for _, e := range errs {
		if de, ok := e.(*snapshot.DecodeError); ok {
			bad = append(bad, de)
			continue
		}
		rest = append(rest, e)
	}
	return bad, errors.Join(rest...)
}

// parkedKeys returns every parked (class, key) with its count.
func (f *stateFile) parkedKeys() ([]snapshot.ParkedCount, error) {
	keys, bad, err := f.store.ParkedKeys()
	if err != nil {
		return nil, err
	}
	return keys, f.quarantine(bad)
}

// moveTo runs move, a State move of the item (snapshot.Move: its source
// record deleted and the item saved elsewhere, in one transaction), and
// then settles its offset: the offset counts as persisted once the
// transaction has committed. On failure nothing is settled, so Kafka
// delivers the message again after a restart. Workers' moves share
// transactions (one fsync for many).
func (f *stateFile) moveTo(it *item, what string, move func(m snapshot.Move) error) bool {
	return f.write(it, what, false, move)
}

// moveNow is moveTo in a transaction of its own, for callers that hold a
// lock and must not wait for a shared one to fill.
func (f *stateFile) moveNow(it *item, what string, move func(m snapshot.Move) error) bool {
	return f.write(it, what, true, move)
}

// write runs move for the item, in a transaction of its own when alone,
// and settles the item once it has committed.
func (f *stateFile) write(it *item, what string, alone bool, move func(m snapshot.Move) error) bool {
	m := snapshot.Move{From: it.source(), Alone: alone, Check: f.check(what, it)}
	err := move(m)
	if err != nil {
		f.writeFailed(err)
	}
	if err != nil && isChangelogErr(err) && f.clog != nil {
		// Saved to the file but not to the changelog: the message is
		// kept, and settled once the changelog has the write.
		f.log.Warn("state file write not written to the changelog; offset stays uncommitted until it is", "op", what,
			"class", it.env().Class, "id", it.env().ID, "err", err)
		f.clog.await(f.settleFunc(it))
		return true
	}
	if err != nil {
		f.log.Error("state file write failed; offset stays uncommitted", "op", what,
			"class", it.env().Class, "id", it.env().ID, "err", err)
		it.unsaved = true
		return false
	}
	// What the message's origin needs once it is saved elsewhere: a
	// Kafka offset is settled, a delayed record is gone for the
	// scheduler.
	f.settleFunc(it)()
	return true
}

// settleFunc returns what settles the item once it is saved elsewhere: a
// Kafka offset is settled (a re-pushed saved Kafka message's fetched
// copy too), a delayed record is gone for the scheduler. It
// keeps what it needs of it, not it: the item may be recycled before.
func (f *stateFile) settleFunc(it *item) func() {
	tr, slot := it.tracker(), it.slot
	kafka := it.src == fromKafka
	delayed := it.src == fromDelayed
	key := it.extOrZero().delayedKey
	saved := it.extOrZero().saved // a re-pushed saved Kafka message's (progress.go)
	share := it.extOrZero().share
	return func() {
		if kafka {
			tr.settle(slot)
		}
		share.saved() // a share record's (share.go)
		saved.finish()
		if delayed && f.sched != nil {
			f.sched.forget(key)
		}
	}
}

// check is the Move.Check of a write of it named op: the write failure
// a test injects with beforeWrite, nil without one.
func (f *stateFile) check(op string, it *item) func() error {
	if f.beforeWrite == nil {
		return nil
	}
	return func() error { return f.beforeWrite(op, it) }
}

func (f *stateFile) logErr(what string, it *item, err error) {
	if err != nil {
		f.writeFailed(err)
		f.log.Error("state file write failed; the message may run again after a restart", "op", what,
			"class", it.env().Class, "id", it.env().ID, "err", err)
	}
}

// checkIdentity records the group and the instance in a new state file,
// and refuses a file of another group. A file of another instance of the
// same group is taken over with a warning.
func checkIdentity(store *snapshot.State, group, instance string, log *slog.Logger) error {
	kept, ok, inst, instOK, err := store.Identity()
	if err != nil {
		return fmt.Errorf("runtime: check state file identity: %w", err)
	}
	switch {
	case ok && group != "" && string(kept) != group:
		return fmt.Errorf("%w: %s belongs to group %q, configured group is %q", ErrOtherGroup, store.Path(), kept, group)
	case !ok && group != "":
		if err := store.SetGroup(group); err != nil {
			return fmt.Errorf("runtime: record group in state file: %w", err)
		}
	}
	if instOK && string(inst) == instance {
		return nil
	}
	if instOK {
		log.Warn("state file was written by another instance of the group; taking it over", "path", store.Path(),
			"group", group, "previous_instance", string(inst), "instance", instance)
	}
	if err := store.SetInstance(instance); err != nil {
		return fmt.Errorf("runtime: record instance in state file: %w", err)
	}
	return nil
}

// recordClasses notes the configured classes in the state file, which
// keeps every class name it has seen (the CLI's pause refuses others).
// It writes only when a class is new to the file.
func recordClasses(store *snapshot.State, classes []Class) error {
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = c.Name
	}
	known, err := store.Classes()
	if err != nil {
		return fmt.Errorf("runtime: record classes in state file: %w", err)
	}
	if containsAll(known, names) {
		return nil
	}
	if err := store.AddClasses(names...); err != nil {
		return fmt.Errorf("runtime: record classes in state file: %w", err)
	}
	return nil
}

// containsAll reports whether every name is in set.
func containsAll(set, names []string) bool {
	for _, n := range names {
		if !slices.Contains(set, n) {
			return false
		}
	}
	return true
}
