package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// DeadRef names one dead letter of an open state file: its key in the
// file and its ID.
type DeadRef struct {
	// Key is its key in this file's dead bucket: a position in this file
	// only (the from of [DeadQuery], the keys [State.RequeueDead] and
	// [State.Delete] take). 0 for an undecodable dead letter stored
	// under a key of the wrong shape.
	Key uint64
	// ID is its ID, the same on every instance of the group (see
	// [DeadID]); zero when IDErr is set.
	ID DeadID
	// IDErr is why the ID could not be read (the file's record of where
	// the dead letter came from is damaged); nil normally.
	IDErr error
}

// String returns the ID's text form, or "(key K: error)" when it could
// not be read.
func (r DeadRef) String() string {
	if r.IDErr != nil {
		return fmt.Sprintf("(key %d: %v)", r.Key, r.IDErr)
	}
	return r.ID.String()
}

// DeadEntry is a dead letter with its key and ID.
type DeadEntry struct {
	DeadRef
	Record Record
}

// UndecodableDead is a dead letter whose record does not decode: the
// listings leave it out and return it apart. Only a discard removes it.
type UndecodableDead struct {
	DeadRef
	// Err says which value failed and why; it wraps [ErrCorrupt].
	Err *DecodeError
}

// DeadQuery selects a page of dead letters for [State.ListDead].
type DeadQuery struct {
	// Class selects the dead letters of one class; "" every class.
	Class string
	// Match selects among those; nil selects every one. It must not keep
	// the record.
	Match func(*Record) bool
	// From is where the page starts: oldest first, the keys above From
	// (0: from the start); Newest, the keys below it (0: from the end).
	From uint64
	// Newest lists the newest first.
	Newest bool
	// Limit is the most dead letters of the page; below 1 the page is
	// empty and only Total is counted.
	Limit int
	// Scan reads only the next Limit dead letters from From on, in key
	// order (Newest is ignored), and pages those Match selects: the page
	// may come back short of Limit with more to read, and Total is not
	// counted (0). It reads a chunk instead of every dead letter of the
	// class.
	Scan bool
}

// DeadList is a page of dead letters from [State.ListDead].
type DeadList struct {
	// Page holds the dead letters of the page, in the query's order.
	Page []DeadEntry
	// Next is the From of the next page in the same order: 0 past the
	// last.
	Next uint64
	// Total counts the dead letters of the class that Match selects, on
	// every page.
	Total int
	// Undecodable are the dead letters (of the class, or whose class
	// cannot be read) that do not decode, in key order: left out of the
	// page and of Total.
	Undecodable []UndecodableDead
}

// ListDead reads every dead letter of q.Class (a chunk of them with
// q.Scan) and returns a page of those q.Match selects, with their IDs
// and keys, and their count, in one read transaction. It decodes every dead letter of the class to count them,
// holding the page and a chunk of records in memory. A dead letter that
// does not decode is returned apart (DeadList.Undecodable), not as an
// error.
func (s *State) ListDead(q DeadQuery) (DeadList, error) {
	match := q.Match
	if match == nil {
		match = func(*Record) bool { return true }
	}
	var out DeadList
	err := s.st.View(func(tx *store.Tx) error {
		var page []Entry
		var next uint64
		var total int
		var err error
		if q.Scan {
			page, next, err = tx.DeadPage(q.Class, q.From, q.Limit)
			page = slices.DeleteFunc(page, func(e Entry) bool { return !match(&e.Record) })
		} else {
			page, next, total, err = tx.DeadSearch(q.Class, match, q.From, q.Newest, q.Limit)
		}
		bad, ok := decodeErrors(err)
		if !ok {
			return err
		}
		out.Next, out.Total = next, total
		out.Page = make([]DeadEntry, len(page))
		for i := range page {
			out.Page[i] = DeadEntry{DeadRef: deadRef(tx, page[i].Key), Record: page[i].Record}
		}
		out.Undecodable = undecodableDead(tx, bad)
		return nil
	})
	return out, err
}

