package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Names of the buckets that hold records. They are the keys of
// [Tx.Counts] and the Bucket of a [DecodeError] or a [Quarantined] entry.
const (
	// BucketPending holds the records saved at shutdown, to be re-pushed
	// on the next start.
	BucketPending = "pending"
	// BucketDead holds dead letters.
	BucketDead = "dead"
	// BucketQuarantine holds stored values that failed to decode, moved
	// there by [Tx.Quarantine] and [Store.ScanPending].
	BucketQuarantine = "quarantine"
	// BucketDelayed holds messages to deliver later, under keys of their
	// due time and ID (see [DelayedKey]).
	BucketDelayed = "delayed"
	// BucketParked holds the messages parked behind a dead letter of
	// their ordering key (see [ParkedKey]).
	BucketParked = "parked"
)

// The two buckets that hold no records: the ID index of BucketDelayed
// (ID -> key) and the facts about the file itself (see [Tx.Meta]).
const (
	bucketDelayedIDs = "delayed_ids"
	bucketMeta       = "meta"
)

// The changelog's bookkeeping buckets (see changelog.go): the mapping of
// restored records to the changelog keys of the file they came from, and
// the changes committed locally but not (yet) in the changelog. They are
// never sent.
const (
	bucketChangelogKeys   = "changelog_keys"
	bucketChangelogUnsent = "changelog_unsent"
)

// buckets lists every bucket Open creates.
var buckets = []string{BucketPending, BucketDead, BucketQuarantine, BucketDelayed, bucketDelayedIDs, BucketParked, bucketMeta, bucketChangelogKeys, bucketChangelogUnsent}

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

	// ReadOnly opens the file for reading only: the write transactions
	// (Update, Batch) fail, the file is neither created nor changed (not
	// even its format mark), and another read-only Open may share it.
	// A file another process holds open for writing (a running service:
	// bbolt locks it exclusively for as long as it is open) cannot be
	// shared; then Open waits at most LockTimeout and, instead of
	// failing, reads a consistent copy of the file taken into a
	// temporary file (a copy during which no transaction committed),
	// removed by Close. [Store.Copied] says which happened. Zero (false)
	// means read-write.
	ReadOnly bool

	// Existing opens only a file that is a state file already: Open
	// fails with an error wrapping [ErrNotState], changing nothing, for
	// an empty file or a bbolt file without a state file's meta bucket
	// (another program's database), instead of making a state file of
	// it. ReadOnly implies it. Zero (false) means such a file is made a
	// state file, as a new one is.
	Existing bool
}

// Store is one open state file. All methods are safe for concurrent use:
// bbolt runs one write transaction at a time and readers alongside it.
type Store struct {
	// dbMu guards db, which Recreate replaces; every transaction holds
	// it for reading.
	dbMu sync.RWMutex
	db   *bolt.DB
	path string
	// opened is the file db has open, as Open found it at path (nil for
	// a read-only store): FileGone compares path with it.
	opened os.FileInfo
	// opts are Open's, for Recreate.
	opts Options
	// copied is the temporary copy a ReadOnly Open reads, removed by
	// Close; empty when it reads path itself.
	copied string

	// mark is what the store knows of the file's format mark.
	mark formatMark

	// group is the group commit of Batch, localGroup of BatchLocal.
	group, localGroup groupCommit

	// cl is the changelog capture SetChangelog turned on; nil: off.
	cl atomic.Pointer[clState]
	// sendMu serializes the write transactions with capture on and their
	// Send, so that Send is called in commit order.
	sendMu sync.Mutex
	// handedOver is SetDelayedHandedOver's func; nil: none.
	handedOver atomic.Pointer[func(DelayedKey) bool]

	closeOnce sync.Once
	closeErr  error
}

// Open opens the state file at path, creating it and its buckets if
// needed. It blocks up to opts.LockTimeout while another process (or
// another open Store in this process) holds the file; then it returns an
// error wrapping [ErrLocked] that names the file. It also fails when the
// file is not a bbolt file, is damaged (an error wrapping [ErrDamaged])
// or was written by a newer format. With
// opts.ReadOnly it changes nothing and reads a copy of a file held by a
// running service (see [Options.ReadOnly]).
func Open(path string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = defaultLockTimeout
	}
	if opts.InitialMmapSize <= 0 {
		opts.InitialMmapSize = defaultInitialMmapSize
	}
	if opts.ReadOnly {
		return openReadOnlyGuarded(path, opts)
	}
	return openFile(path, opts)
}

