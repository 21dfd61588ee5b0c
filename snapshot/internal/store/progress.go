package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/handoff-go/handoff"
)

// A partition's progress: what a stop knew of the offsets of one input
// partition past the offset it committed. A stop does not commit past a
// Kafka message it saved unfinished (its pending record is for order,
// attempt counts and for not running done work twice; Kafka keeps the
// message), so the offsets after its commit are a mix of messages done
// and messages not done; the progress says which, so that the
// partition's next owner skips the done ones instead of running them
// again. It lives in the meta bucket under "progress/<topic>/<partition>"
// and, with changelog capture on, in the input partition's changelog
// under a key of its own per partition (its file ID is zero: a later
// stop's progress replaces an earlier one whichever file wrote it, and
// compaction keeps the latest).

// metaProgressPrefix is the prefix of the meta keys of progress records.
const metaProgressPrefix = "progress/"

// BucketProgress is the Bucket of a [ChangelogKey] that holds a
// partition's [Progress] rather than a record: its Local is the input
// partition, 4 bytes big-endian, and its FileID is zero. No bucket of
// the file has this name: the file keeps progress in its meta bucket.
const BucketProgress = "progress"

// progressCode is the changelog bucket code of a progress record.
const progressCode = 'o'

// progressVersion is the first byte of an encoded Progress.
const progressVersion = 1

// MaxProgressOffsets bounds the NotDone offsets of one [Progress]; see
// [Tx.PutProgress].
const MaxProgressOffsets = 4096

// Progress is what a stop knew of one input partition's offsets in
// [Base, End): every offset in that range that is not in NotDone was
// done or moved into a durable record (a dead letter, a redelivery, a
// delayed or parked record). Offsets outside the range say nothing.
type Progress struct {
	// Base is the offset the stop committed (the next to read): a
	// partition's next owner uses the progress only while the group's
	// committed offset is at or above it (an operator who reset the
	// group's offsets back wants the messages run again).
	Base int64
	// End is the offset after the last one the stop's instance fetched.
	End int64
	// NotDone are the offsets in [Base, End) fetched and neither done
	// nor moved, ascending: the messages the stop saved, gave back or
	// never handed to a pool.
	NotDone []int64
	// At is when the stop saved: the SavedAt of the pending records it
	// wrote, which tells a record this stop saved (and did not commit
	// past) from an older one with the same offset.
	At time.Time
}

// Done reports whether the offset is known done: in [Base, End) and
// not in NotDone.
func (p *Progress) Done(offset int64) bool {
	if offset < p.Base || offset >= p.End {
		return false
	}
	_, found := slices.BinarySearch(p.NotDone, offset)
	return !found
}

// NotDoneAt reports whether the progress names the offset as not done.
func (p *Progress) NotDoneAt(offset int64) bool {
	_, found := slices.BinarySearch(p.NotDone, offset)
	return found && offset >= p.Base && offset < p.End
}

// check reports what makes p unstorable: a range backwards, NotDone out
// of order, outside the range or longer than MaxProgressOffsets.
func (p *Progress) check() error {
	if p.Base < 0 || p.End < p.Base {
		return fmt.Errorf("%w: progress range [%d, %d)", ErrCorrupt, p.Base, p.End)
	}
	if len(p.NotDone) > MaxProgressOffsets {
		return fmt.Errorf("%w: progress names %d offsets not done, at most %d", ErrCorrupt, len(p.NotDone), MaxProgressOffsets)
	}
	for i, o := range p.NotDone {
		if o < p.Base || o >= p.End || i > 0 && o <= p.NotDone[i-1] {
			return fmt.Errorf("%w: progress offset %d not ascending within [%d, %d)", ErrCorrupt, o, p.Base, p.End)
		}
	}
	return nil
}

