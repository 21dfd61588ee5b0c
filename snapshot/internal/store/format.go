package store

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// metaFormatKey is the key, in the meta bucket, of the file format version.
const metaFormatKey = "format"

// metaFeaturePrefix starts the meta keys of a format-3 file's features:
// "feature/NAME" -> a description of the records that need it, written by
// the version that wrote the first of them, so that an older reader can
// name what it cannot read.
const metaFeaturePrefix = "feature/"

// File format versions, the value of the meta format key: the newest
// format a record in the file needs, raised by the transaction that
// writes the first record needing it, never by Open (see "Format
// versions" in the package documentation).
const (
	// formatV1 files hold records of format 1 only (and a new file holds
	// none yet).
	formatV1 = 1
	// formatV2 files may hold records of format 2, with a timestamp.
	formatV2 = 2
	// formatFeatures files list, under "feature/NAME" in the meta bucket,
	// the features their records need; a reader must know every one.
	formatFeatures = 3

	fileFormat       = formatFeatures // the newest this build reads
	oldestFileFormat = formatV1
	// recordsFormat is the file format the records this build writes
	// need (recordVersion's).
	recordsFormat = formatV2
)

// feature is something written to a state file that a reader must
// understand: a record kind, a bucket, a field. A writer calls
// [Tx.needFeature] in the transaction that writes the first such record;
// a reader that finds a feature it does not know refuses the file and
// names it, instead of misreading or quarantining the records.
type feature struct {
	// Name is the feature's stable identifier, the meta key's suffix.
	Name string
	// Desc says, for an older reader's error, what needs it: which
	// records, in which bucket, since which handoff version.
	Desc string
}

// knownFeatures are the features this build reads. A build that adds
// one adds it here and calls needFeature where it writes it.
var knownFeatures = map[string]bool{}

// FormatError is returned by [Open] (wrapped in an error that names the
// file) for a file written by a newer version of handoff, with records
// this build cannot read. It wraps [ErrNewerFormat].
type FormatError struct {
	// Path is the state file.
	Path string
	// Format is the file's format mark.
	Format int
	// Features maps each feature of the file this build does not know to
	// the description the newer version wrote for it; empty when the
	// format itself is newer than this build's.
	Features map[string]string
}

func (e *FormatError) Error() string {
	if len(e.Features) == 0 {
		return fmt.Sprintf("%v: file format %d, this build reads formats %d to %d: run a newer version of handoff on it",
			ErrNewerFormat, e.Format, oldestFileFormat, fileFormat)
	}
	var parts []string
	for _, name := range slices.Sorted(mapsKeys(e.Features)) {
		parts = append(parts, fmt.Sprintf("%s (%s)", name, e.Features[name]))
	}
	return fmt.Sprintf("%v: it holds records this build cannot read: %s; run the newer version that wrote them, or move them with it (handoff replay, dead discard) before rolling back",
		ErrNewerFormat, strings.Join(parts, ", "))
}

func (e *FormatError) Unwrap() error { return ErrNewerFormat }

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// checkMark checks the format mark and the features of the file at path
// whose meta bucket is meta against the features known (Open passes
// knownFeatures), and returns the format (formatV1 for a file with no
// mark: it holds no record yet). It returns a *FormatError for a newer
// file.
func checkMark(path string, meta *bolt.Bucket, known map[string]bool) (int, error) {
	v := meta.Get([]byte(metaFormatKey))
	if v == nil {
		return formatV1, nil
	}
	if len(v) != 1 || v[0] < oldestFileFormat {
		return 0, fmt.Errorf("unsupported file format %x in bucket %s key %s (this build reads %d to %d)", v, bucketMeta, metaFormatKey, oldestFileFormat, fileFormat)
	}
	format := int(v[0])
	if format > fileFormat {
		return format, &FormatError{Path: path, Format: format}
	}
	unknown := map[string]string{}
	c := meta.Cursor()
	prefix := []byte(metaFeaturePrefix)
	for k, desc := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, desc = c.Next() {
		if name := string(k[len(prefix):]); !known[name] {
			unknown[name] = string(desc)
		}
	}
	if len(unknown) > 0 {
		return format, &FormatError{Path: path, Format: format, Features: unknown}
	}
	return format, nil
}

// formatMark is what a Store knows of its file's format mark, so that a
// write transaction reads the meta bucket only while the mark may still
// need raising.
type formatMark struct {
	format atomic.Int32
}

// needFormat raises the file's format mark to at least f in this
// transaction; the store learns it once the transaction commits. Writers
// of records call it (through markRecords) before the first Put.
func (tx *Tx) needFormat(f int) error {
	if int(tx.s.mark.format.Load()) >= f {
		return nil
	}
	b, err := tx.bucket(bucketMeta)
	if err != nil {
		return err
	}
	if v := b.Get([]byte(metaFormatKey)); len(v) == 1 && int(v[0]) >= f {
		tx.s.raiseMark(int(v[0]))
		return nil
	}
	if err := b.Put([]byte(metaFormatKey), []byte{byte(f)}); err != nil {
		return fmt.Errorf("mark %s/%s format %d: %w", bucketMeta, metaFormatKey, f, err)
	}
	tx.tx.OnCommit(func() { tx.s.raiseMark(f) })
	return nil
}

// markRecords marks the file for the records this build writes, before
// it writes one.
func (tx *Tx) markRecords() error { return tx.needFormat(recordsFormat) }

// needFeature records in this transaction that the file holds records
// needing f (and marks it formatFeatures), so that a build that does not
// know f refuses the file naming f.Desc instead of misreading it. A
// writer calls it in the transaction that writes such a record.
func (tx *Tx) needFeature(f feature) error {
	if !knownFeatures[f.Name] {
		return fmt.Errorf("snapshot: feature %q is not in knownFeatures: this build could not read its own file", f.Name)
	}
	b, err := tx.bucket(bucketMeta)
	if err != nil {
		return err
	}
	k := []byte(metaFeaturePrefix + f.Name)
	if b.Get(k) == nil {
		if err := b.Put(k, []byte(f.Desc)); err != nil {
			return fmt.Errorf("mark %s/%s: %w", bucketMeta, k, err)
		}
	}
	return tx.needFormat(formatFeatures)
}

// Format returns the file's format mark (1 for a file with no mark: it
// holds no record yet) and the features its records need, each with the
// description the version that wrote the first of them gave (none below
// format 3). For the operator CLI's inspect.
func (tx *Tx) Format() (format int, features map[string]string, err error) {
	b, err := tx.bucket(bucketMeta)
	if err != nil {
		return 0, nil, tx.errorf(err, "read the format mark")
	}
	format = formatV1
	if v := b.Get([]byte(metaFormatKey)); len(v) == 1 {
		format = int(v[0])
	}
	features = map[string]string{}
	c := b.Cursor()
	prefix := []byte(metaFeaturePrefix)
	for k, desc := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, desc = c.Next() {
		features[string(k[len(prefix):])] = string(desc)
	}
	return format, features, nil
}

// raiseMark records that the file's format mark is at least f.
func (s *Store) raiseMark(f int) {
	for {
		cur := s.mark.format.Load()
		if int(cur) >= f || s.mark.format.CompareAndSwap(cur, int32(f)) {
			return
		}
	}
}

// errReservedMeta is returned by PutMeta for the keys this package owns.
var errReservedMeta = errors.New("reserved key")
