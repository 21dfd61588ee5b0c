package store

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestProgressRoundTrip(t *testing.T) {
	at := time.Unix(1_700_000_000, 123456789).UTC()
	for _, p := range []Progress{
		{Base: 0, End: 0},
		{Base: 40, End: 116, NotDone: []int64{40, 41, 77, 115}, At: at},
		{Base: 1 << 40, End: 1<<40 + 5, NotDone: []int64{1<<40 + 2}},
	} {
		b := appendProgress(nil, &p)
		got, err := decodeProgress(b)
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		if got.Base != p.Base || got.End != p.End || !slices.Equal(got.NotDone, p.NotDone) || !got.At.Equal(p.At) {
			t.Fatalf("%+v decodes to %+v", p, got)
		}
	}
	p := Progress{Base: 40, End: 50, NotDone: []int64{42, 45}}
	for off, done := range map[int64]bool{39: false, 40: true, 42: false, 43: true, 45: false, 49: true, 50: false} {
		if p.Done(off) != done {
			t.Errorf("Done(%d) = %v, want %v", off, !done, done)
		}
	}
	if !p.NotDoneAt(42) || p.NotDoneAt(43) || p.NotDoneAt(51) {
		t.Error("NotDoneAt is wrong")
	}
}

func TestDecodeProgressCorrupt(t *testing.T) {
	good := appendProgress(nil, &Progress{Base: 10, End: 20, NotDone: []int64{12, 15}, At: time.Unix(5, 0)})
	cases := map[string][]byte{
		"empty":     {},
		"version":   append([]byte{9}, good[1:]...),
		"truncated": good[:len(good)-1],
		"trailing":  append(slices.Clone(good), 0),
		// End-Base 2, then an offset 5 past Base: outside the range.
		"outside": appendProgressRaw(10, 2, 5),
		// Two offsets, the second equal to the first (a zero delta).
		"repeated": appendProgressRaw(10, 5, 1, 0),
	}
	for name, b := range cases {
		if _, err := decodeProgress(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err %v, want ErrCorrupt", name, err)
		}
	}
}

// appendProgressRaw encodes a progress of base, span and deltas as
// appendProgress does, without checking them, and a zero time.
func appendProgressRaw(base int64, span uint64, deltas ...uint64) []byte {
	p := Progress{Base: base, End: base + int64(span)}
	b := appendProgress(nil, &p)
	b = b[:len(b)-2] // the count (0) and the zero time
	b = append(b, byte(len(deltas)))
	for _, d := range deltas {
		b = append(b, byte(d))
	}
	return append(b, 0)
}

// TestProgressTravels: PutProgress stores a partition's progress and
// sends it under the partition's own key, whatever file writes it; a
// file that applies that partition's changelog gets the last one, the
// progress records do not count as bad, and the records beside them are
// applied as before.
func TestProgressTravels(t *testing.T) {
	src, rec, _ := capStore(t)
	first := Progress{Base: 4, End: 9, NotDone: []int64{5}, At: time.Unix(100, 0)}
	second := Progress{Base: 6, End: 12, NotDone: []int64{7, 11}, At: time.Unix(200, 0)}
	pending := fullRecord(1)
	pending.Message.Origin.Topic, pending.Message.Origin.Partition = "orders", 3
	for _, p := range []Progress{first, second} {
		err := src.Update(func(tx *Tx) error {
			if err := tx.PutProgress("orders", 3, p); err != nil {
				return err
			}
			_, err := tx.SavePending(pending)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var recs []ChangelogRecord
	var keys [][]byte
	for i, c := range rec.all() {
		if c.Topic != "orders" || c.Partition != 3 {
			t.Fatalf("change %d went to %s/%d", i, c.Topic, c.Partition)
		}
		recs = append(recs, ChangelogRecord{Offset: int64(i), Key: c.Key, Value: c.Value})
		if isProgressKey(c.Key) {
			keys = append(keys, c.Key)
			ck, err := ParseChangelogKey(c.Key)
			if err != nil || ck.Bucket != BucketProgress || ck.FileID != [16]byte{} {
				t.Fatalf("progress key %x parses to %+v, %v", c.Key, ck, err)
			}
		}
	}
	if len(keys) != 2 || !bytes.Equal(keys[0], keys[1]) {
		t.Fatalf("progress keys %x: want two, the same", keys)
	}
	var got Progress
	var ok bool
	if err := src.View(func(tx *Tx) (err error) { got, ok, err = tx.Progress("orders", 3); return err }); err != nil || !ok {
		t.Fatalf("the writer's progress: %v, %v", ok, err)
	}
	if got.Base != second.Base || !slices.Equal(got.NotDone, second.NotDone) {
		t.Fatalf("the writer holds %+v, want %+v", got, second)
	}

	dst := setup(t)
	var applied Applied
	err := dst.Update(func(tx *Tx) (err error) {
		applied, err = tx.ApplyChangelog("orders", 3, recs, int64(len(recs)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(applied.Bad) != 0 || len(applied.Pending) != 2 {
		t.Fatalf("applied %d pending, bad %v; want 2 and none", len(applied.Pending), applied.Bad)
	}
	if err := dst.View(func(tx *Tx) (err error) { got, ok, err = tx.Progress("orders", 3); return err }); err != nil || !ok {
		t.Fatalf("the reader's progress: %v, %v", ok, err)
	}
	if got.Base != second.Base || got.End != second.End || !slices.Equal(got.NotDone, second.NotDone) || !got.At.Equal(second.At) {
		t.Fatalf("the reader holds %+v, want the last, %+v", got, second)
	}
	var other bool
	if err := dst.View(func(tx *Tx) (err error) { _, other, err = tx.Progress("orders", 2); return err }); err != nil || other {
		t.Fatalf("another partition has progress: %v, %v", other, err)
	}
	rec.reset()
	if err := src.Update(func(tx *Tx) error { return tx.DeleteProgress("orders", 3) }); err != nil {
		t.Fatal(err)
	}
	if err := src.View(func(tx *Tx) (err error) { _, ok, err = tx.Progress("orders", 3); return err }); err != nil || ok {
		t.Fatalf("progress still there after DeleteProgress: %v, %v", ok, err)
	}
	if sent := rec.all(); len(sent) != 0 {
		t.Fatalf("DeleteProgress sent %d changes to the changelog, want none", len(sent))
	}
}

// FuzzDecodeProgress: the progress decoder never panics, fails only with
// ErrCorrupt, and what it accepts encodes to bytes that decode to the
// same progress.
func FuzzDecodeProgress(f *testing.F) {
	good := appendProgress(nil, &Progress{Base: 10, End: 20, NotDone: []int64{12, 15}, At: time.Unix(5, 6)})
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append(slices.Clone(good), 0))
	f.Add(appendProgress(nil, &Progress{}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodeProgress(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		// Varints need not be minimal: the value, not the bytes, comes back.
		enc := appendProgress(nil, &p)
		again, err := decodeProgress(enc)
		if err != nil || again.Base != p.Base || again.End != p.End || !slices.Equal(again.NotDone, p.NotDone) || !again.At.Equal(p.At) {
			t.Fatalf("%x decodes to %+v, which encodes to %x, which decodes to %+v, %v", b, p, enc, again, err)
		}
	})
}
