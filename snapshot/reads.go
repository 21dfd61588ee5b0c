package snapshot

import (
	"errors"
	"time"

	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// GetDead returns the dead letter with key local in this file and its
// ID; ok is false when the file has none.
func (s *State) GetDead(local uint64) (id DeadID, rec Record, ok bool, err error) {
	err = s.st.View(func(tx *store.Tx) error {
		var err error
		if rec, ok, err = tx.GetDead(local); err != nil || !ok {
			return err
		}
		id, err = tx.DeadID(local)
		return err
	})
	return id, rec, ok, err
}

// DeadTime is a dead letter's key in this file and when it was saved
// (or failed again).
type DeadTime struct {
	Key   uint64
	Saved time.Time
}

// deadTimesPage is how many dead letters DeadTimes decodes at once.
const deadTimesPage = 1000

// DeadTimes returns the key and save time of each of class's dead
// letters that keep accepts, in key order, read in one transaction.
// Undecodable records are left out (the listings report them).
func (s *State) DeadTimes(class string, keep func(*Record) bool) (out []DeadTime, err error) {
	err = s.st.View(func(tx *store.Tx) error {
		for after := uint64(0); ; {
			page, next, err := tx.DeadPage(class, after, deadTimesPage)
			if err := withoutDecodeErrors(err); err != nil {
				return err
			}
			for i := range page {
				if keep(&page[i].Record) {
					out = append(out, DeadTime{Key: page[i].Key, Saved: page[i].Record.SavedAt})
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

// withoutDecodeErrors returns err without the [*DecodeError]s it joins,
// nil when there is nothing else.
func withoutDecodeErrors(err error) error {
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var rest []error
	for _, e := range errs {
		if _, ok := e.(*DecodeError); !ok {
			rest = append(rest, e)
		}
	}
	return errors.Join(rest...)
}

// Parked returns the records parked under class's key, in park order,
// and those it could not decode (see Quarantine).
func (s *State) Parked(class string, key []byte) (entries []ParkedEntry, bad []*DecodeError, err error) {
	err = s.st.View(func(tx *store.Tx) (err error) { entries, bad, err = tx.Parked(class, key); return err })
	return entries, bad, err
}

// ParkedKeys returns every parked (class, key) with its count, and the
// records it could not decode.
func (s *State) ParkedKeys() (keys []ParkedCount, bad []*DecodeError, err error) {
	err = s.st.View(func(tx *store.Tx) (err error) { keys, bad, err = tx.ParkedKeys(); return err })
	return keys, bad, err
}

// ListDelayed reads limit delayed records after from, in key order.
// Undecodable records come back in err as a join of [*DecodeError]s.
func (s *State) ListDelayed(from DelayedKey, limit int) (entries []DelayedEntry, err error) {
	err = s.st.View(func(tx *store.Tx) (err error) { entries, err = tx.ListDelayed(from, limit); return err })
	return entries, err
}

// DueDelayed reads up to limit delayed records after from that are due
// at now, and the due time of the next one.
func (s *State) DueDelayed(from DelayedKey, now time.Time, limit int) (due []DelayedEntry,
	next time.Time, bad []*DecodeError, err error) {
	err = s.st.View(func(tx *store.Tx) (err error) {
		due, next, bad, err = tx.DueDelayed(from, now, limit)
		return err
	})
	return due, next, bad, err
}

// Progress returns the progress the file holds of topic's partition p.
func (s *State) Progress(topic string, p int32) (prog Progress, ok bool, err error) {
	err = s.st.View(func(tx *store.Tx) (err error) { prog, ok, err = tx.Progress(topic, p); return err })
	return prog, ok, err
}

// DeleteProgress deletes the progress of topic's partition p, in a
// write of its own.
func (s *State) DeleteProgress(topic string, p int32) error {
	return s.st.Update(func(tx *store.Tx) error { return tx.DeleteProgress(topic, p) })
}

// Empty reports whether the file holds nothing yet (no meta of an
// earlier run).
func (s *State) Empty() (empty bool, err error) {
	err = s.st.View(func(tx *store.Tx) (err error) { empty, err = tx.Empty(); return err })
	return empty, err
}

// EachDead calls fn with every dead letter of class ("" for all) in the
// file, with its ID, in one read, a chunk of records in memory at a
// time. fn must not keep rec, nor call the State.
func (s *State) EachDead(class string, fn func(id DeadID, rec *Record)) error {
	const chunk = 512
	return s.st.View(func(tx *store.Tx) error {
		for from := uint64(0); ; {
			entries, next, err := tx.DeadPage(class, from, chunk)
			if err != nil {
				return err
			}
			for i := range entries {
				id, err := tx.DeadID(entries[i].Key)
				if err != nil {
					return err
				}
				fn(id, &entries[i].Record)
			}
			if next == 0 {
				return nil
			}
			from = next
		}
	})
}

// DeadByIDs returns the keys in this file and the records of the dead
// letters ids, in ids' order (0 and nil for an ID that is not here, or
// not an ID), in one read.
func (s *State) DeadByIDs(ids []string) ([]uint64, []*Record, error) {
	locals := make([]uint64, len(ids))
	out := make([]*Record, len(ids))
	err := s.st.View(func(tx *store.Tx) error {
		for i, str := range ids {
			id, err := ParseDeadID(str)
			if err != nil {
				continue
			}
			local, ok, err := tx.FindDead(id)
			if errors.Is(err, ErrDeadID) || err == nil && !ok {
				continue
			}
			if err != nil {
				return err
			}
			rec, ok, err := tx.GetDead(local)
			if err != nil {
				return err
			}
			if ok {
				locals[i], out[i] = local, &rec
			}
		}
		return nil
	})
	return locals, out, err
}

// EachDeadOf calls fn, in one read, with the record of each dead letter
// of keys (its key in this file) that is still here and decodes. fn must
// not call the State.
func (s *State) EachDeadOf(keys []uint64, fn func(key uint64, rec *Record)) error {
	return s.st.View(func(tx *store.Tx) error {
		for _, k := range keys {
			rec, ok, err := tx.GetDead(k)
			if err != nil || !ok {
				continue // gone: done
			}
			fn(k, &rec)
		}
		return nil
	})
}
