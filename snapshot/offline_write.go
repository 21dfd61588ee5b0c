package snapshot

import (
	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// PutPause records in the file that class is paused, replacing its
// pause if it had one, in one write transaction: the service's next
// start comes back with the class paused. The class name is not
// checked.
func (s *State) PutPause(class string, p Pause) error {
	return s.Store.Update(func(tx *store.Tx) error { return tx.PutPause(class, p) })
}

// DeletePause removes class's pause from the file, in one write
// transaction, and reports whether it had one.
func (s *State) DeletePause(class string) (bool, error) {
	var had bool
	err := s.Store.Update(func(tx *store.Tx) (err error) { had, err = tx.DeletePause(class); return err })
	return had, err
}

// RenameClass gives every record of class from (pending, dead, delayed
// and parked) the class to, moves from's pause to to unless to has one,
// and records to as a class the file has seen, in one write transaction.
// It returns how many records it renamed per bucket (BucketPending,
// BucketDead, BucketDelayed, BucketParked, each present; a moved pause
// counts 1 under "pause"). Records that do not decode stay as they are.
// It reads every record of those buckets. Running it again changes
// nothing. from and to must be different non-empty names.
func (s *State) RenameClass(from, to string) (map[string]int, error) {
	var counts map[string]int
	err := s.Store.Update(func(tx *store.Tx) (err error) { counts, err = tx.RenameClass(from, to); return err })
	return counts, err
}

// RecordKeys names records of the file by their keys in their buckets,
// as the reads return them (Entry.Key, DelayedEntry.Key,
// ParkedEntry.Key).
type RecordKeys struct {
	// Pending and Dead are keys of pending records and of dead letters.
	Pending, Dead []uint64
	// Delayed and Parked are keys of delayed and of parked records.
	Delayed []DelayedKey
	Parked  []ParkedKey
}

// DeleteRecords deletes the records k names, in one write transaction:
// all of them or, on an error, none. A key with no record is not an
// error. A k that names none is no transaction.
func (s *State) DeleteRecords(k RecordKeys) error {
	if len(k.Pending)+len(k.Dead)+len(k.Delayed)+len(k.Parked) == 0 {
		return nil
	}
	return s.Store.Update(func(tx *store.Tx) error {
		if err := tx.DeletePending(k.Pending...); err != nil {
			return err
		}
		if err := tx.DeleteDelayed(k.Delayed...); err != nil {
			return err
		}
		if err := tx.DeleteParked(k.Parked...); err != nil {
			return err
		}
		return tx.DeleteDead(k.Dead...)
	})
}
