package runtime

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/handoff-go/handoff"

	"github.com/handoff-go/handoff/snapshot"
)

// Recovery, the start's second step: what the state file holds is put
// back to work before the first fetch.

// recovery is what the start's recovery works with: the state file, the
// classes (their pools, holds and ordered keys) and the dead letters of
// classes no longer configured.
type recovery struct {
	state   *stateFile
	classes map[string]*class
	order   []*class
	// fail makes a saved message of a class no longer configured a dead
	// letter, deleting its record (failures.orphan).
	fail *failures
	// orphans collects the orphans' log lines into one while the
	// recovery runs.
	orphans *orphans
	log     *slog.Logger
	// want, when set, picks the records this recovery restores: those of
	// one partition at its assignment, those of no partition at the start
	// (see stateLog). Nil means every record.
	want func(*snapshot.Record) bool
	// pushed, when set (a restore's), marks a pending record's key
	// before its message is pushed (stateLog.markPushed), and a key
	// marked already is not pushed again: its message is this instance's
	// still. A push that failed ends its mark. Nil marks nothing.
	pushed *stateLog
	// resume, when set, learns the saved Kafka messages it re-pushes, so
	// that the fetch does not run their fetched copies; elsewhere drops
	// the saved ones handled elsewhere since (progress.go).
	resume    *resumes
	elsewhere *recoveryRun
	// strays is whether it moves the parked records of classes gone or no
	// longer ordered first: the start's recovery does, once.
	strays bool
	// released are the keys it marked releasing, started at its end.
	released map[*class][][]byte
}

// wants reports whether the recovery restores rec.
func (v *recovery) wants(rec *snapshot.Record) bool { return v.want == nil || v.want(rec) }

// run restores the state of ordered classes' keys and re-pushes the
// pending records of the state file into their pools, oldest first. A
// record stays in the file until its message is done, so a crash here
// loses nothing. A stop during recovery leaves the records not yet pushed
// where they are.
func (v *recovery) run(ctx context.Context, rep *Report) error {
	v.orphans.collect() // one line for the saved messages of unknown classes
	defer v.orphans.flush(v.log)
	if err := v.restoreKeys(rep); err != nil {
		return fmt.Errorf("runtime: recover: %w", err)
	}
	// Keys left releasing (parked messages, no blocker) start releasing
	// once the saved messages are pushed.
	defer func() {
		for c, keys := range v.released {
			c.keys.startRestored(keys)
		}
	}()
	// The records are pushed batch by batch while the next ones are
	// still being read from the file.
	var failed error
	stopped := false
	bad, err := v.state.scanPending(func(batch []snapshot.Entry) bool {
		for i := range batch {
			if !v.wants(&batch[i].Record) {
				continue
			}
			pushed, err := v.repush(ctx, &batch[i], rep)
			if err != nil {
				failed = err
				return false
			}
			if !pushed {
				stopped = true
				return false
			}
		}
		return true
	})
	if failed != nil {
		return fmt.Errorf("runtime: recover: %w", failed)
	}
	if err != nil {
		return fmt.Errorf("runtime: recover: %w", err)
	}
	if n, err := v.elsewhere.drop(v.pushed); err != nil {
		return fmt.Errorf("runtime: recover: delete saved messages handled elsewhere: %w", err)
	} else if n > 0 {
		v.log.Info("saved messages handled elsewhere since they were saved dropped (the group committed past them)", "dropped", n)
	}
	rep.Quarantined += len(bad)
	for _, de := range bad {
		v.log.Error("undecodable record moved to quarantine", "err", de)
	}
	if stopped {
		v.log.Info("recovery stopped by the stop; the rest stays in the state file", "repushed", rep.Repushed)
	}
	return nil
}

// repush pushes the pending record e into the pool of its class, or makes
// it a dead letter when its class is not configured. It reports false
// when the stop ended the push, and an error when the dead letter could
// not be written.
func (v *recovery) repush(ctx context.Context, e *snapshot.Entry, rep *Report) (bool, error) {
	c := v.classes[e.Record.Message.Class]
	if c == nil {
		key := e.Key
		if !v.fail.orphan(e.Record, pendingSource(key)) {
			return false, fmt.Errorf("could not dead-letter a message of unknown class %q", e.Record.Message.Class)
		}
		rep.UnknownClass++
		return true, nil
	}
	if v.pushed != nil && !v.pushed.markPushed(e.Key) {
		return true, nil // pushed by an earlier restore, and not done with here
	}
	if v.elsewhere.handledElsewhere(ctx, &e.Record) {
		v.elsewhere.dropped = append(v.elsewhere.dropped, e.Key) // deleted at the end of run
		return true, nil
	}
	if ctx.Err() != nil {
		// The stop, or the partition's revocation (also while the
		// committed offsets were asked): nothing more is pushed (a pool
		// with room would still take it, to run on a partition this
		// instance no longer owns).
		v.pushed.unmarkPushed(e.Key)
		return false, nil
	}
	it := fromRecord(e.Record, fromPending)
	it.ext().key = e.Key
	if v.resume != nil {
		it.x.saved = v.resume.pushed(&e.Record)
	}
	if c.cfg.Ordered && (e.Record.Reason == snapshot.ReasonRequeued || e.Record.Reason == reasonFailed) {
		// A dead letter requeued offline, or a submitted message whose
		// failure's save failed (kept unsaved, it blocked its key until
		// the stop saved it here): it is older than the messages parked
		// behind it, so it runs first and its success releases them.
		c.keys.blockIfReleasing(it)
	}
	if err := c.hold.Repush(ctx, it); err != nil {
		v.pushed.unmarkPushed(e.Key)
		it.x.saved.leave()
		return false, nil
	}
	rep.Repushed++
	return true, nil
}

