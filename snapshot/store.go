package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Bucket names. Open creates all four.
const (
	// BucketPending holds the records saved at shutdown, to be re-pushed
	// on the next start.
	BucketPending = "pending"
	// BucketDead holds dead letters.
	BucketDead = "dead"
	// BucketQuarantine holds stored values that failed to decode, moved
	// there by [Store.LoadPending].
	BucketQuarantine = "quarantine"
	// BucketMeta holds facts about the file itself (its format version).
	BucketMeta = "meta"
)

// metaFormatKey is the key, in BucketMeta, of the file format version.
const metaFormatKey = "format"

const (
	defaultLockTimeout     = time.Second
	defaultInitialMmapSize = 256 << 20
)

// Options configures Open. Zero values mean the documented defaults.
type Options struct {
	// LockTimeout bounds how long Open waits for another process's lock
	// on the file; past it Open returns an error wrapping [ErrLocked].
	// Zero means 1s.
	LockTimeout time.Duration

	// InitialMmapSize is passed to bbolt as its initial memory map size,
	// in bytes. When a write transaction outgrows the map, bbolt remaps
	// and first copies every node the transaction touched: for the
	// shutdown snapshot that is the whole snapshot, and it makes the
	// write two to three times slower. 100k records of 1 KiB make a
	// 150 MB file; size this above the biggest file expected. On Unix the
	// map is address space only, not memory or disk (on Windows bbolt
	// grows the file to it at once). Zero means 256 MiB.
	InitialMmapSize int

	// NoSync, when true, skips fsync on commit. For tests and benchmarks
	// only: without fsync a committed record may be lost in a crash, and
	// the guarantees of handoff need it. Close syncs once when it is set.
	// Zero (false) means every commit is synced.
	NoSync bool
}

// Store is one open state file. All methods are safe for concurrent use:
// bbolt runs one write transaction at a time and readers alongside it.
type Store struct {
	db   *bolt.DB
	path string

	closeOnce sync.Once
	closeErr  error
}

// Open opens the state file at path, creating it and its buckets if
// needed. It blocks up to opts.LockTimeout while another process (or
// another open Store in this process) holds the file; then it returns an
// error wrapping [ErrLocked] that names the file. It also fails when the
// file is not a bbolt file or was written by a newer format.
func Open(path string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = defaultLockTimeout
	}
	if opts.InitialMmapSize <= 0 {
		opts.InitialMmapSize = defaultInitialMmapSize
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:         opts.LockTimeout, // never zero: zero waits forever
		InitialMmapSize: opts.InitialMmapSize,
		NoSync:          opts.NoSync,
		FreelistType:    bolt.FreelistMapType,
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (waited %s)", ErrLocked, path, opts.LockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range []string{BucketPending, BucketDead, BucketQuarantine, BucketMeta} {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		meta := tx.Bucket([]byte(BucketMeta))
		switch v := meta.Get([]byte(metaFormatKey)); {
		case v == nil:
			return meta.Put([]byte(metaFormatKey), []byte{formatVersion})
		case len(v) != 1 || v[0] != formatVersion:
			return fmt.Errorf("unsupported file format %x in bucket %s key %s", v, BucketMeta, metaFormatKey)
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("snapshot: open %s: %w", path, err), db.Close())
	}
	return &Store{db: db, path: path}, nil
}

// Path returns the path the store was opened with.
func (s *Store) Path() string { return s.path }

// Close closes the file and releases its lock, waiting for running
// transactions to finish. It is idempotent: later calls return the first
// call's result. When the store was opened with NoSync it syncs the file
// first. The error joins everything that failed.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.db.NoSync {
			if err := s.db.Sync(); err != nil {
				errs = append(errs, fmt.Errorf("snapshot: sync %s: %w", s.path, err))
			}
		}
		if err := s.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("snapshot: close %s: %w", s.path, err))
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// bucket returns the named bucket of tx, or an error naming it when the
// file has lost it.
func bucket(tx *bolt.Tx, name string) (*bolt.Bucket, error) {
	b := tx.Bucket([]byte(name))
	if b == nil {
		return nil, fmt.Errorf("bucket %s missing", name)
	}
	return b, nil
}

// seqKey returns the 8-byte big-endian key of sequence number n.
func seqKey(n uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), n) }

// deleteKeys deletes the records with the given keys from b. A missing
// key is not an error, so it is safe to run twice.
func deleteKeys(b *bolt.Bucket, name string, keys []uint64) error {
	var k [8]byte
	for _, n := range keys {
		binary.BigEndian.PutUint64(k[:], n)
		if err := b.Delete(k[:]); err != nil {
			return fmt.Errorf("delete %s/%016x: %w", name, n, err)
		}
	}
	return nil
}
