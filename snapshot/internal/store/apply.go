package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ChangelogRecord is one record read from a changelog partition.
type ChangelogRecord struct {
	// Offset is the record's offset in its changelog partition.
	Offset int64
	// Key is the changelog key (see [ParseChangelogKey]).
	Key []byte
	// Value is the stored record; nil for a tombstone.
	Value []byte
	// Writer is the ID of the file that wrote the record when the
	// changelog says it ([Change].Writer, a record header: an update or
	// delete of a restored record, under the key of the file that
	// created it); nil when it does not: the key's file wrote it, or
	// another file with a version that did not say so.
	Writer []byte
	// Moved says the record is the put of a move from another partition
	// of the changelog (its input topic gained partitions): when the
	// file does not hold the record (it dropped it rebuilding this
	// partition before the move reached it) the put is inserted, even
	// when this file created the record or moved it itself; a put that
	// is not a move only replaces a copy of an own key held.
	Moved bool
}

// Applied says what [Tx.ApplyChangelog] changed.
type Applied struct {
	// Pending, Dead, Delayed and Parked are the local keys of the
	// records inserted or replaced, in the order they were applied.
	Pending []uint64
	Dead    []uint64
	Delayed []DelayedKey
	Parked  []ParkedKey
	// Deleted counts the local records removed: by tombstones, or
	// displaced by a restored delayed record of their message ID.
	Deleted int
	// Bad are the records skipped, not written: a key that does not
	// parse, a value that does not decode as a record (or a delayed
	// record whose ID is not its key's). Their Bucket is "changelog" and
	// their Key the changelog key.
	Bad []*DecodeError
}

// finalRecord is the last record of one changelog key in a call.
type finalRecord struct {
	rec *ChangelogRecord
	ck  ChangelogKey // Local aliases rec.Key
	// Of a put: when its record was saved, and the input message it
	// holds (origin partition -1: none, a submitted or scheduled one).
	savedAt    time.Time
	originPart int
	originOff  int64
	origin     string // the origin topic
}

// writtenBy reports whether the changelog says file id wrote f.
func (f *finalRecord) writtenBy(id *[16]byte) bool {
	return len(f.rec.Writer) == 16 && [16]byte(f.rec.Writer) == *id
}

// insert is a record ApplyChangelog inserts under a fresh local key.
type insert struct {
	f     *finalRecord
	local []byte // its new local key
	val   []byte // a copy of the value
	// pending, dead and parked: the prefix of its (class, key) (parked
	// only), its original sequence and the offset of the first insert of
	// its file in its (class, key).
	prefix   []byte
	seq      uint64
	fileRank int64
}