// openReadOnlyGuarded is openReadOnly with a damaged page an error, as
// in openFile.
func openReadOnlyGuarded(path string, opts Options) (st *Store, err error) {
	defer func() {
		if r := recover(); r != nil {
			if !panicInBolt() {
				panic(r)
			}
			st, err = nil, fmt.Errorf("snapshot: open %s read-only: %w: %v", path, ErrDamaged, r)
		}
	}()
	return openReadOnly(path, opts)
}

// openFile is Open of a file to write. A panic of bbolt on a damaged
// page is returned as an error wrapping ErrDamaged.
func openFile(path string, opts Options) (st *Store, err error) {
	if opts.Existing {
		if err := checkNotEmpty(path); err != nil {
			return nil, err
		}
	}
	var db *bolt.DB
	defer func() {
		if r := recover(); r != nil {
			if !panicInBolt() {
				panic(r)
			}
			st, err = nil, fmt.Errorf("snapshot: open %s: %w: %v", path, ErrDamaged, r)
			if db != nil {
				err = errors.Join(err, db.Close())
			}
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{
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
	st = &Store{db: db, path: path, opts: opts}
	st.localGroup.local = true
	if st.opened, err = os.Stat(path); err != nil {
		return nil, errors.Join(fmt.Errorf("snapshot: open %s: %w", path, err), db.Close())
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if opts.Existing && tx.Bucket([]byte(bucketMeta)) == nil {
			return fmt.Errorf("%w: no %s bucket", ErrNotState, bucketMeta)
		}
		for _, name := range buckets {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		// The format mark is checked, never raised here: the first
		// record written raises it (see markRecords), so a file this
		// build only opened stays readable by the build before.
		format, err := checkMark(path, tx.Bucket([]byte(bucketMeta)), knownFeatures)
		st.mark.format.Store(int32(format))
		return err
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("snapshot: open %s: %w", path, err), db.Close())
	}
	return st, nil
}

// checkNotEmpty returns an error wrapping ErrNotState for an empty file
// at path, which bbolt would otherwise make a database of (or, read-only,
// fail on with a write error).
func checkNotEmpty(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("snapshot: open %s: %w", path, err)
	}
	if fi.Mode().IsRegular() && fi.Size() == 0 {
		return fmt.Errorf("snapshot: open %s: %w: the file is empty", path, ErrNotState)
	}
	return nil
}

// Path returns the path the store was opened with.
func (s *Store) Path() string { return s.path }

// Close closes the file and releases its lock, waiting for running
// transactions to finish. It is idempotent: later calls return the first
// call's result. When the store was opened with NoSync it syncs the file
// first. The error joins everything that failed.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.dbMu.Lock()
		defer s.dbMu.Unlock()
		var errs []error
		if s.db.NoSync {
			if err := s.db.Sync(); err != nil {
				errs = append(errs, fmt.Errorf("snapshot: sync %s: %w", s.path, err))
			}
		}
		if err := s.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("snapshot: close %s: %w", s.path, err))
		}
		if s.copied != "" {
			if err := os.Remove(s.copied); err != nil {
				errs = append(errs, fmt.Errorf("snapshot: remove the copy of %s: %w", s.path, err))
			}
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// Counts returns the number of records in each bucket that holds them:
// [BucketPending], [BucketDead], [BucketQuarantine], [BucketDelayed] and
// [BucketParked]. It reads keys only, so records that would fail to
// decode are counted too.
func (tx *Tx) Counts() (map[string]int, error) {
	names := []string{BucketPending, BucketDead, BucketQuarantine, BucketDelayed, BucketParked}
	out := make(map[string]int, len(names))
	for _, name := range names {
		n, err := tx.count(name)
		if err != nil {
			return nil, tx.errorf(err, "count records")
		}
		out[name] = n
	}
	return out, nil
}

// Empty reports whether the file holds nothing at all: no key in any
// bucket, so no record (pending, dead, quarantine, delayed, parked) and
// no meta (the group and instance a runtime records when it opens the
// file, the classes, pauses, the format mark, the changelog's file ID,
// checkpoints and bookkeeping). A file [Open] has just
// created is empty; so is one whose previous service never got as far
// as recording its group. The runtime calls a file empty at its start
// "new": see its lost-disk check.
func (tx *Tx) Empty() (bool, error) {
	for _, name := range buckets {
		b, err := tx.bucket(name)
		if err != nil {
			return false, tx.errorf(err, "check whether the file is empty")
		}
		if k, _ := b.Cursor().First(); k != nil {
			return false, nil
		}
	}
	return true, nil
}

// count returns the number of records in the named bucket, nested
// buckets left out. It reads keys only.
func (tx *Tx) count(name string) (int, error) {
	b, err := tx.bucket(name)
	if err != nil {
		return 0, err
	}
	n := 0
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v != nil {
			n++
		}
	}
	return n, nil
}

