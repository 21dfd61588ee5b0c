package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// copyAttempts bounds how many copies a read-only Open takes of a file
// that a commit changed during the copy; after the n-th it waits n times
// copyPause, so that a burst of commits can pass.
const (
	copyAttempts = 30
	copyPause    = time.Millisecond
)

// openReadOnly is Open with opts.ReadOnly: bbolt's read-only open, which
// shares the file with other readers but not with a writer; when a writer
// holds it past opts.LockTimeout, a read-only open of a consistent copy.
func openReadOnly(path string, opts Options) (*Store, error) {
	s := &Store{path: path}
	if err := checkNotEmpty(path); err != nil {
		return nil, err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: opts.LockTimeout, InitialMmapSize: opts.InitialMmapSize})
	if errors.Is(err, berrors.ErrTimeout) {
		// A writer holds the file: read a copy instead.
		if s.copied, err = copyConsistent(path); err != nil {
			return nil, fmt.Errorf("snapshot: open %s read-only: held by another process for %s, and %w", path, opts.LockTimeout, err)
		}
		db, err = bolt.Open(s.copied, 0o600, &bolt.Options{ReadOnly: true, Timeout: opts.LockTimeout, InitialMmapSize: opts.InitialMmapSize})
		if err != nil {
			err = errors.Join(err, os.Remove(s.copied))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: open %s read-only: %w", path, err)
	}
	s.db = db
	err = db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte(bucketMeta))
		if meta == nil {
			return fmt.Errorf("%w: no %s bucket", ErrNotState, bucketMeta)
		}
		format, err := checkMark(path, meta, knownFeatures)
		s.mark.format.Store(int32(format))
		return err
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("snapshot: open %s read-only: %w", path, err), s.Close())
	}
	return s, nil
}

// Copied reports whether the store reads a copy of its file, taken by a
// read-only Open because another process held the file for writing.
func (s *Store) Copied() bool { return s.copied != "" }

// copyConsistent copies the bbolt file at path, which another process
// may be writing, into a new temporary file and returns its name. A
// bbolt commit writes its pages first and one of the two meta pages at
// the start of the file last, and never overwrites a page the last
// committed transaction reaches before the next commit: so a copy during
// which both meta pages stayed the same holds that transaction whole. It
// copies again when they changed, up to copyAttempts times: a writer that
// commits without pause for all that time (about half a second) makes it
// fail.
func copyConsistent(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tmp, err := os.CreateTemp("", "handoff-state-copy-*.db")
	if err != nil {
		return "", fmt.Errorf("copy it: %w", err)
	}
	name := tmp.Name()
	fail := func(err error) (string, error) {
		return "", errors.Join(fmt.Errorf("copy it to %s: %w", name, err), tmp.Close(), os.Remove(name))
	}
	for n := range copyAttempts {
		time.Sleep(time.Duration(n) * copyPause)
		before, err := metaPages(f)
		if err != nil {
			return fail(err)
		}
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return fail(err)
		}
		if err := tmp.Truncate(0); err != nil {
			return fail(err)
		}
		if _, err := io.Copy(tmp, io.NewSectionReader(f, 0, usedBytes(before))); err != nil {
			return fail(err)
		}
		after, err := metaPages(f)
		if err != nil {
			return fail(err)
		}
		if bytes.Equal(before, after) {
			if err := tmp.Close(); err != nil {
				return "", errors.Join(fmt.Errorf("copy it to %s: %w", name, err), os.Remove(name))
			}
			return name, nil
		}
	}
	return fail(fmt.Errorf("a commit changed the file during each of %d copies", copyAttempts))
}

// bbolt's meta page: a 16-byte page header, then magic, version, page
// size and flags (native uint32s), the root bucket (16 bytes), the
// freelist page, the high-water page ID and the transaction ID (native
// uint64s).
const (
	metaPageSizeAt = 16 + 8
	metaPgidAt     = 16 + 40
	metaTxidAt     = 16 + 48
)

// usedBytes returns the length of the file's part that holds pages: up
// to the high-water page ID of the meta with the highest transaction ID
// of metas (what metaPages returned). bbolt grows the file ahead of use,
// by up to 16 MiB: the rest is never read.
func usedBytes(metas []byte) int64 {
	size := len(metas) / 2
	m0, m1 := metas[:size], metas[size:]
	m := m0
	if binary.NativeEndian.Uint64(m1[metaTxidAt:]) > binary.NativeEndian.Uint64(m0[metaTxidAt:]) {
		m = m1
	}
	return int64(binary.NativeEndian.Uint64(m[metaPgidAt:])) * int64(size)
}

// metaPages returns the two meta pages at the start of a bbolt file, of
// the page size page 0 records.
func metaPages(f *os.File) ([]byte, error) {
	var head [28]byte
	if _, err := f.ReadAt(head[:], 0); err != nil {
		return nil, fmt.Errorf("read its first page: %w", err)
	}
	size := binary.NativeEndian.Uint32(head[metaPageSizeAt:])
	if size < 512 || size > 1<<20 || size&(size-1) != 0 {
		return nil, fmt.Errorf("not a bbolt file: page size %d", size)
	}
	b := make([]byte, 2*size)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("read its meta pages: %w", err)
	}
	return b, nil
}
