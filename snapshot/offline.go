package snapshot

import (
	"errors"

	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// The offline*.go files are the face of State the command line
// (cmd/handoff) uses on a state file with no running service behind it:
// read-only on any file (Options.ReadOnly: the file of a running
// service, which holds it locked, is read from a consistent copy), and
// for writing on the file of a stopped one (Open then fails with
// ErrLocked after Options.LockTimeout while a service holds it). Each
// method is one transaction: a read neither waits for writers nor blocks
// them; a write waits for the file's one write transaction and returns
// once it is durable (one fsync), all of it or none of it. A State the
// CLI opens has no changelog set, so its writes reach the file only: on
// a file with a changelog ID (FileInfo.HasFileID) the next restore of
// the records' partitions undoes them, and the CLI warns so.

// FileInfo is what a state file says of itself: who last ran on it, its
// format, what it keeps besides records.
type FileInfo struct {
	// Group and Instance are the consumer group and the instance name
	// the last service to open the file recorded; empty when none did.
	Group, Instance string
	// Format is the file's format mark: 1 for a file with no record
	// written yet (or written before the mark).
	Format int
	// Features are the features the file's records need, by name, with
	// their descriptions; nil when none.
	Features map[string]string
	// Classes are the class names the services that ran on the file
	// were configured with, in byte order; nil when none recorded any.
	Classes []string
	// Pauses are the paused classes, by class; never nil.
	Pauses map[string]Pause
	// FileID is the file's changelog ID (the writer ID in the changelog
	// keys it writes), and HasFileID whether it has one: false (and
	// FileID zero) for a file that never ran with the changelog.
	FileID    [16]byte
	HasFileID bool
	// Checkpoints are where the changelog partitions the file was
	// restored from or written to stand: topic -> partition -> the next
	// offset to apply; never nil.
	Checkpoints map[string]map[int32]int64
}

// FileInfo reads what the file says of itself, in one read
// transaction.
func (s *State) FileInfo() (FileInfo, error) {
	var fi FileInfo
	err := s.st.View(func(tx *store.Tx) error {
		for key, dst := range map[string]*string{store.MetaGroup: &fi.Group, store.MetaInstance: &fi.Instance} {
			v, _, err := tx.Meta(key)
			if err != nil {
				return err
			}
			*dst = string(v)
		}
		var err error
		if fi.Format, fi.Features, err = tx.Format(); err != nil {
			return err
		}
		if fi.Classes, err = tx.Classes(); err != nil {
			return err
		}
		if fi.Pauses, err = tx.Pauses(); err != nil {
			return err
		}
		if fi.FileID, fi.HasFileID, err = tx.ChangelogFileID(); err != nil {
			return err
		}
		fi.Checkpoints, err = tx.Checkpoints()
		return err
	})
	if len(fi.Features) == 0 {
		fi.Features = nil
	}
	if fi.Pauses == nil {
		fi.Pauses = map[string]Pause{}
	}
	return fi, err
}

// Counts returns the number of records in each bucket that holds them
// (BucketPending, BucketDead, BucketQuarantine, BucketDelayed and
// BucketParked), records that would not decode included, in one read
// transaction.
func (s *State) Counts() (map[string]int, error) {
	var counts map[string]int
	err := s.st.View(func(tx *store.Tx) (err error) { counts, err = tx.Counts(); return err })
	return counts, err
}

// Walk is what [State.Walk] calls for the records of each bucket. A nil
// func leaves its bucket unread. The funcs may keep what they are given
// (copies of the file's bytes), but must not call a method of the State
// that writes: a write that grows the file's memory map waits for the
// walk's read transaction to end, which waits for the func.
type Walk struct {
	// Pending is called with every pending record, in save order.
	Pending func(e *Entry)
	// Dead is called with every dead letter, in key order (save order).
	Dead func(e *Entry)
	// Delayed is called with every delayed record, in due order.
	Delayed func(e *DelayedEntry)
	// Parked is called once for every (class, key) with parked records,
	// in the parked bucket's key order (see ParkedCount), with its
	// records in park order (the order they run in).
	Parked func(key ParkedCount, recs []ParkedEntry)
}

// walkPage is how many pending records or dead letters Walk decodes at
// a time.
const walkPage = 1000

// Walk reads the record buckets w names, in one read transaction, in
// this order: pending, dead, delayed, parked. A record that does not
// decode (or sits under a key of the wrong shape, or a parked key that
// does not parse) is skipped and returned as a [*DecodeError], in the
// order met; its Bucket says where it is. [State.Quarantine] moves those
// of the pending and parked buckets out of the delivery path, as the
// service does; dead letters and delayed records are never quarantined.
// Walk returns at the first other error. It holds one page of dead
// letters at a time, every pending and delayed record, and one parked
// key's records.
func (s *State) Walk(w Walk) ([]*DecodeError, error) {
	var bad []*DecodeError
	err := s.st.View(func(tx *store.Tx) error {
		if w.Pending != nil {
			entries, b, err := tx.LoadPending()
			if err != nil {
				return err
			}
			bad = append(bad, b...)
			for i := range entries {
				w.Pending(&entries[i])
			}
		}
		if w.Dead != nil {
			b, err := walkDead(tx, "", func(page []Entry) {
				for i := range page {
					w.Dead(&page[i])
				}
			})
			bad = append(bad, b...)
			if err != nil {
				return err
			}
		}
		if w.Delayed != nil {
			// No limit: a short page cannot tell the end from skipped
			// undecodable records.
			des, err := tx.ListDelayed(nil, 0)
			b, ok := decodeErrors(err)
			if err != nil && !ok {
				return err
			}
			bad = append(bad, b...)
			for i := range des {
				w.Delayed(&des[i])
			}
		}
		if w.Parked != nil {
			pks, b, err := tx.ParkedKeys()
			if err != nil {
				return err
			}
			bad = append(bad, b...)
			for _, pk := range pks {
				recs, b, err := tx.Parked(pk.Class, pk.Key)
				if err != nil {
					return err
				}
				bad = append(bad, b...)
				w.Parked(pk, recs)
			}
		}
		return nil
	})
	return bad, err
}

// walkDead calls fn with every page of dead letters of class ("" for
// every class), read in tx. The dead letters that do not decode are not
// in the pages: they are returned, and do not stop the walk.
func walkDead(tx *store.Tx, class string, fn func(page []Entry)) ([]*DecodeError, error) {
	var bad []*DecodeError
	for after := uint64(0); ; {
		page, next, err := tx.DeadPage(class, after, walkPage)
		if err != nil {
			des, ok := decodeErrors(err)
			if !ok {
				return bad, err
			}
			bad = append(bad, des...)
		}
		fn(page)
		if next == 0 {
			return bad, nil
		}
		after = next
	}
}

// decodeErrors returns the [*DecodeError]s err joins (none for a nil
// err), and false when it holds anything else.
func decodeErrors(err error) ([]*DecodeError, bool) {
	if err == nil {
		return nil, true
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]*DecodeError, 0, len(errs))
	for _, e := range errs {
		de, ok := errors.AsType[*DecodeError](e)
		if !ok {
			return nil, false
		}
		out = append(out, de)
	}
	return out, true
}

// Quarantined lists the quarantine bucket's entries, in key order, in
// one read transaction.
func (s *State) Quarantined() ([]Quarantined, error) {
	var qs []Quarantined
	err := s.st.View(func(tx *store.Tx) (err error) { qs, err = tx.Quarantined(); return err })
	return qs, err
}

// Copied reports whether the State reads a copy of its file, taken by a
// read-only Open because another process (a running service) held the
// file for writing.
func (s *State) Copied() bool { return s.st.Copied() }
