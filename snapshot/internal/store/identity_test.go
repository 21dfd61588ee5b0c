package store

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"
)

// keyRecord is message v<i> of one key, read from input partition 0 at
// offset 100+i.
func keyRecord(i int) Record {
	r := clRecord(i, 0)
	r.Message.ID = fmt.Sprintf("in/0/%d", 100+i)
	r.Message.Key = []byte("k")
	r.Message.Value = fmt.Appendf(nil, "v%d", i)
	r.Message.Origin.Offset = int64(100 + i)
	r.Message.Attempt = 0
	return r
}

// pendingValues returns the values of s's pending records, in key order.
func pendingValues(t *testing.T, s *Store) []string {
	t.Helper()
	entries, bad, err := s.loadPending()
	if err != nil || len(bad) != 0 {
		t.Fatalf("load pending: %v, %d bad", err, len(bad))
	}
	var out []string
	for _, e := range entries {
		out = append(out, string(e.Record.Message.Value))
	}
	return out
}

func vals(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("v%d", i))
	}
	return out
}

// TestUpdatedRestoredRecordKeepsOrder: file A saves v0..v9 of one key; B
// restores them, saves v10 (a later message of the key) and then updates
// v0 (its attempt count, at its stop). A new file C restoring the whole
// changelog, and A on its old disk reading B's writes, hold the key's
// messages in their order, v0 first with B's attempt count.
func TestUpdatedRestoredRecordKeepsOrder(t *testing.T) {
	a, recA, _ := capStore(t)
	var recs []Record
	for i := range 10 {
		recs = append(recs, keyRecord(i))
	}
	if _, err := a.savePending(recs...); err != nil {
		t.Fatal(err)
	}
	csA := recA.all()
	b, recB, _ := capStore(t)
	got := applyAll(t, b.Store, changesToRecords(csA, 0), int64(len(csA)))
	if len(got.Pending) != 10 {
		t.Fatalf("B restored %+v", got)
	}
	if _, err := b.savePending(keyRecord(10)); err != nil {
		t.Fatal(err)
	}
	v0 := keyRecord(0)
	v0.Message.Attempt, v0.Reason = 1, "backoff"
	if err := b.Update(func(tx *Tx) error { return tx.PutPending(got.Pending[0], v0) }); err != nil {
		t.Fatal(err)
	}
	csB := recB.all()
	log := append(changesToRecords(csA, 0), changesToRecords(csB, int64(len(csA)))...)

	c, _, _ := capStore(t)
	applyAll(t, c.Store, log, int64(len(log)))
	if got, want := pendingValues(t, c.Store), vals(0, 10); !slices.Equal(got, want) {
		t.Fatalf("new disk C: order %v, want %v", got, want)
	}
	applyAll(t, a.Store, changesToRecords(csB, int64(len(csA))), int64(len(log)))
	if got, want := pendingValues(t, a.Store), vals(0, 10); !slices.Equal(got, want) {
		t.Fatalf("old disk A: order %v, want %v", got, want)
	}
	for name, s := range map[string]*Store{"C": c.Store, "A": a.Store} {
		entries, _, _ := s.loadPending()
		if r := entries[0].Record; r.Message.Attempt != 1 || r.Reason != "backoff" {
			t.Errorf("%s: v0 attempt %d reason %q, want B's update", name, r.Message.Attempt, r.Reason)
		}
	}
	// B reads its own writes back (a follow): nothing changes.
	if got := applyAll(t, b.Store, changesToRecords(csB, int64(len(csA))), int64(len(log))); len(got.Pending) != 0 || got.Deleted != 0 {
		t.Fatalf("B applied its own writes: %+v", got)
	}
}

