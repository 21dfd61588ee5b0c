package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/handoff-go/handoff/snapshot"
)

// The state file's operations that the components ask for by name: each
// is one transaction, the only one its caller opens. The components open
// none themselves.

// saveOrphan saves rec, a message of a class not configured, as a dead
// letter and deletes its record with del, in one write.
func (f *stateFile) saveOrphan(rec snapshot.Record, del func(tx *snapshot.Tx) error) error {
	return f.store.Update(func(tx *snapshot.Tx) error {
		if _, err := tx.SaveDead(rec); err != nil {
			return err
		}
		return del(tx)
	})
}

// pendingDelete is the delete of the pending record key, for a write
// such as saveOrphan's.
func pendingDelete(key uint64) func(tx *snapshot.Tx) error {
	return func(tx *snapshot.Tx) error { return tx.DeletePending(key) }
}

// delayedDelete is the delete of the delayed record key, for a write
// such as saveOrphan's.
func delayedDelete(key snapshot.DelayedKey) func(tx *snapshot.Tx) error {
	return func(tx *snapshot.Tx) error { return tx.DeleteDelayed(key) }
}

// deadFound is a dead letter a listing read, with its ID.
type deadFound struct {
	id  snapshot.DeadID
	rec snapshot.Record
}

// deadPage reads a page of class's dead letters after from (every
// class's for ""), those keep accepts, with their IDs, in one read; next
// is 0 past the last page. The caller has checked that the file is open
// (get).
func (f *stateFile) deadPage(class string, from uint64, limit int, keep func(*snapshot.Record) bool) (out []deadFound, next uint64, err error) {
	err = f.store.View(func(tx *snapshot.Tx) error {
		entries, n, err := tx.DeadPage(class, from, limit)
		if err != nil {
			return err
		}
		next = n
		out = make([]deadFound, 0, len(entries))
		for i := range entries {
			e := &entries[i]
			if !keep(&e.Record) {
				continue
			}
			id, err := tx.DeadID(e.Key)
			if err != nil {
				return err
			}
			out = append(out, deadFound{id: id, rec: e.Record})
		}
		return nil
	})
	return out, next, err
}

// deadSearch reads every dead letter of class (every class's for "")
// and returns with their IDs a page of those match accepts and the count
// of them all, in one read ([snapshot.Tx.DeadSearch]). The caller has
// checked that the file is open (get).
func (f *stateFile) deadSearch(class string, from uint64, newest bool, limit int, match func(*snapshot.Record) bool) (out []deadFound, next uint64, total int, err error) {
	err = f.store.View(func(tx *snapshot.Tx) error {
		page, n, t, err := tx.DeadSearch(class, match, from, newest, limit)
		if err != nil {
			return err
		}
		next, total = n, t
		out = make([]deadFound, 0, len(page))
		for i := range page {
			id, err := tx.DeadID(page[i].Key)
			if err != nil {
				return err
			}
			out = append(out, deadFound{id: id, rec: page[i].Record})
		}
		return nil
	})
	return out, next, total, err
}

// deadRecords reads a page of class's dead letters after from (every
// class's for ""); next is 0 past the last page. Undecodable records
// come back in err as [*snapshot.DecodeError]s (decodeErrors).
func (f *stateFile) deadRecords(class string, after uint64, limit int) (page []snapshot.Entry, next uint64, err error) {
	err = f.store.View(func(tx *snapshot.Tx) (err error) { page, next, err = tx.DeadPage(class, after, limit); return err })
	return page, next, err
}

// findDead returns the key in this file and the record of the dead
// letter with ID id; ok is false when the file has none. The caller has
// checked that the file is open (get).
func (f *stateFile) findDead(id snapshot.DeadID) (local uint64, rec snapshot.Record, ok bool, err error) {
	err = f.store.View(func(tx *snapshot.Tx) error {
		var err error
		if local, ok, err = tx.FindDead(id); err != nil || !ok {
			return err
		}
		rec, ok, err = tx.GetDead(local)
		return err
	})
	return local, rec, ok, err
}

// deleteDead deletes the dead letters with keys locals in this file, in
// one write of its own (a tombstone each in the changelog).
func (f *stateFile) deleteDead(locals ...uint64) error {
	return f.store.Update(func(tx *snapshot.Tx) error { return tx.DeleteDead(locals...) })
}

// deadTime is a dead letter's key in this file and when it was saved
// (or failed again).
type deadTime struct {
	key   uint64
	saved time.Time
}

