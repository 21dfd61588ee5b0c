package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// ErrFileReplaced is returned by [Store.Recreate] when another file took
// the store's path: it is not overwritten.
var ErrFileReplaced = errors.New("snapshot: state file replaced by another file")

// FileGone reports whether the file at the store's path is no longer the
// one the store has open: deleted (an operator's rm, a volume cleaned
// under the process) or replaced by another file. The store keeps
// working on the file it has open either way, but what it writes there
// no longer reaches the path, so a restart would not find it. It blocks
// only for a stat of the path.
func (s *Store) FileGone() (gone bool, err error) {
	if s.opened == nil {
		return false, nil
	}
	s.dbMu.RLock()
	opened := s.opened
	s.dbMu.RUnlock()
	fi, err := os.Stat(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("snapshot: stat %s: %w", s.path, err)
	}
	return !os.SameFile(fi, opened), nil
}

// Recreate writes everything the store holds to a new file at its path
// and goes on with that file, for a file deleted while open (see
// FileGone): nothing written before or after is lost to the next start.
// It waits for the running transactions to end and blocks new ones while
// it copies, so it takes about as long as writing the file once. When
// another file is at the path now, it changes nothing and returns an
// error wrapping [ErrFileReplaced].
func (s *Store) Recreate() error {
	s.dbMu.Lock()
	defer s.dbMu.Unlock()
	if s.opened == nil {
		return fmt.Errorf("snapshot: recreate %s: the store is read-only", s.path)
	}
	if fi, err := os.Stat(s.path); err == nil {
		if os.SameFile(fi, s.opened) {
			return nil // not gone
		}
		return fmt.Errorf("%w: %s is not the file this process has open; not overwritten", ErrFileReplaced, s.path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), filepath.Base(s.path)+".recreate-*")
	if err != nil {
		return fmt.Errorf("snapshot: recreate %s: %w", s.path, err)
	}
	tmpPath := tmp.Name()
	err = s.db.View(func(tx *bolt.Tx) error {
		_, err := tx.WriteTo(tmp)
		return err
	})
	err = errors.Join(err, tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmpPath, s.path)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("snapshot: recreate %s: %w", s.path, err), os.Remove(tmpPath))
	}
	db, err := bolt.Open(s.path, 0o600, &bolt.Options{
		Timeout:         s.opts.LockTimeout,
		InitialMmapSize: s.opts.InitialMmapSize,
		NoSync:          s.opts.NoSync,
		FreelistType:    bolt.FreelistMapType,
	})
	if err != nil {
		// The store goes on with the old file; the copy leaves the
		// path, so that the next Recreate tries again.
		return errors.Join(fmt.Errorf("snapshot: recreate %s: open the copy: %w", s.path, err), os.Remove(s.path))
	}
	fi, err := os.Stat(s.path)
	if err != nil {
		return errors.Join(fmt.Errorf("snapshot: recreate %s: %w", s.path, err), db.Close())
	}
	old := s.db
	s.db, s.opened = db, fi
	if err := old.Close(); err != nil {
		return fmt.Errorf("snapshot: recreate %s: close the deleted file: %w", s.path, err)
	}
	return nil
}
