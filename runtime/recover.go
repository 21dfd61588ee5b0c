package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/handoff-go/handoff/snapshot"
)

// Recovery, the start's second step: what the state file holds is put
// back to work before the first fetch.

// recover restores the state of ordered classes' keys and re-pushes the
// pending records of the state file into their pools, oldest first. A
// record stays in the file until its message is done, so a crash here
// loses nothing. A stop during recovery leaves the records not yet pushed
// where they are.
func (r *Runtime) recover(ctx context.Context, rep *Report) error {
	r.orphans.collect() // one line for the saved messages of unknown classes
	defer r.orphans.flush(r.log)
	if err := r.restoreKeys(rep); err != nil {
		return fmt.Errorf("runtime: recover: %w", err)
	}
	// Keys left releasing (parked messages, no blocker) start releasing
	// once the saved messages are pushed.
	defer r.startRestoredReleases()
	// The records are pushed batch by batch while the next ones are
	// still being read from the file.
	var failed error
	stopped := false
	bad, err := r.store.ScanPending(func(batch []snapshot.Entry) bool {
		for i := range batch {
			pushed, err := r.repush(ctx, &batch[i], rep)
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
	rep.Quarantined = len(bad)
	for _, de := range bad {
		r.log.Error("undecodable record moved to quarantine", "err", de)
	}
	if stopped {
		r.log.Info("recovery stopped by the stop; the rest stays in the state file", "repushed", rep.Repushed)
	}
	return nil
}

// repush pushes the pending record e into the pool of its class, or makes
// it a dead letter when its class is not configured. It reports false
// when the stop ended the push, and an error when the dead letter could
// not be written.
func (r *Runtime) repush(ctx context.Context, e *snapshot.Entry, rep *Report) (bool, error) {
	c := r.classes[e.Record.Message.Class]
	if c == nil {
		key := e.Key
		if !r.orphan(e.Record, func(tx *snapshot.Tx) error { return tx.DeletePending(key) }) {
			return false, fmt.Errorf("could not dead-letter a message of unknown class %q", e.Record.Message.Class)
		}
		rep.UnknownClass++
		return true, nil
	}
	it := fromRecord(e.Record, fromPending)
	it.key = e.Key
	if c.cfg.Ordered && e.Record.Reason == snapshot.ReasonRequeued {
		// A dead letter requeued offline: it is older than the messages
		// parked behind it, so it runs first and its success releases
		// them.
		r.blockIfReleasing(c, it)
	}
	if r.repushPaused(c, it) {
		rep.Repushed++
		return true, nil
	}
	if err := c.pool.Submit(ctx, it); err != nil {
		return false, nil
	}
	rep.Repushed++
	return true, nil
}

// orphan makes a saved message whose class is not configured a dead
// letter, removing its record with del in the same transaction.
func (r *Runtime) orphan(rec snapshot.Record, del func(tx *snapshot.Tx) error) bool {
	rec.Reason = reasonUnknown
	rec.Err = fmt.Sprintf("runtime: class %q is not configured", rec.Message.Class)
	rec.SavedAt = time.Now()
	err := r.store.Update(func(tx *snapshot.Tx) error {
		if _, err := tx.SaveDead(rec); err != nil {
			return err
		}
		return del(tx)
	})
	if err != nil {
		r.log.Error("message of unknown class not dead-lettered", "class", rec.Message.Class, "id", rec.Message.ID, "err", err)
		return false
	}
	r.inc(nil, outDeadLettered)
	r.orphans.add(r.log, rec.Message)
	return true
}

// unparkStrays moves parked messages whose class is gone to the dead
// letters, and those whose class is no longer ordered to pending, where the
// recovery re-pushes them.
func (r *Runtime) unparkStrays() error {
	parked, err := r.parkedKeys()
	if err != nil {
		return err
	}
	for _, pk := range parked {
		c := r.classes[pk.Class]
		if c != nil && c.cfg.Ordered {
			continue
		}
		entries, err := r.parked(pk.Class, pk.Key)
		if err != nil {
			return err
		}
		err = r.store.Update(func(tx *snapshot.Tx) error {
			for _, e := range entries {
				rec := e.Record
				var err error
				if c == nil {
					rec.Reason = reasonUnknown
					rec.Err = fmt.Sprintf("runtime: class %q is not configured", pk.Class)
					_, err = tx.SaveDead(rec)
				} else {
					_, err = tx.SavePending(rec)
				}
				if err != nil {
					return err
				}
				if err := tx.DeleteParked(e.Key); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		r.log.Warn("parked messages of a class that is gone or no longer ordered moved", "class", pk.Class,
			"count", len(entries), "to_dead_letters", c == nil)
	}
	return nil
}

// restoreKeys rebuilds the blocked and releasing keys of ordered classes
// from the state file: a dead letter or a message waiting for redelivery
// blocks its key; a key with parked messages and no blocker is released.
func (r *Runtime) restoreKeys(rep *Report) error {
	if err := r.unparkStrays(); err != nil {
		return err
	}
	ordered := false
	for _, c := range r.order {
		ordered = ordered || c.cfg.Ordered
	}
	if !ordered {
		return nil
	}
	if err := r.blockSaved(); err != nil {
		return err
	}
	if err := r.releaseParked(); err != nil {
		return err
	}
	for _, c := range r.order {
		if c.parking != nil {
			c.parking.mu.Lock()
			rep.BlockedKeys += len(c.parking.keys)
			c.parking.mu.Unlock()
		}
	}
	return nil
}

// restorePage is how many records restoreKeys reads at a time.
const restorePage = 1000

// blockSaved blocks the keys of ordered classes' dead letters and of
// their messages waiting for a redelivery.
func (r *Runtime) blockSaved() error {
	block := func(rec snapshot.Record) {
		c := r.classes[rec.Message.Class]
		if c == nil || !c.cfg.Ordered {
			return
		}
		r.block(c, &item{msg: rec.Message})
	}
	for after := uint64(0); ; {
		var page []snapshot.Entry
		var next uint64
		err := r.store.View(func(tx *snapshot.Tx) (err error) { page, next, err = tx.DeadPage("", after, restorePage); return err })
		if err != nil {
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
		var page []snapshot.DelayedEntry
		err := r.store.View(func(tx *snapshot.Tx) (err error) { page, err = tx.ListDelayed(after, restorePage); return err })
		if err != nil {
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

// releaseParked marks releasing the parked keys of ordered classes that
// nothing blocks; their releases start once the saved messages are
// pushed (startRestoredReleases).
func (r *Runtime) releaseParked() error {
	parked, err := r.parkedKeys()
	if err != nil {
		return err
	}
	for _, pk := range parked {
		c := r.classes[pk.Class]
		if c == nil || !c.cfg.Ordered {
			continue // moved by unparkStrays
		}
		c.parking.mu.Lock()
		if c.parking.keys[string(pk.Key)] == nil {
			c.parking.keys[string(pk.Key)] = &keyState{releasing: true, release: 1}
		}
		c.parking.mu.Unlock()
	}
	return nil
}