// deadTimes returns the key and save time of each of class's dead
// letters that keep accepts, in key order, read in one transaction in
// pages of deadTimesPage. Undecodable records are left out (the
// listings report them). The caller has checked that the file is open
// (get).
func (f *stateFile) deadTimes(class string, keep func(*snapshot.Record) bool) (out []deadTime, err error) {
	err = f.store.View(func(tx *snapshot.Tx) error {
		for after := uint64(0); ; {
			page, next, err := tx.DeadPage(class, after, deadTimesPage)
			if _, err := decodeErrors(err); err != nil {
				return err
			}
			for i := range page {
				if keep(&page[i].Record) {
					out = append(out, deadTime{key: page[i].Key, saved: page[i].Record.SavedAt})
				}
			}
			if next == 0 {
				return nil
			}
			after = next
		}
	})
	return out, err
}

// deadTimesPage is how many dead letters deadTimes decodes at once.
const deadTimesPage = 1000

// getDead returns the dead letter with key local in this file and its
// ID; ok is false when the file has none. The caller has checked that
// the file is open (get).
func (f *stateFile) getDead(local uint64) (id snapshot.DeadID, rec snapshot.Record, ok bool, err error) {
	err = f.store.View(func(tx *snapshot.Tx) error {
		var err error
		if rec, ok, err = tx.GetDead(local); err != nil || !ok {
			return err
		}
		id, err = tx.DeadID(local)
		return err
	})
	return id, rec, ok, err
}

// deleteDoneParked deletes the record of it, a done parked message, in a
// shared write (op names it for beforeWrite).
func (f *stateFile) deleteDoneParked(op string, it *item) error {
	return f.store.Batch(func(tx *snapshot.Tx) error {
		if err := f.testWriteErr(op, it); err != nil {
			return err
		}
		return tx.DeleteParked(it.extOrZero().parkedKey)
	})
}

// readParked returns the records parked under class's key, in park order,
// leaving out those it cannot decode without quarantining them (parked
// does). The caller has checked that the file is open (get).
func (f *stateFile) readParked(class string, key []byte) ([]snapshot.ParkedEntry, error) {
	var entries []snapshot.ParkedEntry
	err := f.store.View(func(tx *snapshot.Tx) (err error) { entries, _, err = tx.Parked(class, key); return err })
	return entries, err
}

