package store

import (
	"slices"
	"testing"
)

// pendingIDs returns the IDs of the pending bucket's records, in key
// order.
func pendingIDs(t *testing.T, s *Store) []string {
	t.Helper()
	entries, _, err := s.loadPending()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Record.Message.ID)
	}
	return ids
}

// TestRebuildChangelog: a rebuild of partition 0 keeps what the
// changelog holds (this file's own keys included, and another file's
// records), drops the local records of the partition it does not hold
// (finished elsewhere, their tombstones expired), keeps a record whose
// put is not sent yet and leaves the other partitions' records alone.
// ApplyChangelog, reading the same, would keep the stale record.
func TestRebuildChangelog(t *testing.T) {
	ts, rec, id := capStore(t)
	r1, r2, r3 := clRecord(1, 0), clRecord(2, 0), clRecord(3, 1)
	if _, err := ts.savePending(r1, r2, r3); err != nil {
		t.Fatal(err)
	}
	sent := rec.all() // own puts of 1, 2 (partition 0) and 3 (partition 1)
	r5 := clRecord(5, 0)
	if err := ts.UpdateLocal(func(tx *Tx) error { _, err := tx.SavePending(r5); return err }); err != nil {
		t.Fatal(err)
	}
	other := [16]byte{9}
	r4 := clRecord(4, 0)
	v4 := appendRecord(nil, &r4)
	// What compaction left of partition 0: record 2's put (record 1 was
	// finished elsewhere and its tombstone expired), another file's
	// record 4, and a marker.
	mkKey, mkVal := OwnerMarker(other)
	if got, ok, err := ParseOwnerMarker(mkKey, mkVal); !ok || err != nil || got != other {
		t.Fatalf("ParseOwnerMarker = %x, %v, %v", got, ok, err)
	}
	if _, err := ParseChangelogKey(mkKey); err == nil {
		t.Fatal("a marker key parses as a record key")
	}
	recs := []ChangelogRecord{
		{Offset: 1, Key: sent[1].Key, Value: sent[1].Value},
		{Offset: 7, Key: appendChangelogKey(nil, &other, 'p', key8(1)), Value: v4},
	}
	belongs := func(r *Record) bool { return r.Message.Origin.Partition == 0 }
	var applied Applied
	var dropped int
	err := ts.UpdateLocal(func(tx *Tx) (err error) {
		applied, dropped, err = tx.RebuildChangelog("in", 0, recs, 9, belongs)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pendingIDs(t, ts.Store), []string{r3.Message.ID, r5.Message.ID, r2.Message.ID, r4.Message.ID}; !slices.Equal(got, want) {
		t.Errorf("pending after the rebuild: %v, want %v", got, want)
	}
	if dropped != 2 || len(applied.Pending) != 2 {
		t.Errorf("dropped %d, inserted %d; want 2, 2", dropped, len(applied.Pending))
	}
	err = ts.View(func(tx *Tx) error {
		next, ok, err := tx.ChangelogCheckpoint("in", 0)
		if err != nil || !ok || next != 9 {
			t.Errorf("checkpoint %d, %v, %v; want 9", next, ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Record 2, rebuilt, is mapped to its own key: its delete tombstones
	// that key.
	rec.reset()
	if err := ts.deletePending(applied.Pending[0]); err != nil {
		t.Fatal(err)
	}
	got := describe(t, rec.all())
	if want := []change{{BucketPending, id, string(key8(2)), true}}; !slices.Equal(got, want) {
		t.Errorf("delete of the rebuilt record 2 sent %+v, want %+v", got, want)
	}
}

// TestSendUnlogged: a file written with capture off sends every routed
// record once, as a put under its own key, and is marked; a second call
// sends nothing; cleared, the next sends them again, leaving out a
// record restored from another file.
func TestSendUnlogged(t *testing.T) {
	ts := setup(t)
	local := fullRecord(3)
	local.Message.Class = "local"
	if _, err := ts.savePending(clRecord(1, 0), clRecord(2, 1), local); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if err := ts.SetChangelog(rec.changelog()); err != nil {
		t.Fatal(err)
	}
	var id [16]byte
	ts.View(func(tx *Tx) (err error) { id, _, err = tx.ChangelogFileID(); return err })
	n, err := ts.SendUnlogged(true)
	if err != nil || n != 2 {
		t.Fatalf("SendUnlogged = %d, %v; want 2", n, err)
	}
	got := describe(t, rec.all())
	want := []change{{BucketPending, id, string(key8(1)), false}, {BucketPending, id, string(key8(2)), false}}
	if !slices.Equal(got, want) {
		t.Fatalf("sent\n got %+v\nwant %+v", got, want)
	}
	rec.reset()
	if n, err := ts.SendUnlogged(false); err != nil || n != 0 || len(rec.all()) != 0 {
		t.Fatalf("second SendUnlogged = %d, %v, %d sent; want none", n, err, len(rec.all()))
	}
	// A record restored from another file, then the mark cleared.
	other := [16]byte{9}
	r4 := clRecord(4, 0)
	v4 := appendRecord(nil, &r4)
	applyAll(t, ts.Store, []ChangelogRecord{{Offset: 0, Key: appendChangelogKey(nil, &other, 'p', key8(1)), Value: v4}}, 1)
	if err := ts.ClearChangelogComplete(); err != nil {
		t.Fatal(err)
	}
	ts.View(func(tx *Tx) error {
		if done, err := tx.ChangelogComplete(); done || err != nil {
			t.Errorf("complete after the clear: %v, %v", done, err)
		}
		return nil
	})
	rec.reset()
	if n, err := ts.SendUnlogged(false); err != nil || n != 2 {
		t.Fatalf("SendUnlogged after the clear = %d, %v; want 2", n, err)
	}
	if got := describe(t, rec.all()); !slices.Equal(got, want) {
		t.Fatalf("sent after the clear\n got %+v\nwant %+v", got, want)
	}
	if err := ts.View(func(tx *Tx) error { return tx.PutMeta(metaLoggedKey, nil) }); err == nil {
		t.Error("PutMeta of the complete mark allowed")
	}
}
