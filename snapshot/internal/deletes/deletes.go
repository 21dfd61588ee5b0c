// Package deletes batches the deletes of state-file records whose
// messages are done: workers queue them, and one transaction every
// Interval deletes what was queued (one fsync for many). It knows the
// state file's record keys and nothing of the runtime; package snapshot
// exports it as DoneQueue and runs its transactions.
package deletes

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// Interval is how often the records of done re-pushed and delayed
// messages are deleted, in one transaction each time.
const Interval = 200 * time.Millisecond

// Queue collects the pending and delayed records whose messages are
// done, so that they are deleted many in one transaction (one fsync)
// instead of one each, and the parked ones whose own delete failed.
// Workers add to it; Run deletes every Interval, and the stop's snapshot
// takes what is left into its own transaction. A crash before a batch is
// written leaves the records there: they run again (at-least-once). The
// zero Queue is ready; its methods are safe for concurrent use.
type Queue struct {
	mu   sync.Mutex
	done Records
	// flushing orders Flush and Run's batches: a Flush returns once the
	// batch under way, if any, is deleted too.
	flushing sync.Mutex
	// undeleted holds the keys of the parked records queued here: their
	// key's release skips them, as pushed again they would run again.
	// They are kept for the rest of the run, deleted or not: a parked key
	// is never reused, and forgetting one once deleted could race with a
	// release that read its record before the delete.
	undeleted map[string]struct{}
}

// Records are records of done messages, waiting to be deleted.
type Records struct {
	Pending []uint64
	Delayed []store.DelayedKey
	Parked  []store.ParkedKey
}

// Empty reports whether there are none.
func (d Records) Empty() bool { return len(d.Pending)+len(d.Delayed)+len(d.Parked) == 0 }

// Delete deletes them inside tx.
func (d Records) Delete(tx *store.Tx) error {
	if err := tx.DeletePending(d.Pending...); err != nil {
		return err
	}
	if err := tx.DeleteParked(d.Parked...); err != nil {
		return err
	}
	return tx.DeleteDelayed(d.Delayed...)
}

// Pending queues the pending record key for deletion.
func (d *Queue) Pending(key uint64) {
	d.mu.Lock()
	d.done.Pending = append(d.done.Pending, key)
	d.mu.Unlock()
}

// Delayed queues the delayed record key for deletion.
func (d *Queue) Delayed(key store.DelayedKey) {
	d.mu.Lock()
	d.done.Delayed = append(d.done.Delayed, key)
	d.mu.Unlock()
}

// Parked queues the record key of a done parked message whose delete
// failed: the batch retries it, and releases skip it (see NotDone).
func (d *Queue) Parked(key store.ParkedKey) {
	d.mu.Lock()
	d.done.Parked = append(d.done.Parked, key)
	if d.undeleted == nil {
		d.undeleted = map[string]struct{}{}
	}
	d.undeleted[string(key)] = struct{}{}
	d.mu.Unlock()
}

// NotDone returns the entries of es but those queued by Parked: what a
// key's release may push. It reuses es' array.
func (d *Queue) NotDone(es []store.ParkedEntry) []store.ParkedEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.undeleted) == 0 {
		return es
	}
	return slices.DeleteFunc(es, func(e store.ParkedEntry) bool {
		_, done := d.undeleted[string(e.Key)]
		return done
	})
}

// Take returns and forgets the queued records.
func (d *Queue) Take() Records {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.done
	d.done = Records{}
	return out
}

// putBack queues again records whose delete failed, before the newer ones.
func (d *Queue) putBack(failed Records) {
	d.mu.Lock()
	d.done.Pending = append(failed.Pending, d.done.Pending...)
	d.done.Delayed = append(failed.Delayed, d.done.Delayed...)
	d.done.Parked = append(failed.Parked, d.done.Parked...)
	d.mu.Unlock()
}

// Run deletes the queued records every Interval until ctx ends, each
// time in one call of del (one transaction), and tells deleted which
// were, once del returned nil. It
// blocks until ctx ends; a failed delete is logged, passed to failed and
// its records are queued again, before the newer ones. It calls beat on every turn, so
// that a write that never returns (a hung disk) shows as a loop that
// stopped turning.
func (d *Queue) Run(ctx context.Context, del func(Records) error, log *slog.Logger, beat func(), deleted func(Records), failed func(error)) {
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		beat()
		if batch, err := d.flush(del, deleted); err != nil {
			log.Error("records of done messages not deleted; they will run again", "pending", len(batch.Pending),
				"delayed", len(batch.Delayed), "parked", len(batch.Parked), "err", err)
			failed(err)
		}
	}
}

// Flush deletes now, in one call of del, the records queued, and tells
// deleted which were, as Run's next batch would; a batch of Run's under
// way is waited for, so once Flush returns nil every record queued
// before the call is deleted. A failed delete queues its records again,
// before the newer ones, and is returned.
func (d *Queue) Flush(del func(Records) error, deleted func(Records)) error {
	_, err := d.flush(del, deleted)
	return err
}

// flush is Flush, which also returns the records it took.
func (d *Queue) flush(del func(Records) error, deleted func(Records)) (Records, error) {
	d.flushing.Lock()
	defer d.flushing.Unlock()
	batch := d.Take()
	if batch.Empty() {
		return batch, nil
	}
	if err := del(batch); err != nil {
		d.putBack(batch)
		return batch, err
	}
	deleted(batch)
	return batch, nil
}
