package store

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// Tx is one transaction on the state file, given to the function passed
// to [Store.Update], [Store.Batch] or [Store.View]. Every read and write
// of the records of the file is a method of Tx, so that several of them
// commit together or not at all (a dead letter saved and its pending
// record deleted, a message parked, a delayed record replaced by a dead
// letter) and several reads see one state of the file.
//
// A Tx is valid only while that function runs: it must not be kept or
// used from another goroutine. Its write methods fail in a [Store.View].
// Each error starts with "snapshot:", names the file and the bucket and
// key concerned (a [*DecodeError] names only the bucket and key), and
// wraps the cause; after an error the transaction stays usable, and fn
// decides whether to return it. Bytes returned by its methods are copies
// and outlive the transaction.
type Tx struct {
	tx *bolt.Tx
	s  *Store
	// cap collects the changes of a write transaction with changelog
	// capture on; nil when it is off (and in a View).
	cap *capture
	// rebuilding: applyChangelog treats the file's own keys as another
	// file's (RebuildChangelog, ownership.go).
	rebuilding bool
}

// Update runs fn in one read-write transaction and commits it, with one
// fsync, when fn returns nil; when fn returns an error, nothing fn wrote
// is kept and Update returns that error unchanged. A failure to begin or
// commit the transaction is returned as an error naming the file.
//
// Update blocks while another write transaction runs and holds the
// file's single writer lock while fn runs: fn should do no slow work.
// Concurrent calls are safe; fn must not keep the Tx.
//
// With changelog capture on ([Store.SetChangelog]), Update also sends
// the records it changed to the changelog once the transaction has
// committed, and waits for the broker's acknowledgement: a failure then
// is a [*ChangelogError], and the local transaction stays committed.
func (s *Store) Update(fn func(tx *Tx) error) error {
	st := s.lockCapture()
	cp := st.newCapture(false)
	err := s.public((*bolt.DB).Update, "update", cp, fn)
	return s.sendCaptured(st, cp, err)
}

// Batch runs fn in a read-write transaction shared with concurrent Batch
// callers: a group commit. The first caller to find no transaction under
// way leads: it runs its own fn and every fn queued meanwhile in one
// transaction, then the ones queued during that commit, until none is
// left. So n concurrent callers pay about one fsync, not n, and no caller
// waits for a timer (bbolt's own Batch waits up to 10ms for a batch to
// fill). If one fn fails the transaction is rolled back, that caller gets
// its error and the others run again without it, so fn may run more than
// once and must act only through tx. Batch returns once the transaction
// holding fn's writes has committed.
//
// Batch is for small writes made by many goroutines at once, such as one
// dead letter per failed message: they share fsyncs. A big write, such
// as the shutdown snapshot, goes in a [Store.Update] of its own, where
// it cannot be run twice.
func (s *Store) Batch(fn func(tx *Tx) error) error {
	return s.group.run(s, fn)
}

// groupCommit queues Batch calls for the leader.
type groupCommit struct {
	local   bool // its transactions are UpdateLocal's
	mu      sync.Mutex
	leading bool
	queue   []*groupCall
}

type groupCall struct {
	fn   func(tx *Tx) error
	err  error
	done chan struct{}
}

func (g *groupCommit) run(s *Store, fn func(tx *Tx) error) error {
	call := &groupCall{fn: fn, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, call)
	if g.leading {
		g.mu.Unlock()
		<-call.done
		return call.err
	}
	g.leading = true
	for len(g.queue) > 0 {
		calls := g.queue
		g.queue = nil
		g.mu.Unlock()
		s.commitGroup(calls, g.local)
		g.mu.Lock()
	}
	g.leading = false
	g.mu.Unlock()
	<-call.done
	return call.err
}