// ApplyChangelog applies records of one input partition's changelog,
// read in offset order, and stores next as the partition's checkpoint
// ([Tx.ChangelogCheckpoint]), in this write transaction. The changes it
// makes are not captured: they are the changelog's already. A
// transaction should apply one batch of records and commit, so that the
// checkpoint moves with them.
//
// Per changelog key only its last record in recs counts, so the result
// does not depend on whether the earlier ones were compacted away. A
// changelog key is a record's identity: the key of the file that created
// it, which its updates keep wherever it was restored. Then:
//
//   - A record the changelog says this file wrote (its Writer) changes
//     nothing: the file has it, or deleted it since. But the put of a
//     move (Moved) of a record the file does not hold, under any key, is
//     inserted as below: the file dropped its copy rebuilding the
//     partition before the move, its own or another file's, reached it.
//   - A key of this file's own ID: a tombstone deletes the local record
//     under its local key, if there is one (another owner finished it);
//     a put another file says it wrote (it restored the record and
//     updated it) replaces the local record's value, keeping its local
//     key; any other put changes nothing: the local record is newer or
//     the same, and when there is none this file deleted it and its
//     tombstone is on its way, so the record is not brought back.
//   - A key of another file that a record of this file was restored from
//     (mapped): a put replaces that record's value, a tombstone deletes
//     it and its mapping.
//   - A put of another file's key that is not mapped inserts a record
//     under a fresh local key and maps it both ways: pending and dead
//     letters take their bucket's next sequence numbers, a parked record
//     the parked bucket's next sequence number under its (class, key),
//     behind the local ones; in both, in their order of origin (see
//     sortSaveOrder): records of input messages of one partition by
//     their offsets there, the others by original sequence among the
//     records of one file, files in the order of the offset of their
//     first record in recs, never by which file last updated them. A
//     delayed record keeps its key (due time and ID). A tombstone of a
//     key not mapped changes nothing.
//   - One delayed record waits per message ID: of the records of an ID
//     waiting here and put, the one saved first (its SavedAt, then its
//     changelog key) stays; the others are deleted, and tombstoned in
//     the changelog with the transaction's capture (with
//     [Store.BatchLocal], sent by [Store.ResendUnsent]), so every
//     instance keeps the same one. A local record that is not waiting
//     ([Store.SetDelayedHandedOver]: its message is running or done) is
//     replaced by a put saved after it (the ID was scheduled again) and
//     outlives one saved before it (scheduled before the one that ran).
//
// The last progress record of the partition (see [Progress]) replaces
// the file's progress of (topic, partition).
//
// A record whose key does not parse or whose value does not decode is
// skipped and reported in Bad; nothing of it is written. It returns an
// error only when the file cannot be written; then the transaction should
// be rolled back.
func (tx *Tx) ApplyChangelog(topic string, partition int32, recs []ChangelogRecord, next int64) (Applied, error) {
	var bad []*DecodeError
	recs, err := tx.applyProgress(topic, partition, recs, &bad) // progress.go
	if err != nil {
		return Applied{}, tx.errorf(err, "apply the progress records of %s/%d", topic, partition)
	}
	out, err := tx.applyChangelog(recs)
	if err != nil {
		return Applied{}, tx.errorf(err, "apply %d changelog records of %s/%d", len(recs), topic, partition)
	}
	out.Bad = append(bad, out.Bad...)
	if err := tx.SetChangelogCheckpoint(topic, partition, next); err != nil {
		return Applied{}, err
	}
	return out, nil
}

func (tx *Tx) applyChangelog(recs []ChangelogRecord) (Applied, error) {
	var out Applied
	own, hasOwn, err := tx.fileID()
	if err != nil {
		return out, err
	}
	finals := out.lastRecords(recs)
	if len(finals) == 0 {
		return out, nil
	}
	if err := tx.markRecords(); err != nil {
		return out, err
	}
	keys, err := tx.bucket(bucketChangelogKeys)
	if err != nil {
		return out, err
	}
	// A file with no restored record (the first restore) has nothing to
	// look up; this call's mappings are put at its end.
	mapped := true
	if k, _ := keys.Cursor().First(); k == nil {
		mapped = false
	}
	ins := make([]insert, 0, len(finals))
	for i := range finals {
		f := &finals[i]
		name := f.ck.Bucket
		b, err := tx.bucket(name)
		if err != nil {
			return out, err
		}
		// The put of a move whose record the file does not hold is
		// inserted, whoever moved it: this file too (see lacks).
		lacking := f.rec.Moved && f.rec.Value != nil && hasOwn && tx.lacks(b, keys, mapped, f, &own)
		if hasOwn && !tx.rebuilding && f.writtenBy(&own) && !lacking {
			continue
		}
		if hasOwn && f.ck.FileID == own && !tx.rebuilding && !lacking {
			if err := tx.applyOwn(b, f, &out); err != nil {
				return out, err
			}
			continue
		}
		if ref := mappedRef(keys, mapped, f.rec.Key, name); ref != nil {
			done, err := tx.applyMapped(b, f, ref, &out)
			if err != nil {
				return out, err
			}
			if done {
				continue
			}
		}
		if f.rec.Value != nil {
			ins = append(ins, insert{f: f})
		}
	}
	copyValues(ins)
	if err := tx.insertRestored(ins, &out); err != nil {
		return out, err
	}
	return out, nil
}

