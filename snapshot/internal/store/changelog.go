package store

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Changelog keys: [version 1][bucket code][16-byte file ID][local key].
const (
	changelogKeyVersion = 1
	changelogKeyHeader  = 2 + 16
)

// Meta keys of the changelog: the file's own ID, and the checkpoint of
// each input partition ("changelog/<topic>/<partition>"). The file ID
// key is outside the checkpoints' prefix.
const (
	metaFileIDKey        = "changelog-file-id"
	metaCheckpointPrefix = "changelog/"
)

// Prefixes of the two halves of bucketChangelogKeys: local (bucket code
// and local key) -> changelog key, and changelog key -> local.
const (
	mapLocalPrefix     = 'L'
	mapChangelogPrefix = 'C'
)

// Kinds of the values of bucketChangelogUnsent.
const (
	unsentPut       = 'p'
	unsentTombstone = 't'
)

// bucketChangelog is the Bucket of the [*DecodeError] of a changelog
// record that [Tx.ApplyChangelog] skipped.
const bucketChangelog = "changelog"

// bucketCode returns the changelog code of a record bucket; 0 for a
// bucket that has no changelog.
func bucketCode(name string) byte {
	switch name {
	case BucketPending:
		return 'p'
	case BucketDead:
		return 'd'
	case BucketDelayed:
		return 'l'
	case BucketParked:
		return 'k'
	case BucketProgress:
		return progressCode
	}
	return 0
}

// codeBucket is the inverse of bucketCode: "" for an unknown code.
func codeBucket(c byte) string {
	switch c {
	case 'p':
		return BucketPending
	case 'd':
		return BucketDead
	case 'l':
		return BucketDelayed
	case 'k':
		return BucketParked
	case progressCode:
		return BucketProgress
	}
	return ""
}

// ChangelogKey is a parsed changelog key.
type ChangelogKey struct {
	// FileID is the ID of the state file that wrote the record.
	FileID [16]byte
	// Bucket is the record's bucket: [BucketPending], [BucketDead],
	// [BucketDelayed] or [BucketParked]; [BucketProgress] for a
	// partition's progress.
	Bucket string
	// Local is the record's key in Bucket of that file.
	Local []byte
}

// ParseChangelogKey parses a changelog key: a version byte (1), a bucket
// code ('p' pending, 'd' dead, 'l' delayed, 'k' parked, 'o' a
// partition's progress: see [BucketProgress]), the 16-byte ID
// of the file that wrote it and the record's key in that bucket, which
// must have the bucket's shape. Errors wrap [ErrCorrupt]. Local is a
// copy.
func ParseChangelogKey(k []byte) (ChangelogKey, error) {
	ck, err := splitChangelogKey(k)
	ck.Local = slices.Clone(ck.Local)
	return ck, err
}

// splitChangelogKey is ParseChangelogKey with Local aliasing k.
func splitChangelogKey(k []byte) (ChangelogKey, error) {
	if len(k) <= changelogKeyHeader {
		return ChangelogKey{}, fmt.Errorf("%w: changelog key is %d bytes, want more than %d", ErrCorrupt, len(k), changelogKeyHeader)
	}
	if k[0] != changelogKeyVersion {
		return ChangelogKey{}, fmt.Errorf("%w: changelog key version %d, want %d", ErrCorrupt, k[0], changelogKeyVersion)
	}
	name := codeBucket(k[1])
	if name == "" {
		return ChangelogKey{}, fmt.Errorf("%w: changelog key: unknown bucket code %q", ErrCorrupt, k[1])
	}
	ck := ChangelogKey{Bucket: name, Local: k[changelogKeyHeader:]}
	copy(ck.FileID[:], k[2:changelogKeyHeader])
	if err := checkLocalKey(name, ck.Local); err != nil {
		return ChangelogKey{}, fmt.Errorf("changelog key: %w", err)
	}
	return ck, nil
}