// commitGroup runs calls in one transaction; a call whose fn fails is
// answered with its error and the rest run again without it.
//
// With capture on, the changes of the transaction that commits go to the
// changelog in one Send, and every call of it gets the wait's failure;
// local ones (BatchLocal) are recorded as unsent instead, as
// UpdateLocal's.
func (s *Store) commitGroup(calls []*groupCall, local bool) {
	st := s.lockCapture()
	for len(calls) > 0 {
		failed := -1
		cp := st.newCapture(local)
		err := s.public((*bolt.DB).Update, "update", cp, func(tx *Tx) error {
			for i, c := range calls {
				if err := c.fn(tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed >= 0 {
			calls[failed].err = err
			close(calls[failed].done)
			calls = append(calls[:failed:failed], calls[failed+1:]...)
			continue
		}
		err = s.sendCaptured(st, cp, err)
		for _, c := range calls {
			c.err = err // nil, or the commit's failure for every one
			close(c.done)
		}
		return
	}
	s.sendCaptured(st, nil, nil) // every call failed: unlock
}

// View runs fn in a read-only transaction. It does not block writers,
// nor is it blocked by them. It returns fn's error unchanged.
func (s *Store) View(fn func(tx *Tx) error) error {
	return s.public((*bolt.DB).View, "read", nil, fn)
}

// public runs fn for Update and View: fn's own error comes back
// unchanged, bbolt's failure to begin or commit wrapped with the file's
// name. cp, when not nil, collects the changes of the transaction (its
// changes are reset first: a Batch may run again); a local capture
// records them in the unsent bucket before the commit.
func (s *Store) public(method func(*bolt.DB, func(*bolt.Tx) error) error, verb string, cp *capture, fn func(tx *Tx) error) (err error) {
	defer s.damaged(&err)
	var fnFailed bool
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	err = method(s.db, func(btx *bolt.Tx) error {
		cp.reset()
		tx := &Tx{tx: btx, s: s, cap: cp}
		err := fn(tx)
		fnFailed = err != nil
		if err == nil && cp != nil && cp.local {
			return tx.recordUnsent(cp.changes)
		}
		return err
	})
	if err != nil && !fnFailed {
		return fmt.Errorf("snapshot: %s %s: %w", verb, s.path, err)
	}
	return err
}

// view runs fn, given the package's own Tx, in a read-only transaction
// and returns its error as it is: the caller wraps it with what it was
// doing.
func (s *Store) view(fn func(tx *Tx) error) (err error) {
	defer s.damaged(&err)
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	return s.db.View(func(btx *bolt.Tx) error { return fn(&Tx{tx: btx, s: s}) })
}

// boltUpdate is bbolt's Update for the package's writes outside a Tx,
// with a damaged page an error as in view.
func (s *Store) boltUpdate(fn func(btx *bolt.Tx) error) (err error) {
	defer s.damaged(&err)
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	return s.db.Update(fn)
}

// damaged, deferred by a transaction's caller, turns a panic raised in
// bbolt by a damaged page of the file into an error wrapping ErrDamaged
// in *err; bbolt has rolled the transaction back by then, its locks
// released. Any other panic goes on.
func (s *Store) damaged(err *error) {
	if r := recover(); r != nil {
		if !panicInBolt() {
			panic(r)
		}
		*err = fmt.Errorf("%w: %s: %v", ErrDamaged, s.path, r)
	}
}

// panicInBolt reports whether the panic its (deferred) caller recovers
// was raised in bbolt: the first frame below the runtime's panic frames
// is bbolt's.
func panicInBolt() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	panicking := false
	for {
		f, more := frames.Next()
		switch {
		case f.Function == "runtime.gopanic":
			panicking = true
		case panicking && !strings.HasPrefix(f.Function, "runtime."):
			return strings.HasPrefix(f.Function, "go.etcd.io/bbolt.") || strings.HasPrefix(f.Function, "go.etcd.io/bbolt/")
		}
		if !more {
			return false
		}
	}
}

// bucket returns the named bucket, or an error naming it when the file
// has lost it.
func (tx *Tx) bucket(name string) (*bolt.Bucket, error) {
	b := tx.tx.Bucket([]byte(name))
	if b == nil {
		return nil, fmt.Errorf("bucket %s missing", name)
	}
	return b, nil
}

// errorf wraps err, when it is not nil, as "snapshot: <what> in <file>:
// <err>". The inner error names the bucket and key.
func (tx *Tx) errorf(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("snapshot: "+format+" in %s: %w", append(args, tx.s.path, err)...)
}

// cursor is a bbolt cursor with seekAfter.
type cursor struct{ *bolt.Cursor }

// cursor returns a cursor on the named bucket.
func (tx *Tx) cursor(name string) (cursor, error) {
	b, err := tx.bucket(name)
	if err != nil {
		return cursor{}, err
	}
	return cursor{b.Cursor()}, nil
}

// seekAfter moves to the first key strictly greater than after, or to
// the first key when after is empty, and returns it.
func (c cursor) seekAfter(after []byte) (k, v []byte) {
	if len(after) == 0 {
		return c.First()
	}
	k, v = c.Seek(after)
	if k != nil && bytes.Equal(k, after) {
		return c.Next()
	}
	return k, v
}
