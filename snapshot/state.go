package snapshot

import (
	"context"
	"log/slog"

	"github.com/handoff-go/handoff/snapshot/internal/deletes"
	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// State is an open state file: every read and write of it is one call of
// a State method, one transaction, so that what a caller sees is never a
// half-done move. Its methods are safe for concurrent use; each blocks
// for its transaction (a write for the file's fsync, and with a
// changelog open for its acknowledgement, see OpenChangelog).
type State struct {
	st *store.Store
}

// Open opens (creating it if needed) the state file at path: for the
// runtime, and read-only (opts.ReadOnly) for the CLI. It blocks up to
// opts.LockTimeout while another process holds the file (zero: 1s),
// then fails with an error wrapping ErrLocked.
func Open(path string, opts Options) (*State, error) {
	st, err := store.Open(path, opts)
	if err != nil {
		return nil, err
	}
	return &State{st: st}, nil
}

// Close closes the file; a State is of no use afterwards.
func (s *State) Close() error { return s.st.Close() }

// Path is the file's path.
func (s *State) Path() string { return s.st.Path() }

// FileGone reports whether the file is no longer at its path (deleted,
// or another file there) while open.
func (s *State) FileGone() (bool, error) { return s.st.FileGone() }

// Recreate writes the open file back at its path after it was deleted;
// ErrFileReplaced when another file took the path.
func (s *State) Recreate() error { return s.st.Recreate() }

// ClearChangelogComplete notes that the file's writes from now on reach
// no changelog.
func (s *State) ClearChangelogComplete() error { return s.st.ClearChangelogComplete() }

// ScanPending hands fn the pending records in batches, while it returns
// true, and returns those it could not decode.
func (s *State) ScanPending(fn func(batch []Entry) bool) ([]*DecodeError, error) {
	return s.st.ScanPending(fn)
}

// DoneQueue collects the records of done messages so that they are
// deleted many in one transaction (RunDeletes); see its methods. The zero
// DoneQueue is ready.
type DoneQueue = deletes.Queue

// DoneRecords are records of done messages, waiting to be deleted.
type DoneRecords = deletes.Records

// DeleteInterval is how often RunDeletes deletes what a DoneQueue holds.
const DeleteInterval = deletes.Interval

// RunDeletes deletes what q holds every DeleteInterval, in one
// transaction each time, until ctx ends (see DoneQueue.Run for deleted,
// failed and beat). It blocks until ctx ends.
func (s *State) RunDeletes(ctx context.Context, q *DoneQueue, log *slog.Logger, beat func(), deleted func(DoneRecords), failed func(error)) {
	q.Run(ctx, func(d DoneRecords) error { return s.st.Update(d.Delete) }, log, beat, deleted, failed)
}

// FlushDeletes deletes now what q holds, in one transaction, and waits
// for its changelog write (see DoneQueue.Flush).
func (s *State) FlushDeletes(q *DoneQueue, deleted func(DoneRecords)) error {
	return q.Flush(func(d DoneRecords) error { return s.st.Update(d.Delete) }, deleted)
}

// DeletePendingLocal deletes the pending records keys in the file
// alone, in one write, without tombstones in the changelog (Delete
// writes them).
func (s *State) DeletePendingLocal(keys ...uint64) error {
	return s.st.UpdateLocal(func(tx *store.Tx) error { return tx.DeletePending(keys...) })
}

// Quarantine moves bad to the quarantine bucket (a no-op for none).
func (s *State) Quarantine(bad ...*DecodeError) error {
	if len(bad) == 0 {
		return nil
	}
	return s.st.Update(func(tx *store.Tx) error { return tx.Quarantine(bad...) })
}