// checkLocalKey checks that k has the shape of a key of bucket name.
func checkLocalKey(name string, k []byte) error {
	switch name {
	case BucketDelayed:
		_, err := splitDelayedKey(k)
		return err
	case BucketParked:
		_, _, _, err := splitParkedKey(k)
		return err
	case BucketProgress:
		if len(k) != 4 {
			return fmt.Errorf("%w: %s key is %d bytes, want 4", ErrCorrupt, name, len(k))
		}
		return nil
	}
	if len(k) != 8 {
		return fmt.Errorf("%w: %s key is %d bytes, want 8", ErrCorrupt, name, len(k))
	}
	return nil
}

// appendChangelogKey appends the changelog key of the record under local
// in the bucket of code, in the file with ID id.
func appendChangelogKey(dst []byte, id *[16]byte, code byte, local []byte) []byte {
	dst = append(dst, changelogKeyVersion, code)
	dst = append(dst, id[:]...)
	return append(dst, local...)
}

// Changelog receives the changes of every write transaction; see
// [Store.SetChangelog].
type Changelog struct {
	// Route names the input partition a record belongs to; ok false: the
	// record stays local (a class without topics). It is called inside
	// the write transaction: it must be quick, must not use the Store,
	// and must not keep rec or its bytes, which may be the file's.
	Route func(rec *Record) (topic string, partition int32, ok bool)
	// Send queues changes in order and returns a func that waits for the
	// broker's acknowledgement of all of them (nil: nothing to wait for).
	// Send is called in commit order: the Store holds a lock of its own
	// from before the transaction begins until Send returns, so Send
	// must not block for long nor use the Store. The wait is called
	// outside that lock. changes and their bytes are Send's to keep; they
	// must not be modified.
	Send func(changes []Change) (wait func() error)
}

// Change is one record written or deleted, for the changelog.
type Change struct {
	// Topic and Partition are the input partition, Route's answer.
	Topic     string
	Partition int32
	// Key is the changelog key (see [ParseChangelogKey]).
	Key []byte
	// Value is the stored record as written; nil for a tombstone.
	Value []byte
	// Writer is the ID of the file that wrote the change when Key is
	// another file's (the record was restored here: its identity stays
	// the key of the file that created it); nil when Key is the writer's
	// own. The changelog carries it along (a record header), so that a
	// reader tells its own writes from others' (see [ChangelogRecord]).
	Writer []byte
}

// clState is a Store's changelog capture.
type clState struct {
	cl     Changelog
	fileID [16]byte
}

// capture collects the changes of one write transaction.
type capture struct {
	st *clState
	// local: the changes go to the unsent bucket, not to Send.
	local   bool
	changes []Change
	buf     []byte // the chunk keys are cut from
}

// newCapture returns a capture of st; nil when st is (capture off).
func (st *clState) newCapture(local bool) *capture {
	if st == nil {
		return nil
	}
	return &capture{st: st, local: local}
}

// reset drops the changes of a transaction that is run again.
func (c *capture) reset() {
	if c != nil {
		c.changes, c.buf = c.changes[:0], nil
	}
}

// key returns the changelog key of local in the bucket of code of the
// file id (id nil: a copy of local, a whole changelog key), cut from a
// chunk shared with the other keys.
func (c *capture) key(id *[16]byte, code byte, local []byte) []byte {
	n := changelogKeyHeader + len(local)
	if id == nil {
		n = len(local)
	}
	if cap(c.buf)-len(c.buf) < n {
		// Chunks double from 256 bytes to 64 KiB: a small transaction
		// allocates little, a big one few chunks.
		c.buf = make([]byte, 0, max(n, min(64<<10, max(256, 2*cap(c.buf)))))
	}
	start := len(c.buf)
	if id == nil {
		c.buf = append(c.buf, local...) // local is a whole changelog key
	} else {
		c.buf = appendChangelogKey(c.buf, id, code, local)
	}
	return c.buf[start:len(c.buf):len(c.buf)]
}