// applyOwn applies f, the last record of a key of this file's own, to
// its record in bucket b: a tombstone deletes the record, a value written
// by another file (an update of a moved record) replaces it, and nothing
// happens when the record is gone or the value is this file's own.
// Changes are counted in out.
func (tx *Tx) applyOwn(b *bolt.Bucket, f *finalRecord, out *Applied) error {
	name, local := f.ck.Bucket, f.ck.Local
	switch {
	case b.Get(local) == nil:
	case f.rec.Value == nil:
		if err := tx.deleteLocal(name, local); err != nil {
			return err
		}
		out.Deleted++
	case len(f.rec.Writer) == 16:
		if err := b.Put(local, bytes.Clone(f.rec.Value)); err != nil {
			return fmt.Errorf("put %s/%x: %w", name, local, err)
		}
		out.add(name, local)
	}
	return nil
}

// lacks reports whether the file holds no record under f's changelog
// key in bucket b: neither its own record of that local key (a key of
// this file, own) nor the record the key is mapped to (keys: the
// mappings; mapped false when there are none). Such a file dropped its
// copy rebuilding the partition f was moved into before the move
// reached it, and the move's put brings it back. The mover may be this
// file itself: it moved the record out of a partition it owned after it
// had rebuilt the new one (an eager rebalance hands both over afresh).
func (tx *Tx) lacks(b *bolt.Bucket, keys *bolt.Bucket, mapped bool, f *finalRecord, own *[16]byte) bool {
	if f.ck.FileID == *own {
		return b.Get(f.ck.Local) == nil
	}
	ref := mappedRef(keys, mapped, f.rec.Key, f.ck.Bucket)
	return ref == nil || b.Get(ref[1:]) == nil
}

// mappedRef returns the mapping of changelog key k (bucket code, then
// local key) when it names a record of bucket name, nil otherwise or
// when the file has no mappings (mapped false).
func mappedRef(keys *bolt.Bucket, mapped bool, k []byte, name string) []byte {
	if !mapped {
		return nil
	}
	ref := keys.Get(mapKey(mapChangelogPrefix, k))
	if len(ref) <= 1 || codeBucket(ref[0]) != name {
		return nil
	}
	return ref
}

// applyMapped applies f, the last record of a key restored before, to the
// local record its mapping ref (bucket code, then local key) names in
// bucket b: a tombstone deletes it, a value replaces it, and it reports
// true. When that record is gone (deleted with capture off) it drops the
// stale mapping and reports false: f is then inserted as a new record.
// Changes are counted in out.
func (tx *Tx) applyMapped(b *bolt.Bucket, f *finalRecord, ref []byte, out *Applied) (bool, error) {
	name := f.ck.Bucket
	mlocal := bytes.Clone(ref[1:])
	if b.Get(mlocal) == nil {
		_, err := tx.unmap(ref[0], mlocal)
		return false, err
	}
	if f.rec.Value == nil {
		if err := tx.deleteLocal(name, mlocal); err != nil {
			return false, err
		}
		out.Deleted++
		return true, nil
	}
	if err := b.Put(mlocal, bytes.Clone(f.rec.Value)); err != nil {
		return false, fmt.Errorf("put %s/%x: %w", name, mlocal, err)
	}
	out.add(name, mlocal)
	return true, nil
}

// lastRecords returns the last record of each changelog key of recs that
// parses, in offset order, and reports the others in out.Bad.
func (out *Applied) lastRecords(recs []ChangelogRecord) []finalRecord {
	last := make(map[string]int, len(recs))
	for i := range recs {
		last[string(recs[i].Key)] = i
	}
	finals := make([]finalRecord, 0, len(last))
	in := newInterner() // spares the strings of few values while checking
	for i := range recs {
		r := &recs[i]
		if last[string(r.Key)] != i {
			continue
		}
		ck, err := splitChangelogKey(r.Key)
		f := finalRecord{rec: r, ck: ck, originPart: -1}
		if err == nil && r.Value != nil {
			err = checkRestored(&f, in)
		}
		if err != nil {
			out.Bad = append(out.Bad, &DecodeError{Bucket: bucketChangelog, Key: bytes.Clone(r.Key), Err: err})
			continue
		}
		finals = append(finals, f)
	}
	slices.SortStableFunc(finals, func(a, b finalRecord) int { return cmp.Compare(a.rec.Offset, b.rec.Offset) })
	return finals
}

