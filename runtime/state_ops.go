package runtime

import (
	"errors"
	"fmt"
	"time"

	"github.com/handoff-go/handoff/snapshot"
)

// The state file's operations that the components ask for by name: each
// is one State call, one transaction. The components open none
// themselves.

// saveOrphan saves rec, a message of a class not configured, as a dead
// letter and deletes its record from, in one write.
func (f *stateFile) saveOrphan(rec snapshot.Record, from snapshot.Source) error {
	return f.store.OrphanToDead(rec, from)
}

// pendingSource is the pending record key, for a write such as
// saveOrphan's.
func pendingSource(key uint64) snapshot.Source {
	return snapshot.Source{From: snapshot.FromPending, Key: key}
}

// delayedSource is the delayed record key, for a write such as
// saveOrphan's.
func delayedSource(key snapshot.DelayedKey) snapshot.Source {
	return snapshot.Source{From: snapshot.FromDelayed, Delayed: key}
}

// deadFound is a dead letter a listing read, with its ID.
type deadFound struct {
	ID     snapshot.DeadID
	Record snapshot.Record
}

// deadList runs q (snapshot.State.ListDead) and returns its page with
// the IDs; a dead letter that does not decode fails the listing, its
// *snapshot.DecodeError in the error. The caller has checked that the
// file is open (get).
func (f *stateFile) deadList(q snapshot.DeadQuery) (out []deadFound, next uint64, total int, err error) {
	l, err := f.store.ListDead(q)
	if err != nil {
		return nil, 0, 0, err
	}
	if err := undecodable(l); err != nil {
		return nil, 0, 0, err
	}
	out = make([]deadFound, len(l.Page))
	for i := range l.Page {
		if err := l.Page[i].IDErr; err != nil {
			return nil, 0, 0, err
		}
		out[i] = deadFound{ID: l.Page[i].ID, Record: l.Page[i].Record}
	}
	return out, l.Next, l.Total, nil
}

// undecodable joins the decode errors of l's dead letters that do not
// decode; nil when every one does.
func undecodable(l snapshot.DeadList) error {
	var errs []error
	for _, u := range l.Undecodable {
		errs = append(errs, u.Err)
	}
	return errors.Join(errs...)
}

// deadRecords reads a chunk of class's dead letters after from (every
// class's for ""); next is 0 past the last chunk. Undecodable records
// come back in err as [*snapshot.DecodeError]s (decodeErrors), with the
// page of the others.
func (f *stateFile) deadRecords(class string, after uint64, limit int) (page []snapshot.Entry, next uint64, err error) {
	l, err := f.store.ListDead(snapshot.DeadQuery{Class: class, From: after, Limit: limit, Scan: true})
	if err != nil {
		return nil, 0, err
	}
	page = make([]snapshot.Entry, len(l.Page))
	for i := range l.Page {
		page[i] = snapshot.Entry{Key: l.Page[i].Key, Record: l.Page[i].Record}
	}
	return page, l.Next, undecodable(l)
}

// findDead returns the key in this file and the record of the dead
// letter with ID id; ok is false when the file has none. The caller has
// checked that the file is open (get).
func (f *stateFile) findDead(id snapshot.DeadID) (local uint64, rec snapshot.Record, ok bool, err error) {
	e, ok, err := f.store.DeadByID(id)
	return e.Key, e.Record, ok, err
}

// deleteDead deletes the dead letters with keys locals in this file, in
// one write of its own (a tombstone each in the changelog).
func (f *stateFile) deleteDead(locals ...uint64) error {
	return f.store.Delete(sources(snapshot.FromDead, locals)...)
}

// deadTime is a dead letter's key in this file and when it was saved
// (or failed again).
type deadTime = snapshot.DeadTime

// deadTimes returns the key and save time of each of class's dead
// letters that keep accepts, in key order, read in one transaction.
// Undecodable records are left out (the listings report them). The
// caller has checked that the file is open (get).
func (f *stateFile) deadTimes(class string, keep func(*snapshot.Record) bool) ([]deadTime, error) {
	return f.store.DeadTimes(class, keep)
}

// getDead returns the dead letter with key local in this file and its
// ID; ok is false when the file has none. The caller has checked that
// the file is open (get).
func (f *stateFile) getDead(local uint64) (id snapshot.DeadID, rec snapshot.Record, ok bool, err error) {
	return f.store.GetDead(local)
}