// SetChangelog turns the changelog capture on: from now on every write
// transaction ([Store.Update], [Store.Batch]) captures what it puts into
// and deletes from the pending, dead, delayed and parked buckets and
// sends it with cl.Send after its commit (see "Changelog" in the package
// documentation). Before it, nothing is captured; calling it again
// replaces cl. It creates the file's changelog ID (16 random bytes in
// the meta bucket) when the file has none, in a write transaction of its
// own, so that the file is no longer [Tx.Empty] then. It fails on a
// read-only Store and when cl.Route or cl.Send is nil.
func (s *Store) SetChangelog(cl Changelog) error {
	if cl.Route == nil || cl.Send == nil {
		return fmt.Errorf("snapshot: set the changelog of %s: Route and Send must not be nil", s.path)
	}
	var id [16]byte
	err := s.boltUpdate(func(btx *bolt.Tx) error {
		tx := &Tx{tx: btx, s: s}
		got, ok, err := tx.fileID()
		if err != nil || ok {
			id = got
			return err
		}
		if _, err := rand.Read(id[:]); err != nil {
			return err
		}
		b, err := tx.bucket(bucketMeta)
		if err != nil {
			return err
		}
		return b.Put([]byte(metaFileIDKey), slices.Clone(id[:]))
	})
	if err != nil {
		return fmt.Errorf("snapshot: set the changelog of %s: %w", s.path, err)
	}
	s.cl.Store(&clState{cl: cl, fileID: id})
	return nil
}

// ChangelogFileID returns the file's changelog ID, and false when
// [Store.SetChangelog] never ran on it.
func (tx *Tx) ChangelogFileID() ([16]byte, bool, error) {
	id, ok, err := tx.fileID()
	return id, ok, tx.errorf(err, "read the changelog file ID")
}

func (tx *Tx) fileID() (id [16]byte, ok bool, err error) {
	b, err := tx.bucket(bucketMeta)
	if err != nil {
		return id, false, err
	}
	v := b.Get([]byte(metaFileIDKey))
	if v == nil {
		return id, false, nil
	}
	if len(v) != 16 {
		return id, false, fmt.Errorf("%w: %s/%s is %d bytes, want 16", ErrCorrupt, bucketMeta, metaFileIDKey, len(v))
	}
	copy(id[:], v)
	return id, true, nil
}

// lockCapture returns the capture state, locking sendMu when capture is
// on: sendCaptured unlocks it.
func (s *Store) lockCapture() *clState {
	st := s.cl.Load()
	if st != nil {
		s.sendMu.Lock()
	}
	return st
}

// sendCaptured ends a write transaction that lockCapture began: with
// capture on, when it committed (err nil) with changes to send, it sends
// them, unlocks, and waits for them; a failed wait records them as
// unsent and is returned as a *ChangelogError. Otherwise it unlocks and
// returns err.
func (s *Store) sendCaptured(st *clState, cp *capture, err error) error {
	if st == nil {
		return err
	}
	if err != nil || cp == nil || cp.local || len(cp.changes) == 0 {
		s.sendMu.Unlock()
		return err
	}
	changes := cp.changes
	wait := st.cl.Send(changes)
	s.sendMu.Unlock()
	if wait == nil {
		return nil
	}
	if werr := wait(); werr != nil {
		return s.failedSend(changes, werr)
	}
	return nil
}

// failedSend records changes, which the changelog did not acknowledge,
// as unsent, and returns the *ChangelogError of werr.
func (s *Store) failedSend(changes []Change, werr error) error {
	rerr := s.boltUpdate(func(btx *bolt.Tx) error { return (&Tx{tx: btx, s: s}).recordUnsent(changes) })
	if rerr != nil {
		rerr = fmt.Errorf("record the changes as unsent: %w", rerr)
	}
	return &ChangelogError{Path: s.path, Err: errors.Join(werr, rerr)}
}

// How capPut treats a mapping of the local key (a restored record's).
const (
	// mapNone: the key is fresh, never mapped.
	mapNone = iota
	// mapKeep: an update of the record under local: the put goes under
	// the mapped key, the record's identity, which stays mapped.
	mapKeep
	// mapDrop: a new record under a key a restored record left mapped:
	// the mapping goes and the mapped key is tombstoned.
	mapDrop
)

