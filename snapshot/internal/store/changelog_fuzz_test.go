package store

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// FuzzParseChangelogKey checks the changelog key parser: it never
// panics; a failure wraps ErrCorrupt; what it returns shares no memory
// with its input and encodes back to the same bytes.
func FuzzParseChangelogKey(f *testing.F) {
	id := [16]byte{1, 2, 3}
	for _, k := range [][]byte{
		appendChangelogKey(nil, &id, 'p', key8(1)),
		appendChangelogKey(nil, &id, 'd', key8(1<<40)),
		appendChangelogKey(nil, &id, 'l', delayedKey(time.Unix(1e9, 0), "id-1")),
		appendChangelogKey(nil, &id, 'k', appendParkedKey(nil, "orders", []byte("k"), 3)),
	} {
		f.Add(k)
		f.Add(k[:len(k)-1])
		f.Add(append(bytes.Clone(k), 0))
		f.Add(k[:changelogKeyHeader])
		bad := bytes.Clone(k)
		bad[1] = 'x'
		f.Add(bad)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ck, err := ParseChangelogKey(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		enc := appendChangelogKey(nil, &ck.FileID, bucketCode(ck.Bucket), ck.Local)
		if !bytes.Equal(enc, b) {
			t.Fatalf("key %x parses to %+v, which encodes to %x", b, ck, enc)
		}
		for i := range b {
			b[i] ^= 0xff
		}
		if again := appendChangelogKey(nil, &ck.FileID, bucketCode(ck.Bucket), ck.Local); !bytes.Equal(enc, again) {
			t.Fatal("parsed key aliases its input")
		}
	})
}

// errRollback rolls a fuzz iteration's transaction back.
var errRollback = errors.New("rollback")

// FuzzApplyChangelog applies arbitrary records (three, of which a
// tombstone when its value is empty) to a file holding records of its
// own and restored ones: it never panics, reports every malformed record
// as a DecodeError wrapping ErrCorrupt, and leaves only records that
// read back in the record buckets, with a consistent delayed ID index.
func FuzzApplyChangelog(f *testing.F) {
	src, rec, _ := capStore(f)
	due := time.Unix(1e9, 0)
	err := src.Update(func(tx *Tx) error {
		if _, err := tx.SavePending(clRecord(1, 0)); err != nil {
			return err
		}
		if _, err := tx.SaveDead(clRecord(2, 0)); err != nil {
			return err
		}
		if _, err := tx.SaveDelayed(Delayed{Due: due, Record: clRecord(3, 0)}); err != nil {
			return err
		}
		return tx.Park("orders", []byte("k"), clRecord(4, 0))
	})
	if err != nil {
		f.Fatal(err)
	}
	cs := rec.all()
	for i := range cs {
		j := (i + 1) % len(cs)
		f.Add(cs[i].Key, cs[i].Value, cs[j].Key, []byte{}, cs[i].Key, cs[j].Value)
	}
	f.Add([]byte{1}, []byte{2}, []byte{}, []byte{}, []byte{1, 'p'}, []byte{0xff})
	dst := setup(f)
	// dst holds a record of its own and the restored ones.
	if _, err := dst.savePending(clRecord(5, 0)); err != nil {
		f.Fatal(err)
	}
	if err := dst.Update(func(tx *Tx) error {
		_, err := tx.ApplyChangelog("in", 0, changesToRecords(cs, 0), int64(len(cs)))
		return err
	}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 []byte) {
		var recs []ChangelogRecord
		for i, kv := range [][2][]byte{{k1, v1}, {k2, v2}, {k3, v3}} {
			r := ChangelogRecord{Offset: int64(100 + i), Key: kv[0], Value: kv[1]}
			if len(r.Value) == 0 {
				r.Value = nil
			}
			recs = append(recs, r)
		}
		err := dst.Update(func(tx *Tx) error {
			out, err := tx.ApplyChangelog("in", 0, recs, 103)
			if err != nil {
				return err
			}
			for _, de := range out.Bad {
				if !errors.Is(de, ErrCorrupt) {
					t.Errorf("bad record %v does not wrap ErrCorrupt", de)
				}
			}
			checkBuckets(t, tx)
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
	})
}

// checkBuckets checks that every record of the record buckets reads
// back and that the delayed ID index matches the delayed bucket.
func checkBuckets(t *testing.T, tx *Tx) {
	t.Helper()
	for _, name := range []string{BucketPending, BucketDead, BucketDelayed, BucketParked} {
		c, _ := tx.cursor(name)
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if err := checkStored(name, k, v); err != nil {
				t.Fatalf("%s/%x: %v", name, k, err)
			}
			if name == BucketDelayed {
				ids, _ := tx.bucket(bucketDelayedIDs)
				if !bytes.Equal(ids.Get(k[8:]), k) {
					t.Fatalf("delayed %x not indexed", k)
				}
			}
		}
	}
	ids, _ := tx.cursor(bucketDelayedIDs)
	delayed, _ := tx.bucket(BucketDelayed)
	for id, k := ids.First(); id != nil; id, k = ids.Next() {
		if delayed.Get(k) == nil {
			t.Fatalf("index entry %q points to no record", id)
		}
	}
}