// deleteDoneParked deletes the record of it, a done parked message, in a
// shared write (op names it for beforeWrite).
func (f *stateFile) deleteDoneParked(op string, it *item) error {
	return f.store.DeleteDone(snapshot.Move{From: it.source(), Check: f.check(op, it)})
}

// readParked returns the records parked under class's key, in park order,
// leaving out those it cannot decode without quarantining them (parked
// does). The caller has checked that the file is open (get).
func (f *stateFile) readParked(class string, key []byte) ([]snapshot.ParkedEntry, error) {
	entries, _, err := f.store.Parked(class, key)
	return entries, err
}

// unpark moves entries, parked under a key of class, out of the parked
// bucket in one write: to the dead letters when toDead (the class is not
// configured), else to pending.
func (f *stateFile) unpark(class string, entries []snapshot.ParkedEntry, toDead bool) error {
	var dead func(snapshot.Record) snapshot.Record
	if toDead {
		dead = func(rec snapshot.Record) snapshot.Record {
			rec.Reason = reasonUnknown
			rec.Err = fmt.Sprintf("runtime: class %q is not configured", class)
			return rec
		}
	}
	return f.store.Unpark(entries, dead)
}

// saveSchedule saves rec as a delayed record due at at, in a shared
// write (snapshot.State.Schedule).
func (f *stateFile) saveSchedule(rec snapshot.Record, at time.Time, handedOver func(snapshot.DelayedKey) bool,
	owns func(*snapshot.Record) bool) (added []bool, replaced snapshot.DelayedKey, err error) {
	return f.store.Schedule(rec, at, handedOver, owns)
}

// listDelayed reads limit delayed records after from, in key order.
// Undecodable records come back in err as [*snapshot.DecodeError]s
// (decodeErrors).
func (f *stateFile) listDelayed(from snapshot.DelayedKey, limit int) ([]snapshot.DelayedEntry, error) {
	return f.store.ListDelayed(from, limit)
}

// dueDelayed reads up to limit delayed records after from that are due
// at now, and the due time of the next one (State.DueDelayed).
func (f *stateFile) dueDelayed(from snapshot.DelayedKey, now time.Time, limit int) (due []snapshot.DelayedEntry,
	next time.Time, bad []*snapshot.DecodeError, err error) {
	return f.store.DueDelayed(from, now, limit)
}

// counts returns how many records each bucket holds.
func (f *stateFile) counts() (map[string]int, error) { return f.store.Counts() }

// progress returns the progress the file holds of topic's partition p.
func (f *stateFile) progress(topic string, p int32) (prog snapshot.Progress, ok bool, err error) {
	return f.store.Progress(topic, p)
}

// deleteProgress deletes the progress of topic's partition p, in a
// write of its own.
func (f *stateFile) deleteProgress(topic string, p int32) error {
	return f.store.DeleteProgress(topic, p)
}

// deletePending deletes the pending records keys in one write (a
// tombstone each in the changelog).
func (f *stateFile) deletePending(keys ...uint64) error {
	return f.store.Delete(sources(snapshot.FromPending, keys)...)
}

// sources returns the sources of the records of bucket from with keys.
func sources(from snapshot.From, keys []uint64) []snapshot.Source {
	out := make([]snapshot.Source, len(keys))
	for i, k := range keys {
		out[i] = snapshot.Source{From: from, Key: k}
	}
	return out
}

// deletePendingLocal is deletePending in the file alone, without
// tombstones in the changelog.
func (f *stateFile) deletePendingLocal(keys ...uint64) error {
	return f.store.DeletePendingLocal(keys...)
}