// capPut captures the put of val, the encoding of rec (nil: decode val),
// under local in bucket name; mode says what a mapping of local means.
// An update of a restored record (mapKeep) writes under its original
// changelog key, so it keeps its identity and its place in its key's
// order wherever it is restored next.
func (tx *Tx) capPut(name string, local, val []byte, rec *Record, mode int) error {
	c := tx.cap
	code := bucketCode(name)
	var mapped []byte
	switch mode {
	case mapKeep:
		b, err := tx.bucket(bucketChangelogKeys)
		if err != nil {
			return err
		}
		if v := b.Get(mapKey(mapLocalPrefix, []byte{code}, local)); v != nil {
			k := c.key(nil, 0, v)
			return tx.capChange(k, val, rec, c.st.fileID[:])
		}
	case mapDrop:
		var err error
		if mapped, err = tx.unmap(code, local); err != nil {
			return err
		}
	}
	if rec == nil {
		r, err := decodeRecord(val)
		if err != nil {
			return nil // not a record: stays local
		}
		rec = &r
	}
	topic, part, ok := c.st.cl.Route(rec)
	if !ok {
		return nil
	}
	if mapped != nil {
		c.changes = append(c.changes, Change{Topic: topic, Partition: part, Key: mapped, Writer: c.st.fileID[:]})
	}
	c.changes = append(c.changes, Change{Topic: topic, Partition: part, Key: c.key(&c.st.fileID, code, local), Value: val})
	return nil
}

// capChange captures a put of val (nil: a tombstone) under the changelog
// key k, routed by rec (nil: decode val), written by writer (nil: k is
// this file's own). A record that does not decode has no route: nothing
// is captured.
func (tx *Tx) capChange(k, val []byte, rec *Record, writer []byte) error {
	c := tx.cap
	if rec == nil {
		r, err := decodeRecord(val)
		if err != nil {
			return nil
		}
		rec = &r
	}
	topic, part, ok := c.st.cl.Route(rec)
	if !ok {
		return nil
	}
	c.changes = append(c.changes, Change{Topic: topic, Partition: part, Key: k, Value: val, Writer: writer})
	return nil
}

// capDelete captures the delete of old, the value under local in bucket
// name, before it is deleted: a tombstone of the mapped key of a
// restored record (the mapping removed), else of the file's own key. A
// value that does not decode has no route: it stays local.
func (tx *Tx) capDelete(name string, local, old []byte) error {
	c := tx.cap
	code := bucketCode(name)
	// Route first: rec aliases old, the file's memory, valid until the
	// transaction writes.
	var (
		topic string
		part  int32
		ok    bool
	)
	if old != nil {
		if rec, err := decodeOwned(old, nil); err == nil {
			topic, part, ok = c.st.cl.Route(&rec)
		}
	}
	mapped, err := tx.unmap(code, local)
	if err != nil || !ok {
		return err
	}
	k, writer := mapped, c.st.fileID[:]
	if k == nil {
		k, writer = c.key(&c.st.fileID, code, local), nil
	}
	c.changes = append(c.changes, Change{Topic: topic, Partition: part, Key: k, Writer: writer})
	return nil
}

// mapKey returns the key of bucketChangelogKeys of prefix and parts.
func mapKey(prefix byte, parts ...[]byte) []byte {
	n := 1
	for _, p := range parts {
		n += len(p)
	}
	k := make([]byte, 1, n)
	k[0] = prefix
	for _, p := range parts {
		k = append(k, p...)
	}
	return k
}

// unmap removes the mapping of the local key of code, if any, and
// returns the changelog key it mapped to (a copy).
func (tx *Tx) unmap(code byte, local []byte) ([]byte, error) {
	b, err := tx.bucket(bucketChangelogKeys)
	if err != nil {
		return nil, err
	}
	lk := mapKey(mapLocalPrefix, []byte{code}, local)
	v := b.Get(lk)
	if v == nil {
		return nil, nil
	}
	mapped := bytes.Clone(v)
	if err := b.Delete(lk); err != nil {
		return nil, fmt.Errorf("delete %s/%x: %w", bucketChangelogKeys, lk, err)
	}
	ck := mapKey(mapChangelogPrefix, mapped)
	if err := b.Delete(ck); err != nil {
		return nil, fmt.Errorf("delete %s/%x: %w", bucketChangelogKeys, ck, err)
	}
	return mapped, nil
}