// unparkStrays moves parked messages whose class is gone to the dead
// letters, and those whose class is no longer ordered to pending, where the
// recovery re-pushes them.
func (v *recovery) unparkStrays() error {
	parked, err := v.state.parkedKeys()
	if err != nil {
		return err
	}
	for _, pk := range parked {
		c := v.classes[pk.Class]
		if c != nil && c.cfg.Ordered {
			continue
		}
		entries, err := v.state.parked(pk.Class, pk.Key)
		if err != nil {
			return err
		}
		err = v.state.unpark(pk.Class, entries, c == nil)
		if err != nil {
			return err
		}
		v.log.Warn("parked messages of a class that is gone or no longer ordered moved", "class", pk.Class,
			"count", len(entries), "to_dead_letters", c == nil)
	}
	return nil
}

// restoreKeys rebuilds the blocked and releasing keys of ordered classes
// from the state file: a dead letter or a message waiting for redelivery
// blocks its key; a key with parked messages and no blocker is released.
func (v *recovery) restoreKeys(rep *Report) error {
	if v.strays {
		if err := v.unparkStrays(); err != nil {
			return err
		}
	}
	ordered := false
	before := 0 // keys blocked or releasing already: another partition's
	for _, c := range v.order {
		ordered = ordered || c.cfg.Ordered
		if c.keys != nil {
			before += c.keys.count()
		}
	}
	if !ordered {
		return nil
	}
	if err := v.blockSaved(rep); err != nil {
		return err
	}
	if err := v.releaseParked(); err != nil {
		return err
	}
	after := 0
	for _, c := range v.order {
		if c.keys != nil {
			after += c.keys.count()
		}
	}
	rep.BlockedKeys += after - before
	return nil
}

// restorePage is how many records restoreKeys reads at a time.
const restorePage = 1000

// blockSaved blocks the keys of ordered classes' dead letters and of
// their messages waiting for a redelivery.
func (v *recovery) blockSaved(rep *Report) error {
	block := v.blockKey
	for after := uint64(0); ; {
		page, next, err := v.state.deadRecords("", after, restorePage)
		if err := v.quarantineListed(err, rep); err != nil {
			return err
		}
		for _, e := range page {
			block(e.Record)
		}
		if next == 0 {
			break
		}
		after = next
	}
	var after snapshot.DelayedKey
	for {
		page, err := v.state.listDelayed(after, restorePage)
		if err := v.quarantineListed(err, rep); err != nil {
			return err
		}
		for _, e := range page {
			if e.Record.Reason == reasonRedelivery {
				block(e.Record)
			}
		}
		if len(page) < restorePage {
			return nil
		}
		after = page[len(page)-1].Key
	}
}

// blockKey blocks the key of rec, a dead letter or a message waiting
// for its redelivery, if its class is ordered and the recovery restores
// it.
func (v *recovery) blockKey(rec snapshot.Record) {
	c := v.classes[rec.Message.Class]
	if c == nil || !c.cfg.Ordered || !v.wants(&rec) {
		return
	}
	c.keys.block(&item{m: rec.Message})
}

// quarantineListed moves the undecodable records a listing's err
// reports to the quarantine, counting and logging each, and returns the
// rest of err: one bad record does not fail the start. An undecodable
// dead letter stays where it is (the state file quarantines only what
// the delivery path reads) and is logged: it blocks no key, since its
// key cannot be read.
func (v *recovery) quarantineListed(err error, rep *Report) error {
	bad, err := decodeErrors(err)
	if err != nil {
		return err
	}
	moved := bad[:0:0]
	for _, de := range bad {
		if de.Bucket == snapshot.BucketDead {
			v.log.Error("undecodable dead letter left in the state file", "err", de)
			continue
		}
		moved = append(moved, de)
	}
	if err := v.state.quarantine(moved); err != nil {
		return err
	}
	rep.Quarantined += len(moved)
	for _, de := range moved {
		v.log.Error("undecodable record moved to quarantine", "err", de)
	}
	return nil
}

// releaseParked marks releasing the parked keys of ordered classes that
// nothing blocks; their releases start once the saved messages are
// pushed (orderedKeys.startRestored).
func (v *recovery) releaseParked() error {
	parked, err := v.state.parkedKeys()
	if err != nil {
		return err
	}
	for _, pk := range parked {
		c := v.classes[pk.Class]
		if c == nil || !c.cfg.Ordered {
			continue // moved by unparkStrays
		}
		var first *handoff.Message
		if v.want != nil {
			// A key's parked records travel together: the first one
			// says where.
			entries, err := v.state.parked(pk.Class, pk.Key)
			if err != nil {
				return err
			}
			if len(entries) == 0 || !v.want(&entries[0].Record) {
				continue
			}
			first = &entries[0].Record.Message
		}
		if c.keys.restoreReleasing(pk.Key, first) {
			if v.released == nil {
				v.released = map[*class][][]byte{}
			}
			v.released[c] = append(v.released[c], pk.Key)
		}
	}
	return nil
}