// seqKey returns the 8-byte big-endian key of sequence number n.
func seqKey(n uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), n) }

// putNew puts vals under the named bucket's next sequence numbers and
// returns those keys. Keys only grow, so pages are filled completely.
// bbolt keeps each value until the commit: they must not be written over.
//
// With capture on, each put is captured, routed by recs[i] (recs may be
// nil: then by the decoded value).
func (tx *Tx) putNew(name string, vals [][]byte, recs []Record) ([]uint64, error) {
	if len(vals) == 0 {
		return []uint64{}, nil
	}
	if err := tx.markRecords(); err != nil {
		return nil, err
	}
	b, err := tx.bucket(name)
	if err != nil {
		return nil, err
	}
	b.FillPercent = 1.0
	seq := b.Sequence()
	if seq > math.MaxUint64-uint64(len(vals)) {
		return nil, fmt.Errorf("bucket %s sequence %d exhausted", name, seq)
	}
	keys := make([]uint64, len(vals))
	if tx.cap != nil {
		tx.cap.changes = slices.Grow(tx.cap.changes, len(vals))
	}
	var k [8]byte
	for i, v := range vals {
		seq++
		keys[i] = seq
		binary.BigEndian.PutUint64(k[:], seq) // Put copies the key
		if err := b.Put(k[:], v); err != nil {
			return nil, fmt.Errorf("put %s/%016x: %w", name, seq, err)
		}
		if tx.cap != nil {
			var r *Record
			if recs != nil {
				r = &recs[i]
			}
			// A fresh sequence key is never mapped.
			if err := tx.capPut(name, k[:], v, r, mapNone); err != nil {
				return nil, err
			}
		}
	}
	if err := b.SetSequence(seq); err != nil {
		return nil, fmt.Errorf("set sequence of bucket %s: %w", name, err)
	}
	return keys, nil
}

// deleteSeq deletes the records with the given sequence keys from the
// named bucket. A missing key is not an error, so it is safe to run twice.
func (tx *Tx) deleteSeq(name string, keys []uint64) error {
	if len(keys) == 0 {
		return nil
	}
	b, err := tx.bucket(name)
	if err != nil {
		return err
	}
	var k [8]byte
	for _, n := range keys {
		binary.BigEndian.PutUint64(k[:], n)
		if tx.cap != nil {
			if err := tx.capDelete(name, k[:], b.Get(k[:])); err != nil {
				return err
			}
		}
		if err := b.Delete(k[:]); err != nil {
			return fmt.Errorf("delete %s/%016x: %w", name, n, err)
		}
	}
	return nil
}

// getSeq decodes the record under sequence key n of the named bucket. A
// record that does not decode is reported as a [*DecodeError].
func (tx *Tx) getSeq(name string, n uint64) (Record, bool, error) {
	b, err := tx.bucket(name)
	if err != nil {
		return Record{}, false, err
	}
	k := seqKey(n)
	v := b.Get(k)
	if v == nil {
		return Record{}, false, nil
	}
	r, err := decodeRecord(v)
	if err != nil {
		return Record{}, true, &DecodeError{Bucket: name, Key: k, Err: err}
	}
	return r, true, nil
}