// UpdateLocal is [Store.Update] for a transaction whose changes must not
// wait for the changelog: they are not sent, but recorded in the
// changelog_unsent bucket in the same transaction, for
// [Store.ResendUnsent]. With capture off it is Update.
func (s *Store) UpdateLocal(fn func(tx *Tx) error) error {
	st := s.lockCapture()
	cp := st.newCapture(true)
	err := s.public((*bolt.DB).Update, "update", cp, fn)
	return s.sendCaptured(st, cp, err)
}

// BatchLocal is [Store.UpdateLocal] in a transaction shared with
// concurrent BatchLocal callers, as [Store.Batch] shares one: n callers
// at once pay about one fsync. fn may run more than once, and must act
// only through tx. The restores of a generation's partitions, each in
// its own goroutine, share their writes so.
func (s *Store) BatchLocal(fn func(tx *Tx) error) error {
	return s.localGroup.run(s, fn)
}

// recordUnsent records changes in the unsent bucket: per changelog key,
// a put (its value is read when it is resent) or a tombstone with its
// route. A later change of a key replaces the earlier.
func (tx *Tx) recordUnsent(changes []Change) error {
	if len(changes) == 0 {
		return nil
	}
	b, err := tx.bucket(bucketChangelogUnsent)
	if err != nil {
		return err
	}
	for _, c := range changes {
		v := []byte{unsentPut}
		if c.Value == nil {
			v = []byte{unsentTombstone}
			v = binary.AppendUvarint(v, uint64(len(c.Topic)))
			v = append(v, c.Topic...)
			v = binary.BigEndian.AppendUint32(v, uint32(c.Partition))
		}
		if err := b.Put(c.Key, v); err != nil {
			return fmt.Errorf("put %s/%x: %w", bucketChangelogUnsent, c.Key, err)
		}
	}
	return nil
}

// parseUnsent decodes a value of the unsent bucket.
func parseUnsent(v []byte) (tombstone bool, topic string, partition int32, err error) {
	if len(v) == 1 && v[0] == unsentPut {
		return false, "", 0, nil
	}
	if len(v) < 1 || v[0] != unsentTombstone {
		return false, "", 0, fmt.Errorf("%w: unsent change of %d bytes", ErrCorrupt, len(v))
	}
	n, w := binary.Uvarint(v[1:])
	if w <= 0 || n > uint64(len(v)) || len(v) != 1+w+int(n)+4 {
		return false, "", 0, fmt.Errorf("%w: unsent tombstone of %d bytes", ErrCorrupt, len(v))
	}
	off := 1 + w
	return true, string(v[off : off+int(n)]), int32(binary.BigEndian.Uint32(v[off+int(n):])), nil
}

// ResendUnsent sends every change recorded as unsent (by
// [Store.UpdateLocal], or after a failed wait), waits for the
// acknowledgement, then clears the entries (those not recorded again
// meanwhile) and returns how many changes it sent. A put sends the
// record's current value; a put whose record is gone is skipped (its
// delete was captured too). A tombstone of the file's own key whose
// record exists again sends that record instead. An entry that does not
// parse is cleared without being sent. A put of another file's key (an
// update of a restored record) sends the record's current value, nothing
// when it is gone. It blocks as Update does, and
// while it waits; a failed wait is a [*ChangelogError] and clears
// nothing. It fails when capture is off.
func (s *Store) ResendUnsent() (int, error) {
	st := s.cl.Load()
	if st == nil {
		return 0, fmt.Errorf("snapshot: resend the unsent changes of %s: changelog capture is off", s.path)
	}
	s.sendMu.Lock()
	changes, entries, err := s.readUnsent(st)
	if err != nil {
		s.sendMu.Unlock()
		return 0, fmt.Errorf("snapshot: read the unsent changes of %s: %w", s.path, err)
	}
	var wait func() error
	if len(changes) > 0 {
		wait = st.cl.Send(changes)
	}
	s.sendMu.Unlock()
	if wait != nil {
		if err := wait(); err != nil {
			return 0, &ChangelogError{Path: s.path, Err: err}
		}
	}
	if len(entries) == 0 {
		return 0, nil
	}
	if err := s.clearResent(entries); err != nil {
		return len(changes), fmt.Errorf("snapshot: clear the resent changes of %s: %w", s.path, err)
	}
	return len(changes), nil
}

