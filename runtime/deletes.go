package runtime

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/handoff-go/handoff/snapshot"
)

// deleteInterval is how often the records of done re-pushed and delayed
// messages are deleted, in one transaction each time.
const deleteInterval = 200 * time.Millisecond

// deletes collects the pending and delayed records whose messages are
// done, so that they are deleted many in one transaction (one fsync)
// instead of one each, and the parked ones whose own delete failed.
// Workers add to it; run deletes every deleteInterval, and the stop's
// snapshot takes what is left into its own transaction. A crash before a
// batch is written leaves the records there: they run again
// (at-least-once).
type deletes struct {
	mu   sync.Mutex
	done doneRecords
	// undeleted holds the keys of the parked records queued here: their
	// key's release skips them, as pushed again they would run again.
	// They are kept for the rest of the run, deleted or not: a parked key
	// is never reused, and forgetting one once deleted could race with a
	// release that read its record before the delete.
	undeleted map[string]struct{}
}

// doneRecords are records of done messages, waiting to be deleted.
type doneRecords struct {
	pending []uint64
	delayed []snapshot.DelayedKey
	parked  []snapshot.ParkedKey
}

func (d doneRecords) empty() bool { return len(d.pending)+len(d.delayed)+len(d.parked) == 0 }

// delete deletes them inside tx.
func (d doneRecords) delete(tx *snapshot.Tx) error {
	if err := tx.DeletePending(d.pending...); err != nil {
		return err
	}
	if err := tx.DeleteParked(d.parked...); err != nil {
		return err
	}
	return tx.DeleteDelayed(d.delayed...)
}

// pending queues the pending record key for deletion.
func (d *deletes) pending(key uint64) {
	d.mu.Lock()
	d.done.pending = append(d.done.pending, key)
	d.mu.Unlock()
}

// delayed queues the delayed record key for deletion.
func (d *deletes) delayed(key snapshot.DelayedKey) {
	d.mu.Lock()
	d.done.delayed = append(d.done.delayed, key)
	d.mu.Unlock()
}

// parked queues the record key of a done parked message whose delete
// failed: the batch retries it, and releases skip it (see notDone).
func (d *deletes) parked(key snapshot.ParkedKey) {
	d.mu.Lock()
	d.done.parked = append(d.done.parked, key)
	if d.undeleted == nil {
		d.undeleted = map[string]struct{}{}
	}
	d.undeleted[string(key)] = struct{}{}
	d.mu.Unlock()
}

// notDone returns the entries of es but those queued by parked: what a
// key's release may push.
func (d *deletes) notDone(es []snapshot.ParkedEntry) []snapshot.ParkedEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.undeleted) == 0 {
		return es
	}
	kept := es[:0]
	for _, e := range es {
		if _, done := d.undeleted[string(e.Key)]; !done {
			kept = append(kept, e)
		}
	}
	return kept
}

// take returns and forgets the queued records.
func (d *deletes) take() doneRecords {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.done
	d.done = doneRecords{}
	return out
}

// putBack queues again records whose delete failed, before the newer ones.
func (d *deletes) putBack(failed doneRecords) {
	d.mu.Lock()
	d.done.pending = append(failed.pending, d.done.pending...)
	d.done.delayed = append(failed.delayed, d.done.delayed...)
	d.done.parked = append(failed.parked, d.done.parked...)
	d.mu.Unlock()
}

// run deletes the queued records every deleteInterval until ctx ends,
// and tells deleted which were, once their transaction has committed.
// It beats alive on every turn: a write that never returns (a hung disk)
// shows in Runtime.Alive.
func (d *deletes) run(ctx context.Context, store *snapshot.Store, log *slog.Logger, alive *loopBeat, deleted func(doneRecords)) {
	t := time.NewTicker(deleteInterval)
	defer t.Stop()
	defer alive.end()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		alive.beat()
		batch := d.take()
		if batch.empty() {
			continue
		}
		if err := store.Update(batch.delete); err != nil {
			log.Error("records of done messages not deleted; they will run again", "pending", len(batch.pending),
				"delayed", len(batch.delayed), "parked", len(batch.parked), "err", err)
			d.putBack(batch)
			continue
		}
		deleted(batch)
	}
}