// TestOldRekeyedRecordsOrder: a changelog written by the previous
// version, where B's update of v0 re-keyed it under B's file ID (a
// tombstone of A's key, a put under B's): a new file orders the key's
// messages by their input offsets, v0 first, not by file.
func TestOldRekeyedRecordsOrder(t *testing.T) {
	a, recA, _ := capStore(t)
	var recs []Record
	for i := range 10 {
		recs = append(recs, keyRecord(i))
	}
	if _, err := a.savePending(recs...); err != nil {
		t.Fatal(err)
	}
	csA := recA.all()
	idB := [16]byte{0xb}
	v0 := keyRecord(0)
	v0.Message.Attempt = 1
	log := changesToRecords(csA, 0)
	log = append(log,
		ChangelogRecord{Offset: 10, Key: csA[0].Key},
		ChangelogRecord{Offset: 11, Key: appendChangelogKey(nil, &idB, 'p', key8(1)), Value: appendRecord(nil, &v0)})
	c, _, _ := capStore(t)
	applyAll(t, c.Store, log, 12)
	if got, want := pendingValues(t, c.Store), vals(0, 9); !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// TestOwnDeletedRestoredNotResurrected: B deletes a restored record (its
// tombstone of A's key on its way) and then reads its own earlier update
// of it back: the record does not come back. A put of the key by
// another file (A's late write) does: a duplicate, never a loss.
func TestOwnDeletedRestoredNotResurrected(t *testing.T) {
	a, recA, _ := capStore(t)
	if _, err := a.savePending(keyRecord(0)); err != nil {
		t.Fatal(err)
	}
	csA := recA.all()
	b, recB, _ := capStore(t)
	got := applyAll(t, b.Store, changesToRecords(csA, 0), 1)
	v0 := keyRecord(0)
	v0.Message.Attempt = 1
	if err := b.Update(func(tx *Tx) error { return tx.PutPending(got.Pending[0], v0) }); err != nil {
		t.Fatal(err)
	}
	put := recB.all()[0]
	if err := b.deletePending(got.Pending[0]); err != nil {
		t.Fatal(err)
	}
	if got := applyAll(t, b.Store, changesToRecords([]Change{put}, 1), 2); len(got.Pending) != 0 {
		t.Fatalf("own put resurrected the record: %+v", got)
	}
	if n, _ := b.count(BucketPending); n != 0 {
		t.Fatalf("%d pending, want 0", n)
	}
	late := ChangelogRecord{Offset: 5, Key: csA[0].Key, Value: csA[0].Value}
	if got := applyAll(t, b.Store, []ChangelogRecord{late}, 6); len(got.Pending) != 1 {
		t.Fatalf("another file's late put: %+v, want it back", got)
	}
}

// TestRecordIdentity: a record's identity is the changelog key of the
// file that created it, on that file and on every file that restored it,
// before and after an update.
func TestRecordIdentity(t *testing.T) {
	a, recA, idA := capStore(t)
	keys, err := a.savePending(keyRecord(0))
	if err != nil {
		t.Fatal(err)
	}
	b, _, _ := capStore(t)
	got := applyAll(t, b.Store, changesToRecords(recA.all(), 0), 1)
	want := ChangelogKey{FileID: idA, Bucket: BucketPending, Local: key8(keys[0])}
	check := func(s *Store, local []byte) {
		t.Helper()
		err := s.View(func(tx *Tx) error {
			id, ok, err := tx.RecordIdentity(BucketPending, local)
			if err != nil || !ok || id.FileID != want.FileID || id.Bucket != want.Bucket || !bytes.Equal(id.Local, want.Local) {
				t.Errorf("identity %+v %v %v, want %+v", id, ok, err, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check(a.Store, key8(keys[0]))
	check(b.Store, key8(got.Pending[0]))
	if err := b.Update(func(tx *Tx) error { return tx.PutPending(got.Pending[0], keyRecord(0)) }); err != nil {
		t.Fatal(err)
	}
	check(b.Store, key8(got.Pending[0]))
	if err := b.View(func(tx *Tx) error { _, _, err := tx.RecordIdentity("meta", nil); return err }); err == nil {
		t.Error("identity of a bucket without a changelog: no error")
	}
}

// TestForgetDelayed: a forgotten delayed record leaves the file and its
// ID index, and nothing is sent to the changelog.
func TestForgetDelayed(t *testing.T) {
	ts, rec, _ := capStore(t)
	r := clRecord(1, 0)
	if _, err := ts.saveDelayed(Delayed{Due: time.Unix(2e9, 0), Record: r}); err != nil {
		t.Fatal(err)
	}
	key := DelayedKey(delayedKey(time.Unix(2e9, 0), r.Message.ID))
	rec.reset()
	if err := ts.Update(func(tx *Tx) error { return tx.ForgetDelayed(key) }); err != nil {
		t.Fatal(err)
	}
	if err := ts.Update(func(tx *Tx) error { return tx.ForgetDelayed(key) }); err != nil {
		t.Fatalf("forget a missing key: %v", err)
	}
	if n := len(rec.all()); n != 0 {
		t.Errorf("%d changes sent, want none", n)
	}
	err := ts.View(func(tx *Tx) error {
		if _, ok, _ := tx.DelayedKeyOf(r.Message.ID); ok {
			t.Error("the ID is still indexed")
		}
		if _, ok, _ := tx.GetDelayed(key); ok {
			t.Error("the record is still there")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMovedOwnRecordTakenBack: a file that dropped one of its own
// records (a rebuild of the partition its key routes to now, before the
// record's move from its old partition reached that one) takes it back
// from the move's put, which names another writer and says it is a move;
// another writer's put of an own key it does not hold, not a move, is
// still not inserted (a late write of a record the file finished).
func TestMovedOwnRecordTakenBack(t *testing.T) {
	a, recA, _ := capStore(t)
	keys, err := a.savePending(keyRecord(0))
	if err != nil {
		t.Fatal(err)
	}
	put := recA.all()[0]
	if err := a.UpdateLocal(func(tx *Tx) error { return tx.DeletePending(keys...) }); err != nil {
		t.Fatal(err)
	}
	mover := bytes.Repeat([]byte{7}, 16)
	late := ChangelogRecord{Offset: 1, Key: put.Key, Value: put.Value, Writer: mover}
	if got := applyAll(t, a.Store, []ChangelogRecord{late}, 2); len(got.Pending) != 0 {
		t.Fatalf("another writer's put of an own key not held, not a move: %+v, want nothing inserted", got)
	}
	moved := ChangelogRecord{Offset: 2, Key: put.Key, Value: put.Value, Writer: mover, Moved: true}
	got := applyAll(t, a.Store, []ChangelogRecord{moved}, 3)
	if len(got.Pending) != 1 {
		t.Fatalf("the move's put: %+v, want the record back", got)
	}
	err = a.View(func(tx *Tx) error {
		id, ok, err := tx.RecordIdentity(BucketPending, key8(got.Pending[0]))
		if err != nil || !ok || !bytes.Equal(appendChangelogKey(nil, &id.FileID, bucketCode(id.Bucket), id.Local), put.Key) {
			t.Errorf("identity of the record taken back: %+v %v %v, want its own changelog key", id, ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