// unsentEntry is one entry of the unsent bucket, copied out of the read
// transaction so that [Store.clearResent] can tell whether it was
// recorded again meanwhile.
type unsentEntry struct{ k, v []byte }

// readUnsent reads the unsent bucket in one view transaction and returns
// the changes to send (see [Store.ResendUnsent] for which) and every
// entry read, the unparsable ones included. It blocks as a view does.
func (s *Store) readUnsent(st *clState) ([]Change, []unsentEntry, error) {
	var (
		changes []Change
		entries []unsentEntry
	)
	err := s.view(func(tx *Tx) error {
		c, err := tx.cursor(bucketChangelogUnsent)
		if err != nil {
			return err
		}
		keys, err := tx.bucket(bucketChangelogKeys)
		if err != nil {
			return err
		}
		for k, v := c.First(); k != nil; k, v = c.Next() {
			entries = append(entries, unsentEntry{bytes.Clone(k), bytes.Clone(v)})
			ch, ok, err := tx.unsentChange(st, keys, k, v)
			if err != nil {
				return err
			}
			if ok {
				changes = append(changes, ch)
			}
		}
		return nil
	})
	return changes, entries, err
}

// unsentChange returns the change to send for the unsent entry k, v, and
// false when there is none: the entry does not parse, the record of a put
// is gone, or the current record routes nowhere. keys is the bucket of
// the changelog keys of restored records. It fails only when a record's
// bucket is missing.
func (tx *Tx) unsentChange(st *clState, keys *bolt.Bucket, k, v []byte) (Change, bool, error) {
	ck, err := splitChangelogKey(k)
	if err != nil {
		return Change{}, false, nil
	}
	tomb, topic, part, err := parseUnsent(v)
	if err != nil {
		return Change{}, false, nil
	}
	if ck.FileID == st.fileID {
		b, err := tx.bucket(ck.Bucket)
		if err != nil {
			return Change{}, false, err
		}
		if cur := b.Get(ck.Local); cur != nil {
			ch, ok := routeCurrent(st, k, cur, nil)
			return ch, ok, nil
		}
		if tomb {
			return Change{Topic: topic, Partition: part, Key: bytes.Clone(k)}, true, nil
		}
		return Change{}, false, nil
	}
	writer := st.fileID[:]
	if tomb {
		return Change{Topic: topic, Partition: part, Key: bytes.Clone(k), Writer: writer}, true, nil
	}
	// An update of a restored record, under its original key: send its
	// current value.
	ref := mappedRef(keys, true, k, ck.Bucket)
	if ref == nil {
		return Change{}, false, nil
	}
	b, err := tx.bucket(ck.Bucket)
	if err != nil {
		return Change{}, false, err
	}
	if cur := b.Get(ref[1:]); cur != nil {
		ch, ok := routeCurrent(st, k, cur, writer)
		return ch, ok, nil
	}
	return Change{}, false, nil
}

// routeCurrent returns the change that sends the encoded record cur under
// the changelog key k, and false when cur does not decode or its record
// routes nowhere. writer is the Change's Writer (nil for the file's own
// keys).
func routeCurrent(st *clState, k, cur, writer []byte) (Change, bool) {
	r, err := decodeRecord(cur)
	if err != nil {
		return Change{}, false
	}
	topic, part, ok := st.cl.Route(&r)
	if !ok {
		return Change{}, false
	}
	return Change{Topic: topic, Partition: part, Key: bytes.Clone(k), Value: bytes.Clone(cur), Writer: writer}, true
}

// clearResent deletes the entries from the unsent bucket, each only if
// its value is still the one read (an entry recorded again meanwhile
// stays for the next resend). It blocks as an update does.
func (s *Store) clearResent(entries []unsentEntry) error {
	return s.boltUpdate(func(btx *bolt.Tx) error {
		b := btx.Bucket([]byte(bucketChangelogUnsent))
		if b == nil {
			return fmt.Errorf("bucket %s missing", bucketChangelogUnsent)
		}
		for _, e := range entries {
			if bytes.Equal(b.Get(e.k), e.v) {
				if err := b.Delete(e.k); err != nil {
					return fmt.Errorf("delete %s/%x: %w", bucketChangelogUnsent, e.k, err)
				}
			}
		}
		return nil
	})
}