// checkRestored checks that f's value decodes as a record that may be
// stored under its key (a delayed record's ID must be its key's), and
// sets f's savedAt and origin.
func checkRestored(f *finalRecord, in interner) error {
	r, err := decodeOwned(f.rec.Value, in) // the value is only read
	if err != nil {
		return err
	}
	if f.ck.Bucket == BucketDelayed {
		id, _ := splitDelayedKey(f.ck.Local)
		if r.Message.ID != string(id) {
			return fmt.Errorf("%w: delayed record ID %q is not its key's", ErrCorrupt, r.Message.ID)
		}
	}
	f.savedAt = r.SavedAt
	if o := &r.Message.Origin; o.Topic != "" && o.Partition >= 0 {
		f.origin, f.originPart, f.originOff = o.Topic, o.Partition, o.Offset
	}
	return nil
}

// copyValues gives every insert a copy of its value, cut from a few
// large blocks: bbolt keeps the values until the commit.
func copyValues(ins []insert) {
	var block []byte
	for i := range ins {
		v := ins[i].f.rec.Value
		if cap(block)-len(block) < len(v) {
			block = make([]byte, 0, max(len(v), chunkSize))
		}
		start := len(block)
		block = append(block, v...)
		ins[i].val = block[start:len(block):len(block)]
	}
}

// add records local as inserted or replaced in bucket name.
func (out *Applied) add(name string, local []byte) {
	switch name {
	case BucketPending:
		out.Pending = append(out.Pending, binary.BigEndian.Uint64(local))
	case BucketDead:
		out.Dead = append(out.Dead, binary.BigEndian.Uint64(local))
	case BucketDelayed:
		out.Delayed = append(out.Delayed, DelayedKey(bytes.Clone(local)))
	case BucketParked:
		out.Parked = append(out.Parked, ParkedKey(bytes.Clone(local)))
	}
}

// deleteLocal deletes the record under local in bucket name with its
// delayed ID index entry and its mapping, uncaptured.
func (tx *Tx) deleteLocal(name string, local []byte) error {
	b, err := tx.bucket(name)
	if err != nil {
		return err
	}
	if err := b.Delete(local); err != nil {
		return fmt.Errorf("delete %s/%x: %w", name, local, err)
	}
	if name == BucketDelayed {
		if err := tx.unindexDelayed(local); err != nil {
			return err
		}
	}
	_, err = tx.unmap(bucketCode(name), local)
	return err
}

// insertRestored puts ins under fresh local keys, bucket by bucket in
// key order, and maps them.
func (tx *Tx) insertRestored(ins []insert, out *Applied) error {
	by := map[string][]insert{}
	for _, in := range ins {
		by[in.f.ck.Bucket] = append(by[in.f.ck.Bucket], in)
	}
	var done []insert
	for _, name := range []string{BucketPending, BucketDead} {
		if len(by[name]) == 0 {
			continue
		}
		got, err := tx.insertSeq(name, by[name])
		if err != nil {
			return err
		}
		done = append(done, got...)
	}
	if len(by[BucketDelayed]) > 0 {
		got, err := tx.insertDelayed(by[BucketDelayed], out)
		if err != nil {
			return err
		}
		done = append(done, got...)
	}
	if len(by[BucketParked]) > 0 {
		got, err := tx.insertParked(by[BucketParked])
		if err != nil {
			return err
		}
		done = append(done, got...)
	}
	for _, in := range done {
		out.add(in.f.ck.Bucket, in.local)
	}
	return tx.mapRestored(done)
}