// appendProgress encodes p: a version byte, Base (varint), End-Base
// (uvarint), the count of NotDone and each one's distance from the one
// before (from Base for the first; uvarints), then At as a record's
// times are written.
func appendProgress(dst []byte, p *Progress) []byte {
	dst = append(dst, progressVersion)
	dst = binary.AppendVarint(dst, p.Base)
	dst = binary.AppendUvarint(dst, uint64(p.End-p.Base))
	dst = binary.AppendUvarint(dst, uint64(len(p.NotDone)))
	prev := p.Base
	for _, o := range p.NotDone {
		dst = binary.AppendUvarint(dst, uint64(o-prev))
		prev = o
	}
	return appendTime(dst, p.At)
}

// decodeProgress decodes what appendProgress wrote. It never panics: a
// truncated, corrupted or unknown-version b is an error wrapping
// [ErrCorrupt].
func decodeProgress(b []byte) (Progress, error) {
	var p Progress
	if len(b) == 0 || b[0] != progressVersion {
		return p, fmt.Errorf("%w: progress of %d bytes: unknown version", ErrCorrupt, len(b))
	}
	d := decoder{b: b, off: 1}
	p.Base = d.varint("progress base", "")
	span := d.uvarint("progress range", "")
	n := d.uvarint("progress offsets", "count")
	if d.err == nil && (span > 1<<62 || n > MaxProgressOffsets || n > d.left()) {
		d.fail("progress range %d with %d offsets out of bounds", span, n)
	}
	if d.err == nil {
		p.End = p.Base + int64(span)
		if n > 0 {
			p.NotDone = make([]int64, 0, n)
		}
		prev := p.Base
		for range n {
			delta := d.uvarint("progress offset", "")
			if d.err != nil {
				break
			}
			if delta > uint64(p.End-prev) {
				d.fail("progress offset past its range")
				break
			}
			prev += int64(delta)
			p.NotDone = append(p.NotDone, prev)
		}
	}
	p.At = d.time("progress time")
	if d.err == nil && d.off != len(b) {
		d.fail("%d bytes after the progress", len(b)-d.off)
	}
	if d.err != nil {
		return Progress{}, fmt.Errorf("%w: %w", ErrCorrupt, d.err)
	}
	if err := p.check(); err != nil {
		return Progress{}, err
	}
	return p, nil
}

// progressKey returns the meta key of the progress of an input
// partition.
func progressKey(topic string, partition int32) []byte {
	return fmt.Appendf(nil, "%s%s/%d", metaProgressPrefix, topic, partition)
}

// progressLocal is the Local of the changelog key of a partition's
// progress: the partition, 4 bytes big-endian.
func progressLocal(partition int32) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(partition))
}

// PutProgress stores p as the progress of (topic, partition), replacing
// the one before, and with changelog capture on writes it to that
// partition's changelog in the same transaction's send. p must hold:
// 0 <= Base <= End, NotDone ascending within [Base, End) and at most
// [MaxProgressOffsets] of them (a caller with more shrinks End to the
// first one it leaves out: offsets past End are simply not known done).
func (tx *Tx) PutProgress(topic string, partition int32, p Progress) error {
	if err := p.check(); err != nil {
		return tx.errorf(err, "store the progress of %s/%d", topic, partition)
	}
	b, err := tx.bucket(bucketMeta)
	if err != nil {
		return tx.errorf(err, "store the progress of %s/%d", topic, partition)
	}
	v := appendProgress(nil, &p)
	if err := b.Put(progressKey(topic, partition), v); err != nil {
		return tx.errorf(err, "store the progress of %s/%d", topic, partition)
	}
	if c := tx.cap; c != nil {
		var zero [16]byte
		c.changes = append(c.changes, Change{Topic: topic, Partition: partition,
			Key: c.key(&zero, progressCode, progressLocal(partition)), Value: v})
	}
	return nil
}