// writeSnapshot is the stop's snapshot (runState.snapshot), in ONE
// write (snapshot.State.SaveStop): it saves fresh as pending records,
// and delayed's whose record is gone or not theirs (see stale for the
// others), deletes del, updates the records of updates and of delayed's
// stale ones, and puts progs. recs are the records saved, keys their
// keys, fromKafka which came from Kafka.
func (f *stateFile) writeSnapshot(fresh, delayed, updates []takenOut, del snapshot.DoneRecords, progs []partProgress,
	now time.Time) (recs []snapshot.Record, keys []uint64, fromKafka []bool, err error) {
	snap := snapshot.StopSnapshot{Done: del}
	for _, l := range fresh {
		snap.Fresh = append(snap.Fresh, snapshot.StopRecord{Record: l.it.record(l.reason, l.err, now), Kafka: l.it.isKafka()})
	}
	for _, l := range delayed {
		d := snapshot.StopDelayed{ID: l.it.env().ID, Key: l.it.extOrZero().delayedKey, Record: l.it.record(l.reason, l.err, now)}
		if l.stale() {
			up := l.it.update(l.reason, now)
			d.Update = &up
		}
		snap.Delayed = append(snap.Delayed, d)
	}
	for _, l := range updates {
		snap.Updates = append(snap.Updates, l.it.sourceUpdate(l.it.update(l.reason, now)))
	}
	for _, pp := range progs {
		snap.Progress = append(snap.Progress, snapshot.StopProgress{Topic: pp.topic, Partition: pp.partition, Progress: pp.prog})
	}
	return f.store.SaveStop(snap)
}

// fileEmpty reports whether store holds nothing yet.
func fileEmpty(store *snapshot.State) (empty bool, err error) { return store.Empty() }

// renameInFile applies renames (from -> to) to store in one write, in
// from's order, and returns how many records of each bucket each from
// had.
func renameInFile(store *snapshot.State, renames map[string]string) (map[string]map[string]int, error) {
	return store.RenameClasses(renames)
}

// savedPauses returns the pauses store keeps, by class.
func savedPauses(store *snapshot.State) (map[string]snapshot.Pause, error) { return store.Pauses() }

// saveDeadLetter moves it into the dead letters as rec (moveTo).
func (f *stateFile) saveDeadLetter(it *item, rec snapshot.Record) bool {
	return f.moveTo(it, "save dead letter", func(m snapshot.Move) error { return f.store.MoveToDead(m, rec) })
}

// updateDeadLetter overwrites it's own dead letter, a requeued one that
// failed again, with rec, keeping its key (nothing is deleted).
func (f *stateFile) updateDeadLetter(it *item, rec snapshot.Record) bool {
	return f.moveTo(it, "update dead letter", func(m snapshot.Move) error { return f.store.UpdateDead(m, rec) })
}

// park moves it into the parked records of class under its key as rec,
// in a write of its own (moveNow).
func (f *stateFile) park(it *item, class string, rec snapshot.Record) bool {
	return f.moveNow(it, "park message", func(m snapshot.Move) error { return f.store.MoveToParked(m, class, it.env().Key, rec) })
}

// saveRedelivery moves it into the delayed records as rec, due at due
// (moveTo). When a record of its ID waits already (scheduled meanwhile),
// it is saved as a dead letter instead, with redeliveries as its count
// and an error that says so: superseded is true and dead is that record.
// saved is moveTo's.
func (f *stateFile) saveRedelivery(it *item, due time.Time, rec snapshot.Record, redeliveries int) (saved, superseded bool, dead snapshot.Record) {
	dead = rec
	dead.Reason, dead.Redeliveries = reasonFailed, redeliveries
	dead.Err = fmt.Sprintf("%s (no redelivery: a message with the same ID was scheduled meanwhile)", rec.Err)
	saved = f.moveTo(it, "save delayed redelivery", func(m snapshot.Move) (err error) {
		superseded, err = f.store.MoveToRedelivery(m, due, rec, dead)
		return err
	})
	if !superseded {
		dead = snapshot.Record{}
	}
	return saved, superseded, dead
}

// saveDeferred moves it, a Kafka message whose header defers it, into
// the delayed records as rec, due at at (moveTo). again is true when the
// same record waits already under its ID (read again): nothing is saved
// and the offset settles. saved is moveTo's.
func (f *stateFile) saveDeferred(it *item, at time.Time, rec snapshot.Record) (saved, again bool) {
	saved = f.moveTo(it, "save delayed message", func(m snapshot.Move) (err error) {
		again, err = f.store.MoveToDelayed(m, at, rec)
		return err
	})
	return saved, again
}

// scanPending hands fn the pending records in batches, while it returns
// true (snapshot.State.ScanPending), and returns those it could not
// decode.
func (f *stateFile) scanPending(fn func(batch []snapshot.Entry) bool) ([]*snapshot.DecodeError, error) {
	return f.store.ScanPending(fn)
}

// clearChangelogComplete notes that the file's writes from now on reach
// no changelog (snapshot.State.ClearChangelogComplete).
func (f *stateFile) clearChangelogComplete() error { return f.store.ClearChangelogComplete() }
