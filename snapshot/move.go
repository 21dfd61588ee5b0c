package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// From is where a message came from: the bucket of its record, or Kafka
// (the zero From), which has none.
type From int

const (
	FromKafka   From = iota // no record: a Kafka message
	FromPending             // a pending record (saved at a stop), Source.Key
	FromDelayed             // a delayed record, Source.Delayed
	FromParked              // a parked record, Source.Parked
	FromDead                // a dead letter (requeued), Source.Key
)

// Source is the record a message came from, which a move deletes (or an
// update overwrites) in its own transaction. The zero Source is a Kafka
// message's: nothing to delete.
type Source struct {
	From    From
	Key     uint64     // the pending record's or the dead letter's key
	Delayed DelayedKey // the delayed record's key
	Parked  ParkedKey  // the parked record's key
}

// delete removes, inside tx, the record s describes.
func (s Source) delete(tx *store.Tx) error {
	switch s.From {
	case FromPending:
		return tx.DeletePending(s.Key)
	case FromDelayed:
		return tx.DeleteDelayed(s.Delayed)
	case FromParked:
		return tx.DeleteParked(s.Parked)
	case FromDead:
		// A requeued dead letter leaves the dead bucket for a delayed
		// redelivery; a dead letter again is updated in place
		// (UpdateDead), deleting nothing.
		return tx.DeleteDead(s.Key)
	}
	return nil
}

// put overwrites, inside tx, the record s describes with rec. A dead
// letter's rec without an Err keeps the one it has (not failed for good
// since: it is still a dead letter for that error).
func (s Source) put(tx *store.Tx, rec Record) error {
	switch s.From {
	case FromPending:
		return tx.PutPending(s.Key, rec)
	case FromDelayed:
		return tx.PutDelayed(s.Delayed, rec)
	case FromParked:
		return tx.PutParked(s.Parked, rec)
	case FromDead:
		if rec.Err == "" {
			old, ok, err := tx.GetDead(s.Key)
			if err != nil {
				return err
			}
			if ok {
				rec.Err = old.Err
			}
		}
		return tx.PutDead(s.Key, rec)
	}
	return nil
}

// Move is what every move of a message shares: the record it deletes and
// how its transaction runs. A move deletes From, saves the message
// elsewhere and (with a changelog set) writes both to the changelog, in
// ONE transaction: it returns nil once all of it committed, an error
// wrapping ErrChangelog when the file has it but the changelog does not
// (ResendUnsent), and another error when nothing was written. The
// caller settles the message's origin (its Kafka offset) after nil, or
// after the resend for ErrChangelog; never before.
type Move struct {
	From Source
	// Alone runs the move in a transaction of its own, for a caller that
	// holds a lock and must not wait for a shared one to fill; else it
	// shares one with the moves of other goroutines (one fsync for many).
	Alone bool
	// Check, when set, runs first inside the transaction; an error it
	// returns fails the move (the runtime's tests inject write failures
	// with it). A shared transaction may run it twice.
	Check func() error
}

// run runs save in m's transaction, after m.Check, deleting m.From first
// when del.
func (s *State) run(m Move, del bool, save func(tx *store.Tx) error) error {
	run := s.st.Batch
	if m.Alone {
		run = s.st.Update
	}
	return run(func(tx *store.Tx) error {
		if m.Check != nil {
			if err := m.Check(); err != nil {
				return err
			}
		}
		if del {
			// Delete first: a delayed record's new version has the
			// same ID, which SaveDelayed would take for a duplicate.
			if err := m.From.delete(tx); err != nil {
				return err
			}
		}
		return save(tx)
	})
}

// MoveToDead moves a message into the dead letters as rec.
func (s *State) MoveToDead(m Move, rec Record) error {
	return s.run(m, true, func(tx *store.Tx) error { _, err := tx.SaveDead(rec); return err })
}

// UpdateDead overwrites a requeued dead letter that failed again, m.From
// (FromDead), with rec, keeping its key: nothing is deleted.
func (s *State) UpdateDead(m Move, rec Record) error {
	return s.run(m, false, func(tx *store.Tx) error { return tx.PutDead(m.From.Key, rec) })
}

// MoveToParked moves a message into the parked records of class under
// key as rec.
func (s *State) MoveToParked(m Move, class string, key []byte, rec Record) error {
	return s.run(m, true, func(tx *store.Tx) error { return tx.Park(class, key, rec) })
}

// MoveToRedelivery moves a message into the delayed records as rec, due
// at due. When a record of its ID waits already (scheduled meanwhile),
// instead is saved as a dead letter in its place and superseded is true.
func (s *State) MoveToRedelivery(m Move, due time.Time, rec, instead Record) (superseded bool, err error) {
	err = s.run(m, true, func(tx *store.Tx) error {
		superseded = false
		err := saveDelayed(tx, due, rec)
		if !errors.Is(err, errDuplicateDelayed) {
			return err
		}
		superseded = true
		_, err = tx.SaveDead(instead)
		return err
	})
	return superseded, err
}

// MoveToDelayed moves a message (a Kafka message whose header defers it)
// into the delayed records as rec, due at at. again is true when the same
// record waits already under its ID (a message read again): nothing is
// saved, and the move counts as done. Another message waiting under the
// ID fails the move with an error.
func (s *State) MoveToDelayed(m Move, at time.Time, rec Record) (again bool, err error) {
	err = s.run(m, true, func(tx *store.Tx) error {
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
		if again = ok && key.Due().Equal(DelayedKeyAt(at).Due()); again {
			return nil
		}
		return err
	})
	return again, err
}