// Progress returns the progress of (topic, partition) the file holds,
// and false when it holds none. An undecodable one is an error wrapping
// [ErrCorrupt].
func (tx *Tx) Progress(topic string, partition int32) (Progress, bool, error) {
	b, err := tx.bucket(bucketMeta)
	if err != nil {
		return Progress{}, false, tx.errorf(err, "read the progress of %s/%d", topic, partition)
	}
	v := b.Get(progressKey(topic, partition))
	if v == nil {
		return Progress{}, false, nil
	}
	p, err := decodeProgress(v)
	if err != nil {
		return Progress{}, false, tx.errorf(err, "read the progress of %s/%d", topic, partition)
	}
	return p, true, nil
}

// DeleteProgress deletes the file's progress of (topic, partition), if
// any, from the file alone: nothing is captured for the changelog.
func (tx *Tx) DeleteProgress(topic string, partition int32) error {
	b, err := tx.bucket(bucketMeta)
	if err == nil {
		err = b.Delete(progressKey(topic, partition))
	}
	return tx.errorf(err, "delete the progress of %s/%d", topic, partition)
}

// applyProgress stores the last progress record of recs (changelog
// records of topic's partition, in offset order) in the meta bucket,
// uncaptured, and returns recs without the progress records (recs
// itself when it holds none). A progress record that does not decode is
// reported in bad and skipped; one of another partition (the key names
// it) is skipped.
func (tx *Tx) applyProgress(topic string, partition int32, recs []ChangelogRecord, bad *[]*DecodeError) ([]ChangelogRecord, error) {
	first := slices.IndexFunc(recs, func(r ChangelogRecord) bool { return isProgressKey(r.Key) })
	if first < 0 {
		return recs, nil
	}
	rest := slices.Clone(recs[:first])
	var last *ChangelogRecord
	for i := first; i < len(recs); i++ {
		r := &recs[i]
		if !isProgressKey(r.Key) {
			rest = append(rest, *r)
			continue
		}
		ck, err := splitChangelogKey(r.Key)
		if err == nil && r.Value != nil {
			_, err = decodeProgress(r.Value)
		}
		if err != nil {
			*bad = append(*bad, &DecodeError{Bucket: bucketChangelog, Key: slices.Clone(r.Key), Err: err})
			continue
		}
		if int32(binary.BigEndian.Uint32(ck.Local)) == partition {
			last = r
		}
	}
	if last == nil {
		return rest, nil
	}
	b, err := tx.bucket(bucketMeta)
	if err != nil {
		return nil, err
	}
	k := progressKey(topic, partition)
	if last.Value == nil {
		err = b.Delete(k)
	} else {
		err = b.Put(k, slices.Clone(last.Value))
	}
	if err != nil {
		return nil, fmt.Errorf("store %s/%s: %w", bucketMeta, k, err)
	}
	return rest, nil
}

// isProgressKey reports whether k is the changelog key of a progress
// record.
func isProgressKey(k []byte) bool {
	return len(k) > changelogKeyHeader && k[0] == changelogKeyVersion && k[1] == progressCode
}

// progressChanges returns the file's progress records as changelog
// writes, each to its own partition's changelog, for the partitions of
// topics the changelog routes to (a record of a Kafka message of the
// partition would go there).
func (tx *Tx) progressChanges(st *clState) ([]Change, error) {
	c, err := tx.cursor(bucketMeta)
	if err != nil {
		return nil, err
	}
	var changes []Change
	var zero [16]byte
	prefix := []byte(metaProgressPrefix)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		name := string(k[len(prefix):])
		i := strings.LastIndexByte(name, '/')
		if i <= 0 {
			continue
		}
		part, err := strconv.ParseInt(name[i+1:], 10, 32)
		if err != nil {
			continue
		}
		probe := Record{Message: handoff.Message{Origin: handoff.Origin{Topic: name[:i], Partition: int(part)}}}
		topic, p, ok := st.cl.Route(&probe)
		if !ok || topic != name[:i] || p != int32(part) {
			continue // a topic without a changelog
		}
		key := appendChangelogKey(nil, &zero, progressCode, progressLocal(p))
		changes = append(changes, Change{Topic: topic, Partition: p, Key: key, Value: bytes.Clone(v)})
	}
	return changes, nil
}