// checkpointKey returns the meta key of the checkpoint of an input
// partition.
func checkpointKey(topic string, partition int32) []byte {
	return fmt.Appendf(nil, "%s%s/%d", metaCheckpointPrefix, topic, partition)
}

// ChangelogCheckpoint returns the offset [Tx.ApplyChangelog] stored as
// the next to read from the changelog of (topic, partition), and false
// when none is stored.
func (tx *Tx) ChangelogCheckpoint(topic string, partition int32) (next int64, ok bool, err error) {
	b, err := tx.bucket(bucketMeta)
	if err != nil {
		return 0, false, tx.errorf(err, "read the changelog checkpoint of %s/%d", topic, partition)
	}
	v := b.Get(checkpointKey(topic, partition))
	if v == nil {
		return 0, false, nil
	}
	if len(v) != 8 {
		return 0, false, tx.errorf(fmt.Errorf("%w: checkpoint is %d bytes, want 8", ErrCorrupt, len(v)), "read the changelog checkpoint of %s/%d", topic, partition)
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

// SetChangelogCheckpoint stores next as the offset to read next from the
// changelog of (topic, partition).
func (tx *Tx) SetChangelogCheckpoint(topic string, partition int32, next int64) error {
	b, err := tx.bucket(bucketMeta)
	if err == nil {
		err = b.Put(checkpointKey(topic, partition), binary.BigEndian.AppendUint64(nil, uint64(next)))
	}
	return tx.errorf(err, "store the changelog checkpoint of %s/%d", topic, partition)
}

// Checkpoints returns every changelog checkpoint: topic -> partition ->
// next offset. A malformed entry is left out.
func (tx *Tx) Checkpoints() (map[string]map[int32]int64, error) {
	c, err := tx.cursor(bucketMeta)
	if err != nil {
		return nil, tx.errorf(err, "read the changelog checkpoints")
	}
	out := map[string]map[int32]int64{}
	prefix := []byte(metaCheckpointPrefix)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		rest := string(k[len(prefix):])
		i := strings.LastIndexByte(rest, '/')
		if i <= 0 || len(v) != 8 {
			continue
		}
		p, err := strconv.ParseInt(rest[i+1:], 10, 32)
		if err != nil {
			continue
		}
		topic := rest[:i]
		if out[topic] == nil {
			out[topic] = map[int32]int64{}
		}
		out[topic][int32(p)] = int64(binary.BigEndian.Uint64(v))
	}
	return out, nil
}

// RecordIdentity returns the identity of the record under local in
// bucket name ([BucketPending], [BucketDead], [BucketDelayed] or
// [BucketParked]): the changelog key of the file that created it, parsed
// (a restored record's original key, which its updates here keep; else
// this file's own ID, the bucket and local). Every instance holding the
// record, and the changelog, know it by that key. ok is false when the
// record is not a restored one and the file has no changelog ID
// ([Store.SetChangelog] never ran on it). It does not check that a
// record exists under local.
func (tx *Tx) RecordIdentity(name string, local []byte) (id ChangelogKey, ok bool, err error) {
	code := bucketCode(name)
	if code == 0 {
		return ChangelogKey{}, false, fmt.Errorf("snapshot: identity of %s/%x: bucket %q has no changelog", name, local, name)
	}
	b, err := tx.bucket(bucketChangelogKeys)
	if err != nil {
		return ChangelogKey{}, false, tx.errorf(err, "read the identity of %s/%x", name, local)
	}
	if v := b.Get(mapKey(mapLocalPrefix, []byte{code}, local)); v != nil {
		id, err := ParseChangelogKey(v)
		return id, err == nil, tx.errorf(err, "read the identity of %s/%x", name, local)
	}
	fid, ok, err := tx.fileID()
	if err != nil || !ok {
		return ChangelogKey{}, false, tx.errorf(err, "read the identity of %s/%x", name, local)
	}
	return ChangelogKey{FileID: fid, Bucket: name, Local: slices.Clone(local)}, true, nil
}