// DeleteDone deletes m.From, the record of a done message, in a shared
// transaction (after m.Check).
func (s *State) DeleteDone(m Move) error {
	return s.run(Move{Check: m.Check}, false, func(tx *store.Tx) error { return m.From.delete(tx) })
}

// errDuplicateDelayed is returned when a message to delay has the ID of
// one waiting.
var errDuplicateDelayed = errors.New("snapshot: a delayed message with this ID is already waiting")

// saveDelayed stores rec due at due, refusing to drop it as a duplicate.
func saveDelayed(tx *store.Tx, due time.Time, rec Record) error {
	added, err := tx.SaveDelayed(store.Delayed{Due: due, Record: rec})
	if err != nil {
		return err
	}
	if !added[0] {
		return fmt.Errorf("%w: %s", errDuplicateDelayed, rec.Message.ID)
	}
	return nil
}

// OrphanToDead saves rec, a message of a class not configured, as a dead
// letter and deletes its record from, in one write.
func (s *State) OrphanToDead(rec Record, from Source) error {
	return s.st.Update(func(tx *store.Tx) error {
		if _, err := tx.SaveDead(rec); err != nil {
			return err
		}
		return from.delete(tx)
	})
}

// Unpark moves entries, parked under a key, out of the parked bucket in
// one write: to pending, or, when dead is set, to the dead letters as
// dead makes them of their records (their class is not configured).
func (s *State) Unpark(entries []ParkedEntry, dead func(Record) Record) error {
	return s.st.Update(func(tx *store.Tx) error {
		for _, e := range entries {
			var err error
			if dead != nil {
				_, err = tx.SaveDead(dead(e.Record))
			} else {
				_, err = tx.SavePending(e.Record)
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

// Schedule saves rec as a delayed record due at at, in a shared write,
// replacing the record of its ID when that one is handed over
// (handedOver) or, with owns set, a stale copy of a partition this
// instance does not own (deleted without a tombstone: its owner
// decides). replaced is the key of the record it replaced, nil for none;
// added[0] is false when a record of the ID waits and was kept.
func (s *State) Schedule(rec Record, at time.Time, handedOver func(DelayedKey) bool,
	owns func(*Record) bool) (added []bool, replaced DelayedKey, err error) {
	id := rec.Message.ID
	err = s.st.Batch(func(tx *store.Tx) error {
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
			// SetDelayedHandedOver). The new schedule goes to the owner,
			// who decides.
			rec, found, err := tx.GetDelayed(old)
			if de := (*DecodeError)(nil); errors.As(err, &de) {
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
		added, err = tx.SaveDelayed(store.Delayed{Due: at, Record: rec})
		return err
	})
	return added, replaced, err
}

// StopSnapshot is what a stop saves, in ONE write (State.SaveStop).
type StopSnapshot struct {
	// Fresh are saved as pending records.
	Fresh []StopRecord
	// Delayed are messages of delayed records: one whose record is gone
	// or not its own (Schedule replaced the record of an ID whose message
	// was in a pool) is saved anew as Record; one whose record is still
	// there is updated with Update when it is set.
	Delayed []StopDelayed
	// Updates overwrite the records of stored messages (their attempt
	// count moved).
	Updates []StopUpdate
	// Done are deleted.
	Done DoneRecords
	// Progress is put per partition.
	Progress []StopProgress
}

// StopRecord is a message a stop saves as a pending record; Kafka says
// it came from Kafka.
type StopRecord struct {
	Record Record
	Kafka  bool
}

// StopDelayed is a message of a delayed record at a stop: its ID, its
// record's key, the record to save when that one is gone, and the update
// of it otherwise (nil: unchanged).
type StopDelayed struct {
	ID     string
	Key    DelayedKey
	Record Record
	Update *Record
}

// StopUpdate overwrites From's record with Record.
type StopUpdate struct {
	From   Source
	Record Record
}

// StopProgress is the progress of one input partition.
type StopProgress struct {
	Topic     string
	Partition int32
	Progress  Progress
}

// SaveStop writes snap in one transaction. recs are the records saved as
// pending, keys their keys and fromKafka which of them came from Kafka.
func (s *State) SaveStop(snap StopSnapshot) (recs []Record, keys []uint64, fromKafka []bool, err error) {
	err = s.st.Update(func(tx *store.Tx) (err error) {
		recs, fromKafka = recs[:0], fromKafka[:0]
		ups := snap.Updates[:len(snap.Updates):len(snap.Updates)]
		for _, r := range snap.Fresh {
			recs = append(recs, r.Record)
			fromKafka = append(fromKafka, r.Kafka)
		}
		for _, d := range snap.Delayed {
			// Schedule replaces the record of an ID whose message is
			// in a pool (a recurring job rescheduling itself): then
			// the message has no record left and is saved anew.
			key, ok, err := tx.DelayedKeyOf(d.ID)
			if err != nil {
				return err
			}
			switch {
			case !ok || !bytes.Equal(key, d.Key):
				recs = append(recs, d.Record)
				fromKafka = append(fromKafka, false)
			case d.Update != nil:
				ups = append(ups, StopUpdate{From: Source{From: FromDelayed, Delayed: d.Key}, Record: *d.Update})
			}
		}
		if keys, err = tx.SavePending(recs...); err != nil {
			return err
		}
		if err := snap.Done.Delete(tx); err != nil {
			return err
		}
		for _, u := range ups {
			if err := u.From.put(tx, u.Record); err != nil {
				return err
			}
		}
		for _, pp := range snap.Progress {
			if err := tx.PutProgress(pp.Topic, pp.Partition, pp.Progress); err != nil {
				return err
			}
		}
		return nil
	})
	return recs, keys, fromKafka, err
}