// sortSaveOrder sorts ins, which are in offset order and whose prefix
// and seq are set, into their order of origin, by prefix first: by their
// original sequence numbers among the records of one file, files in the
// order of the offset of their first record; then the records of input
// messages of one partition are put in the order of their offsets there,
// in the places that order gave them. A key's input messages so come
// back in the order they were read whichever files created or last
// updated their records, and a submitted message keeps its place among
// the records of the file that saved it.
func sortSaveOrder(ins []insert) {
	rank := map[string]int64{}
	var rk []byte
	for i := range ins {
		rk = append(append(rk[:0], ins[i].prefix...), ins[i].f.ck.FileID[:]...)
		r, ok := rank[string(rk)] // the lookup does not allocate
		if !ok {
			r = ins[i].f.rec.Offset
			rank[string(rk)] = r
		}
		ins[i].fileRank = r
	}
	slices.SortStableFunc(ins, func(a, b insert) int {
		if c := bytes.Compare(a.prefix, b.prefix); c != 0 {
			return c
		}
		if c := cmp.Compare(a.fileRank, b.fileRank); c != 0 {
			return c
		}
		if c := bytes.Compare(a.f.ck.FileID[:], b.f.ck.FileID[:]); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	// The places of the records of each (prefix, input partition).
	type group struct {
		at   []int
		recs []insert
	}
	var groups map[string]*group
	for i := range ins {
		f := ins[i].f
		if f.originPart < 0 {
			continue
		}
		if groups == nil {
			groups = map[string]*group{}
		}
		rk = fmt.Appendf(append(rk[:0], ins[i].prefix...), "\x00%s\x00%d", f.origin, f.originPart)
		g := groups[string(rk)]
		if g == nil {
			g = &group{}
			groups[string(rk)] = g
		}
		g.at = append(g.at, i)
		g.recs = append(g.recs, ins[i])
	}
	for _, g := range groups {
		slices.SortStableFunc(g.recs, func(a, b insert) int { return cmp.Compare(a.f.originOff, b.f.originOff) })
		for n, i := range g.at {
			ins[i] = g.recs[n]
		}
	}
}

// insertSeq puts ins under the next sequence numbers of bucket name, in
// their save order (see sortSaveOrder).
func (tx *Tx) insertSeq(name string, ins []insert) ([]insert, error) {
	b, err := tx.bucket(name)
	if err != nil {
		return nil, err
	}
	for i := range ins {
		ins[i].seq = binary.BigEndian.Uint64(ins[i].f.ck.Local)
	}
	sortSaveOrder(ins)
	b.FillPercent = 1.0
	seq := b.Sequence()
	if seq > math.MaxUint64-uint64(len(ins)) {
		return nil, fmt.Errorf("bucket %s sequence %d exhausted", name, seq)
	}
	keys := make([]byte, 0, 8*len(ins))
	for i := range ins {
		seq++
		keys = binary.BigEndian.AppendUint64(keys, seq)
		ins[i].local = keys[len(keys)-8 : len(keys) : len(keys)]
		if err := b.Put(ins[i].local, ins[i].val); err != nil {
			return nil, fmt.Errorf("put %s/%016x: %w", name, seq, err)
		}
	}
	return ins, b.SetSequence(seq)
}

// insertDelayed puts ins under their own keys, one record per ID: of an
// ID's records in ins and the local one, the one saved first (see
// ApplyChangelog) stays and the others are deleted and tombstoned. It
// indexes the records it puts.
func (tx *Tx) insertDelayed(ins []insert, out *Applied) ([]insert, error) {
	b, err := tx.bucket(BucketDelayed)
	if err != nil {
		return nil, err
	}
	ids, err := tx.bucket(bucketDelayedIDs)
	if err != nil {
		return nil, err
	}
	var handed func(DelayedKey) bool
	if h := tx.s.handedOver.Load(); h != nil {
		handed = *h
	}
	// By ID, the first saved of an ID first.
	slices.SortStableFunc(ins, func(a, b insert) int {
		if c := bytes.Compare(delayedID(&a), delayedID(&b)); c != 0 {
			return c
		}
		return savedFirst(a.f.savedAt, a.f.rec.Key, b.f.savedAt, b.f.rec.Key)
	})
	var kept, lost []insert
	for start := 0; start < len(ins); {
		end := start + 1
		for end < len(ins) && bytes.Equal(delayedID(&ins[end]), delayedID(&ins[start])) {
			end++
		}
		k, l, err := tx.resolveDelayed(ids, handed, ins[start:end], out)
		if err != nil {
			return nil, err
		}
		kept, lost = append(kept, k...), append(lost, l...)
		start = end
	}
	for i := range lost {
		if err := tx.tombstoneForeign(lost[i].f); err != nil {
			return nil, err
		}
	}
	if err := putDelayed(b, ids, kept); err != nil {
		return nil, err
	}
	return kept, nil
}

// delayedID returns the ID part of a delayed record's local key.
func delayedID(in *insert) []byte { return in.f.ck.Local[8:] }

// resolveDelayed decides between group, the records of one ID in an
// insertDelayed call (the first saved first), and the local record of
// that ID found through the ID index ids: it returns the record to put
// (none or one) and those that lose, deleting the local record (counted
// in out.Deleted) when one of group displaces it. handed reports a local
// record whose message was handed over (nil: none was); what was saved
// before such a record loses to it, and a later one is put beside it.
func (tx *Tx) resolveDelayed(ids *bolt.Bucket, handed func(DelayedKey) bool, group []insert, out *Applied) (kept, lost []insert, err error) {
	old := ids.Get(delayedID(&group[0]))
	if old == nil {
		return group[:1], group[1:], nil
	}
	oldKey := bytes.Clone(old)
	local, err := tx.localDelayed(oldKey)
	if err != nil {
		return nil, nil, err
	}
	if local == nil { // an index entry without its record: dropped
		if err := tx.deleteLocal(BucketDelayed, oldKey); err != nil {
			return nil, nil, err
		}
		return group[:1], group[1:], nil
	}
	before := func(in *insert) bool {
		return savedFirst(in.f.savedAt, in.f.rec.Key, local.savedAt, local.identity) < 0
	}
	if handed != nil && handed(DelayedKey(oldKey)) {
		// Its message is running or done: the ID may be scheduled
		// again; what was saved before it ran lost to it.
		n := 0
		for n < len(group) && before(&group[n]) {
			n++
		}
		lost = group[:n]
		group = group[n:]
		if len(group) == 0 {
			return nil, lost, nil
		}
	} else if !before(&group[0]) {
		return nil, group, nil
	}
	if err := tx.displaceDelayed(oldKey, local.val); err != nil {
		return nil, nil, err
	}
	out.Deleted++
	return group[:1], append(lost[:len(lost):len(lost)], group[1:]...), nil
}

// putDelayed puts the kept records under their own keys in the delayed
// bucket b and indexes each by its ID in ids. It sorts kept by key and
// sets each one's local key.
func putDelayed(b, ids *bolt.Bucket, kept []insert) error {
	for i := range kept {
		kept[i].local = kept[i].f.ck.Local
	}
	for _, in := range kept { // in ID order
		if err := ids.Put(bytes.Clone(delayedID(&in)), bytes.Clone(in.local)); err != nil {
			return fmt.Errorf("put %s/%x: %w", bucketDelayedIDs, delayedID(&in), err)
		}
	}
	slices.SortFunc(kept, func(a, b insert) int { return bytes.Compare(a.local, b.local) })
	for _, in := range kept {
		if err := b.Put(bytes.Clone(in.local), in.val); err != nil {
			return fmt.Errorf("put %s/%x: %w", BucketDelayed, in.local, err)
		}
	}
	return nil
}

// savedFirst orders two records of one ID by when they were saved, then
// by their changelog keys: the same order on every instance.
func savedFirst(at time.Time, key []byte, bt time.Time, bkey []byte) int {
	if c := at.Compare(bt); c != 0 {
		return c
	}
	return bytes.Compare(key, bkey)
}

// localRecord is a local delayed record that a restored one of its ID
// meets.
type localRecord struct {
	val      []byte // the stored value (the file's memory)
	savedAt  time.Time
	identity []byte // its changelog key
}

// localDelayed returns the delayed record under key; nil when there is
// none. A record that does not decode counts as saved at the zero time:
// it stays, as it would without the changelog.
func (tx *Tx) localDelayed(key []byte) (*localRecord, error) {
	b, err := tx.bucket(BucketDelayed)
	if err != nil {
		return nil, err
	}
	v := b.Get(key)
	if v == nil {
		return nil, nil
	}
	l := &localRecord{val: v}
	if r, err := decodeOwned(v, nil); err == nil {
		l.savedAt = r.SavedAt
	}
	ck, ok, err := tx.RecordIdentity(BucketDelayed, key)
	if err != nil {
		return nil, err
	}
	if ok {
		l.identity = appendChangelogKey(nil, &ck.FileID, bucketCode(BucketDelayed), ck.Local)
	}
	return l, nil
}

// displaceDelayed deletes the local delayed record under key, whose
// stored value is val, tombstoning its changelog key with the
// transaction's capture.
func (tx *Tx) displaceDelayed(key, val []byte) error {
	if tx.cap != nil {
		if err := tx.capDelete(BucketDelayed, key, val); err != nil {
			return err
		}
	}
	return tx.deleteLocal(BucketDelayed, key)
}

// tombstoneForeign captures a tombstone of f's changelog key, another
// file's, written by this file: the record f put is displaced.
func (tx *Tx) tombstoneForeign(f *finalRecord) error {
	c := tx.cap
	if c == nil {
		return nil
	}
	r, err := decodeRecord(f.rec.Value)
	if err != nil {
		return nil
	}
	return tx.capChange(c.key(nil, 0, f.rec.Key), nil, &r, c.st.fileID[:])
}

// insertParked parks ins behind the local records of their (class, key),
// in park order (see ApplyChangelog), under the parked bucket's next
// sequence numbers.
func (tx *Tx) insertParked(ins []insert) ([]insert, error) {
	b, err := tx.bucket(BucketParked)
	if err != nil {
		return nil, err
	}
	for i := range ins {
		l := ins[i].f.ck.Local
		ins[i].prefix = l[:len(l)-8]
		ins[i].seq = binary.BigEndian.Uint64(l[len(l)-8:])
	}
	sortSaveOrder(ins)
	seq := b.Sequence()
	if seq > math.MaxUint64-uint64(len(ins)) {
		return nil, fmt.Errorf("bucket %s sequence %d exhausted", BucketParked, seq)
	}
	for i := range ins {
		seq++
		ins[i].local = binary.BigEndian.AppendUint64(bytes.Clone(ins[i].prefix), seq)
		if err := b.Put(ins[i].local, ins[i].val); err != nil {
			return nil, fmt.Errorf("put %s %s: %w", BucketParked, parkedKeyText(ins[i].local), err)
		}
	}
	return ins, b.SetSequence(seq)
}

// mapRestored maps the local keys of ins to their changelog keys and
// back, putting in key order.
func (tx *Tx) mapRestored(ins []insert) error {
	if len(ins) == 0 {
		return nil
	}
	b, err := tx.bucket(bucketChangelogKeys)
	if err != nil {
		return err
	}
	type kv struct{ k, v []byte }
	pairs := make([]kv, 0, 2*len(ins))
	size := 0
	for _, in := range ins {
		size += 2 + len(in.local) + 1 + len(in.f.rec.Key)
	}
	block := make([]byte, 0, size) // bbolt keeps keys and values until the commit
	cut := func(parts ...[]byte) []byte {
		start := len(block)
		for _, p := range parts {
			block = append(block, p...)
		}
		return block[start:len(block):len(block)]
	}
	for _, in := range ins {
		lk := cut([]byte{mapLocalPrefix, bucketCode(in.f.ck.Bucket)}, in.local)
		ck := cut([]byte{mapChangelogPrefix}, in.f.rec.Key)
		pairs = append(pairs, kv{lk, ck[1:]}, kv{ck, lk[1:]})
	}
	slices.SortFunc(pairs, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	for _, p := range pairs {
		if err := b.Put(p.k, p.v); err != nil {
			return fmt.Errorf("put %s/%x: %w", bucketChangelogKeys, p.k, err)
		}
	}
	return nil
}

// SetDelayedHandedOver tells [Tx.ApplyChangelog] which local delayed
// records are not waiting: handed reports whether key's message was
// handed to its class (running, or done and its record not yet deleted),
// so that a restored record of its ID saved after it, a schedule made
// again, replaces it. handed is called inside write transactions: it
// must be quick and must not use the Store. nil (the default) means
// every local delayed record is waiting.
func (s *Store) SetDelayedHandedOver(handed func(key DelayedKey) bool) {
	if handed == nil {
		s.handedOver.Store(nil)
		return
	}
	s.handedOver.Store(&handed)
}