// deadRef returns the key and ID of the dead letter under key, read in
// tx.
func deadRef(tx *store.Tx, key uint64) DeadRef {
	id, err := tx.DeadID(key)
	return DeadRef{Key: key, ID: id, IDErr: err}
}

// undecodableDead returns bad, undecodable dead letters, with their keys
// and IDs read in tx.
func undecodableDead(tx *store.Tx, bad []*DecodeError) []UndecodableDead {
	if len(bad) == 0 {
		return nil
	}
	out := make([]UndecodableDead, len(bad))
	for i, de := range bad {
		var key uint64
		if len(de.Key) == 8 {
			key = binary.BigEndian.Uint64(de.Key)
		}
		out[i] = UndecodableDead{DeadRef: deadRef(tx, key), Err: de}
	}
	return out
}

// DeadByID returns the dead letter with ID id, and false when the file
// has none, in one read transaction. A Local ID (a bare number) names a
// dead letter only in a file without a changelog ID: in one with, it is
// an error wrapping [ErrDeadID] (it may be another file's key). A dead
// letter that does not decode is returned with true, its DeadRef set,
// and a [*DecodeError].
func (s *State) DeadByID(id DeadID) (DeadEntry, bool, error) {
	var (
		e  DeadEntry
		ok bool
	)
	err := s.st.View(func(tx *store.Tx) error {
		key, found, err := tx.FindDead(id)
		if err != nil || !found {
			return err
		}
		e.DeadRef = DeadRef{Key: key, ID: id}
		e.Record, ok, err = tx.GetDead(key)
		return err
	})
	return e, ok, err
}

// DeadByMessageID returns the first dead letter, in key order, whose
// message ID is msgID, and false when none is, in one read transaction.
// Dead letters that do not decode are passed over.
func (s *State) DeadByMessageID(msgID string) (DeadEntry, bool, error) {
	var (
		e  DeadEntry
		ok bool
	)
	err := s.st.View(func(tx *store.Tx) error {
		for after := uint64(0); ; {
			page, next, err := tx.DeadPage("", after, walkPage)
			if err != nil && !errors.Is(err, ErrCorrupt) {
				return err
			}
			for i := range page {
				if page[i].Record.Message.ID == msgID {
					e, ok = DeadEntry{DeadRef: deadRef(tx, page[i].Key), Record: page[i].Record}, true
					return nil
				}
			}
			if next == 0 {
				return nil
			}
			after = next
		}
	})
	return e, ok, err
}

// DeadRefs returns the keys and IDs of the dead letters of class (""
// for every class) in key order, in one read transaction: those that
// decode, and apart those that do not (with a class, those whose class
// cannot be read: they may be of it).
func (s *State) DeadRefs(class string) ([]DeadRef, []UndecodableDead, error) {
	var (
		refs []DeadRef
		bad  []UndecodableDead
	)
	err := s.st.View(func(tx *store.Tx) error {
		b, err := walkDead(tx, class, func(page []Entry) {
			for i := range page {
				refs = append(refs, deadRef(tx, page[i].Key))
			}
		})
		if err != nil {
			return err
		}
		bad = undecodableDead(tx, b)
		return nil
	})
	return refs, bad, err
}

// RequeueDead moves the dead letters under keys ([DeadRef.Key]) to the
// pending bucket, in one write transaction, so that the service's next
// start re-pushes them before it fetches from Kafka, and returns their
// pending keys in the order of keys. Each moves with a fresh retry
// budget: Attempt and Redeliveries 0, FirstFailed zero, Reason
// ReasonRequeued, SavedAt now; Err (the last error) stays. It moves all
// or nothing: a key with no dead letter (or named twice) is an error
// wrapping [ErrNotFound], one that does not decode a [*DecodeError], and
// nothing changes then. No keys is no transaction.
func (s *State) RequeueDead(keys ...uint64) ([]uint64, error) {
	if len(keys) == 0 {
		return []uint64{}, nil
	}
	var pending []uint64
	err := s.st.Update(func(tx *store.Tx) (err error) { pending, err = tx.RequeueDead(keys...); return err })
	return pending, err
}