// unpark moves entries, parked under a key of class, out of the parked
// bucket in one write: to the dead letters when toDead (the class is not
// configured), else to pending.
func (f *stateFile) unpark(class string, entries []snapshot.ParkedEntry, toDead bool) error {
	return f.store.Update(func(tx *snapshot.Tx) error {
		for _, e := range entries {
			rec := e.Record
			var err error
			if toDead {
				rec.Reason = reasonUnknown
				rec.Err = fmt.Sprintf("runtime: class %q is not configured", class)
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
}

// saveSchedule saves rec as a delayed record due at at, in a shared
// write, replacing the record of its ID when that one is handed over
// (handedOver) or, with owns set, a stale copy of a partition this
// instance does not own (deleted without a tombstone: its owner decides).
// replaced is the key of the record it replaced, nil for none; added is
// SaveDelayed's.
func (f *stateFile) saveSchedule(rec snapshot.Record, at time.Time, handedOver func(snapshot.DelayedKey) bool,
	owns func(*snapshot.Record) bool) (added []bool, replaced snapshot.DelayedKey, err error) {
	id := rec.Message.ID
	err = f.store.Batch(func(tx *snapshot.Tx) error {
		replaced = nil
		old, ok, err := tx.DelayedKeyOf(id)
		if err != nil {
			return err
		}
		switch {
		case ok && handedOver(old):
			// Its message is in a pool, or done and its record not yet
			// deleted: the ID is not waiting. The record goes now rather
			// than when the message is done.
			if err := tx.DeleteDelayed(old); err != nil {
				return err
			}
			replaced = old
		case ok && owns != nil:
			// A record of a partition another instance owns is this
			// file's stale copy: the owner ran it, or holds it waiting
			// and keeps the schedule it saved first (see
			// snapshot.Store.SetDelayedHandedOver). The new schedule goes
			// to the owner, who decides.
			rec, found, err := tx.GetDelayed(old)
			if de := (*snapshot.DecodeError)(nil); errors.As(err, &de) {
				break // undecodable: it stays, as before
			}
			if err != nil {
				return err
			}
			if !found || owns(&rec) {
				break
			}
			if err := tx.ForgetDelayed(old); err != nil {
				return err
			}
			replaced = old
		}
		added, err = tx.SaveDelayed(snapshot.Delayed{Due: at, Record: rec})
		return err
	})
	return added, replaced, err
}

// listDelayed reads limit delayed records after from, in key order.
// Undecodable records come back in err as [*snapshot.DecodeError]s
// (decodeErrors).
func (f *stateFile) listDelayed(from snapshot.DelayedKey, limit int) ([]snapshot.DelayedEntry, error) {
	var entries []snapshot.DelayedEntry
	err := f.store.View(func(tx *snapshot.Tx) (err error) { entries, err = tx.ListDelayed(from, limit); return err })
	return entries, err
}

// dueDelayed reads up to limit delayed records after from that are due
// at now, and the due time of the next one (Tx.DueDelayed).
func (f *stateFile) dueDelayed(from snapshot.DelayedKey, now time.Time, limit int) (due []snapshot.DelayedEntry,
	next time.Time, bad []*snapshot.DecodeError, err error) {
	err = f.store.View(func(tx *snapshot.Tx) (err error) {
		due, next, bad, err = tx.DueDelayed(from, now, limit)
		return err
	})
	return due, next, bad, err
}

// counts returns how many records each bucket holds.
func (f *stateFile) counts() (map[string]int, error) {
	var counts map[string]int
	err := f.store.View(func(tx *snapshot.Tx) (err error) { counts, err = tx.Counts(); return err })
	return counts, err
}

// progress returns the progress the file holds of topic's partition p.
func (f *stateFile) progress(topic string, p int32) (prog snapshot.Progress, ok bool, err error) {
	err = f.store.View(func(tx *snapshot.Tx) (err error) {
		prog, ok, err = tx.Progress(topic, p)
		return err
	})
	return prog, ok, err
}

// deleteProgress deletes the progress of topic's partition p, in a
// write of its own.
func (f *stateFile) deleteProgress(topic string, p int32) error {
	return f.store.Update(func(tx *snapshot.Tx) error { return tx.DeleteProgress(topic, p) })
}

// deletePending deletes the pending records keys in one write (a
// tombstone each in the changelog).
func (f *stateFile) deletePending(keys ...uint64) error {
	return f.store.Update(func(tx *snapshot.Tx) error { return tx.DeletePending(keys...) })
}

// deletePendingLocal is deletePending in the file alone, without
// tombstones in the changelog.
func (f *stateFile) deletePendingLocal(keys ...uint64) error {
	return f.store.UpdateLocal(func(tx *snapshot.Tx) error { return tx.DeletePending(keys...) })
}

// writeSnapshot is the stop's snapshot (runState.snapshot), in ONE
// write: it saves fresh as pending records, and delayed's whose record is
// gone or not theirs (see stale for the others), deletes del, updates
// the records of updates and of delayed's stale ones, and puts progs.
// recs are the records saved, keys their keys, fromKafka which came from
// Kafka.
func (f *stateFile) writeSnapshot(fresh, delayed, updates []leftover, del snapshot.DoneRecords, progs []partProgress,
	now time.Time) (recs []snapshot.Record, keys []uint64, fromKafka []bool, err error) {
	err = f.store.Update(func(tx *snapshot.Tx) (err error) {
		recs, fromKafka = recs[:0], fromKafka[:0]
		ups := updates[:len(updates):len(updates)]
		for _, l := range fresh {
			recs = append(recs, l.it.record(l.reason, l.err, now))
			fromKafka = append(fromKafka, l.it.isKafka())
		}
		for _, l := range delayed {
			// Schedule replaces the record of an ID whose message is
			// in a pool (a recurring job rescheduling itself): then
			// the message has no record left and is saved anew.
			key, ok, err := tx.DelayedKeyOf(l.it.env().ID)
			if err != nil {
				return err
			}
			switch {
			case !ok || !bytes.Equal(key, l.it.extOrZero().delayedKey):
				recs = append(recs, l.it.record(l.reason, l.err, now))
				fromKafka = append(fromKafka, false)
			case l.stale():
				ups = append(ups, l)
			}
		}
		if keys, err = tx.SavePending(recs...); err != nil {
			return err
		}
		if err := del.Delete(tx); err != nil {
			return err
		}
		for _, l := range ups {
			if err := l.it.putSource(tx, l.it.update(l.reason, now)); err != nil {
				return err
			}
		}
		for _, pp := range progs {
			if err := tx.PutProgress(pp.topic, pp.partition, pp.prog); err != nil {
				return err
			}
		}
		return nil
	})
	return recs, keys, fromKafka, err
}

// fileEmpty reports whether store holds nothing yet.
func fileEmpty(store *snapshot.Store) (empty bool, err error) {
	err = store.View(func(tx *snapshot.Tx) (err error) { empty, err = tx.Empty(); return err })
	return empty, err
}

// renameInFile applies renames (from -> to) to store in one write, in
// from's order, and returns how many records of each bucket each from
// had.
func renameInFile(store *snapshot.Store, renames map[string]string) (map[string]map[string]int, error) {
	renamed := map[string]map[string]int{}
	err := store.Update(func(tx *snapshot.Tx) error {
		for _, from := range slices.Sorted(maps.Keys(renames)) {
			counts, err := tx.RenameClass(from, renames[from])
			if err != nil {
				return err
			}
			renamed[from] = counts
		}
		return nil
	})
	return renamed, err
}

// savedPauses returns the pauses store keeps, by class.
func savedPauses(store *snapshot.Store) (map[string]snapshot.Pause, error) {
	var pauses map[string]snapshot.Pause
	err := store.View(func(tx *snapshot.Tx) (err error) { pauses, err = tx.Pauses(); return err })
	return pauses, err
}

// saveDeadLetter moves it into the dead letters as rec (moveTo).
func (f *stateFile) saveDeadLetter(it *item, rec snapshot.Record) bool {
	return f.moveTo(it, "save dead letter", func(tx *snapshot.Tx) error { _, err := tx.SaveDead(rec); return err })
}

// updateDeadLetter overwrites it's own dead letter, a requeued one that
// failed again, with rec, keeping its key (updateInPlace).
func (f *stateFile) updateDeadLetter(it *item, rec snapshot.Record) bool {
	return f.updateInPlace(it, "update dead letter", func(tx *snapshot.Tx) error { return tx.PutDead(it.extOrZero().key, rec) })
}

// park moves it into the parked records of class under its key as rec,
// in a write of its own (moveNow).
func (f *stateFile) park(it *item, class string, rec snapshot.Record) bool {
	return f.moveNow(it, "park message", func(tx *snapshot.Tx) error { return tx.Park(class, it.env().Key, rec) })
}

// saveRedelivery moves it into the delayed records as rec, due at due
// (moveTo). When a record of its ID waits already (scheduled meanwhile),
// it is saved as a dead letter instead, with redeliveries as its count
// and an error that says so: superseded is true and dead is that record.
// saved is moveTo's.
func (f *stateFile) saveRedelivery(it *item, due time.Time, rec snapshot.Record, redeliveries int) (saved, superseded bool, dead snapshot.Record) {
	save := func(tx *snapshot.Tx) error {
		superseded = false
		err := saveDelayed(tx, due, rec)
		if !errors.Is(err, errDuplicateDelayed) {
			return err
		}
		superseded = true
		dead = rec
		dead.Reason, dead.Redeliveries = reasonFailed, redeliveries
		dead.Err = fmt.Sprintf("%s (no redelivery: a message with the same ID was scheduled meanwhile)", rec.Err)
		_, err = tx.SaveDead(dead)
		return err
	}
	saved = f.moveTo(it, "save delayed redelivery", save)
	return saved, superseded, dead
}

// saveDeferred moves it, a Kafka message whose header defers it, into
// the delayed records as rec, due at at (moveTo). again is true when the
// same record waits already under its ID (read again): nothing is saved
// and the offset settles. saved is moveTo's.
func (f *stateFile) saveDeferred(it *item, at time.Time, rec snapshot.Record) (saved, again bool) {
	save := func(tx *snapshot.Tx) error {
		again = false
		err := saveDelayed(tx, at, rec)
		if !errors.Is(err, errDuplicateDelayed) {
			return err
		}
		// The same record waits when the ID's record is due when this
		// one's header says (as the bucket keeps it: clamped to the
		// years it holds to the nanosecond); another message scheduled
		// under the ID leaves this one to run now, as before.
		key, ok, kerr := tx.DelayedKeyOf(rec.Message.ID)
		if kerr != nil {
			return kerr
		}
		if again = ok && key.Due().Equal(snapshot.DelayedKeyAt(at).Due()); again {
			return nil
		}
		return err
	}
	saved = f.moveTo(it, "save delayed message", save)
	return saved, again
}

// saveDelayed stores rec due at due, refusing to drop it as a duplicate.
func saveDelayed(tx *snapshot.Tx, due time.Time, rec snapshot.Record) error {
	added, err := tx.SaveDelayed(snapshot.Delayed{Due: due, Record: rec})
	if err != nil {
		return err
	}
	if !added[0] {
		return fmt.Errorf("%w: %s", errDuplicateDelayed, rec.Message.ID)
	}
	return nil
}

// scanPending hands fn the pending records in batches, while it returns
// true (snapshot.Store.ScanPending), and returns those it could not
// decode.
func (f *stateFile) scanPending(fn func(batch []snapshot.Entry) bool) ([]*snapshot.DecodeError, error) {
	return f.store.ScanPending(fn)
}

// clearChangelogComplete notes that the file's writes from now on reach
// no changelog (snapshot.Store.ClearChangelogComplete).
func (f *stateFile) clearChangelogComplete() error { return f.store.ClearChangelogComplete() }

// sendUnlogged sends the records the changelog may never have seen
// (snapshot.Store.SendUnlogged) and returns how many.
func (f *stateFile) sendUnlogged(fresh bool) (int, error) { return f.store.SendUnlogged(fresh) }
