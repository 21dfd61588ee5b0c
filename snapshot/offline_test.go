package snapshot

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// offlineRec is a record of class with message ID id and key key, from
// partition 0 of topic "orders" at offset off.
func offlineRec(id, class, key string, off int64) Record {
	return Record{
		Message: handoff.Message{ID: id, Class: class, Key: []byte(key), Value: []byte("v-" + id),
			Origin: handoff.Origin{Topic: "orders", Partition: 0, Offset: off}},
		Reason: "test", Err: "boom " + id, SavedAt: time.Date(2026, 3, 1, 12, 0, int(off), 0, time.UTC),
	}
}

// openOffline opens a new state file in t's temporary directory; with
// changes non-nil, with a changelog that routes every record to
// partition 0 of "orders" and appends what it is sent to *changes.
func openOffline(t *testing.T, changes *[]LogRecord) (*State, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if changes != nil {
		_, err := st.OpenChangelog(ChangelogConfig{Log: &fakeLog{sent: changes},
			Route: func(*handoff.Message) (string, int32, bool) { return "orders", 0, true }})
		if err != nil {
			t.Fatal(err)
		}
	}
	return st, path
}

// damage writes value under key in bucket of the closed file at path,
// as a damaged or foreign write leaves it.
func damage(t *testing.T, path, bucket string, key, value []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte(bucket)).Put(key, value) })
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
}

func seq(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// TestWalk: Walk calls the funcs bucket by bucket (pending, dead,
// delayed, parked) in each bucket's order, leaves out a bucket whose
// func is nil, and returns the records that do not decode in the order
// met, named by their buckets.
func TestWalk(t *testing.T) {
	st, path := openOffline(t, nil)
	err := seed(st, func(tx *store.Tx) error {
		if _, err := tx.SavePending(offlineRec("p1", "a", "k", 1), offlineRec("p2", "a", "k", 2)); err != nil {
			return err
		}
		if _, err := tx.SaveDead(offlineRec("d1", "a", "k", 3), offlineRec("d2", "b", "j", 4)); err != nil {
			return err
		}
		t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		if _, err := tx.SaveDelayed(Delayed{Due: t0.Add(2 * time.Hour), Record: offlineRec("l1", "a", "k", 5)},
			Delayed{Due: t0.Add(time.Hour), Record: offlineRec("l2", "a", "k", 6)}); err != nil {
			return err
		}
		if err := tx.Park("a", []byte("k"), offlineRec("k1", "a", "k", 7), offlineRec("k2", "a", "k", 8)); err != nil {
			return err
		}
		return tx.Park("a", []byte("zz"), offlineRec("k3", "a", "zz", 9))
	})
	if err := errors.Join(err, st.Close()); err != nil {
		t.Fatal(err)
	}
	damage(t, path, BucketPending, seq(99), []byte("not a record"))
	damage(t, path, BucketDead, seq(98), []byte("not a record"))
	damage(t, path, BucketDelayed, append(seq(1), "x"...), []byte("not a record"))
	damage(t, path, BucketParked, []byte("no parked key"), []byte("not a record"))
	st, err = Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	var got []string
	bad, err := st.Walk(Walk{
		Pending: func(e *Entry) { got = append(got, "pending "+e.Record.Message.ID) },
		Dead:    func(e *Entry) { got = append(got, "dead "+e.Record.Message.ID) },
		Delayed: func(e *DelayedEntry) { got = append(got, "delayed "+e.Record.Message.ID) },
		Parked: func(pk ParkedCount, recs []ParkedEntry) {
			for _, r := range recs {
				got = append(got, fmt.Sprintf("parked %s/%s %s", pk.Class, pk.Key, r.Record.Message.ID))
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"pending p1", "pending p2", "dead d1", "dead d2", "delayed l2", "delayed l1",
		"parked a/k k1", "parked a/k k2", "parked a/zz k3"}
	if !slices.Equal(got, want) {
		t.Errorf("walk:\n got %q\nwant %q", got, want)
	}
	var buckets []string
	for _, de := range bad {
		buckets = append(buckets, de.Bucket)
		if !errors.Is(de, ErrCorrupt) {
			t.Errorf("%v does not wrap ErrCorrupt", de)
		}
	}
	if want := []string{BucketPending, BucketDead, BucketDelayed, BucketParked}; !slices.Equal(buckets, want) {
		t.Errorf("undecodable in buckets %q, want %q", buckets, want)
	}

	got = nil
	bad, err = st.Walk(Walk{Dead: func(e *Entry) { got = append(got, e.Record.Message.ID) }})
	if err != nil || !slices.Equal(got, []string{"d1", "d2"}) || len(bad) != 1 || bad[0].Bucket != BucketDead {
		t.Errorf("walk of the dead letters alone: %q, undecodable %v, err %v", got, bad, err)
	}
}

// deadFile writes a file whose dead letters have group-wide IDs: three
// of its own (classes a, b, a) and one that does not decode, and
// returns the State, read-only, and the IDs of the three.
func deadFile(t *testing.T) (*State, []DeadID) {
	t.Helper()
	var changes []LogRecord
	st, path := openOffline(t, &changes)
	var ids []DeadID
	err := seed(st, func(tx *store.Tx) error {
		keys, err := tx.SaveDead(offlineRec("m1", "a", "k", 1), offlineRec("m2", "b", "k", 2), offlineRec("m3", "a", "j", 3))
		for _, k := range keys {
			id, err := tx.DeadID(k)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return err
	})
	if err := errors.Join(err, st.Close()); err != nil {
		t.Fatal(err)
	}
	damage(t, path, BucketDead, seq(10), []byte("not a record"))
	st, err = Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, id := range ids {
		if id.Local {
			t.Fatalf("dead letter ID %s of a file with a changelog is Local", id)
		}
	}
	return st, ids
}

// TestListDead: a page of the dead letters Match selects, with their
// IDs, the From of the next page, the count of all, newest first or
// oldest; the one that does not decode apart, with its key and ID.
func TestListDead(t *testing.T) {
	st, ids := deadFile(t)
	l, err := st.ListDead(DeadQuery{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Page) != 2 || l.Page[0].ID != ids[0] || l.Page[1].ID != ids[1] || l.Page[1].Record.Message.ID != "m2" ||
		l.Next != l.Page[1].Key || l.Total != 3 {
		t.Fatalf("first page: %+v", l)
	}
	if len(l.Undecodable) != 1 || l.Undecodable[0].Key != 10 || l.Undecodable[0].Err.Bucket != BucketDead ||
		l.Undecodable[0].IDErr != nil || l.Undecodable[0].String() != (DeadID{File: ids[0].File, Seq: 10}).String() {
		t.Errorf("undecodable: %+v", l.Undecodable)
	}
	l, err = st.ListDead(DeadQuery{From: l.Next, Limit: 2})
	if err != nil || len(l.Page) != 1 || l.Page[0].ID != ids[2] || l.Next != 0 {
		t.Errorf("second page: %+v, %v", l, err)
	}
	l, err = st.ListDead(DeadQuery{Class: "a", Match: func(r *Record) bool { return string(r.Message.Key) == "j" }, Newest: true, Limit: 5})
	if err != nil || len(l.Page) != 1 || l.Page[0].ID != ids[2] || l.Total != 1 {
		t.Errorf("class a, key j: %+v, %v", l, err)
	}
	l, err = st.ListDead(DeadQuery{Newest: true, Limit: 2})
	if err != nil || len(l.Page) != 2 || l.Page[0].ID != ids[2] || l.Page[1].ID != ids[1] || l.Next != l.Page[1].Key {
		t.Errorf("newest first: %+v, %v", l, err)
	}
}

// TestDeadLookups: a dead letter by its ID, by its message ID, the
// dead letters of a class; a bare number in a file with IDs is refused,
// an undecodable dead letter is found with its decode error.
func TestDeadLookups(t *testing.T) {
	st, ids := deadFile(t)
	e, ok, err := st.DeadByID(ids[1])
	if err != nil || !ok || e.ID != ids[1] || e.Record.Message.ID != "m2" {
		t.Errorf("by ID %s: %+v, %v, %v", ids[1], e, ok, err)
	}
	if _, ok, err := st.DeadByID(DeadID{File: ids[0].File, Seq: 77}); ok || err != nil {
		t.Errorf("by an ID the file does not have: %v, %v", ok, err)
	}
	if _, _, err := st.DeadByID(DeadID{Seq: 2, Local: true}); !errors.Is(err, ErrDeadID) {
		t.Errorf("by a bare number in a file with IDs: %v, want ErrDeadID", err)
	}
	e, ok, err = st.DeadByID(DeadID{File: ids[0].File, Seq: 10})
	if de, isDE := errors.AsType[*DecodeError](err); !isDE || !ok || e.Key != 10 || de.Bucket != BucketDead {
		t.Errorf("by the ID of an undecodable one: %+v, %v, %v", e, ok, err)
	}
	e, ok, err = st.DeadByMessageID("m3")
	if err != nil || !ok || e.ID != ids[2] {
		t.Errorf("by message ID m3: %+v, %v, %v", e, ok, err)
	}
	if _, ok, err := st.DeadByMessageID("none"); ok || err != nil {
		t.Errorf("by a message ID no dead letter has: %v, %v", ok, err)
	}
	refs, bad, err := st.DeadRefs("a")
	if err != nil || len(refs) != 2 || refs[0].ID != ids[0] || refs[1].ID != ids[2] || len(bad) != 1 || bad[0].Key != 10 {
		t.Errorf("refs of class a: %+v, undecodable %+v, %v", refs, bad, err)
	}
}

// TestOfflineWrites: RequeueDead moves dead letters to pending with a
// fresh budget, all or nothing; Delete deletes records of every
// bucket in one write.
func TestOfflineWrites(t *testing.T) {
	st, _ := openOffline(t, nil)
	var delayed []DelayedKey
	var parked []ParkedKey
	err := seed(st, func(tx *store.Tx) error {
		if _, err := tx.SavePending(offlineRec("p1", "a", "k", 1)); err != nil {
			return err
		}
		r := offlineRec("d1", "a", "k", 2)
		r.Message.Attempt, r.Redeliveries = 5, 2
		if _, err := tx.SaveDead(r, offlineRec("d2", "a", "j", 3)); err != nil {
			return err
		}
		if _, err := tx.SaveDelayed(Delayed{Due: time.Now().Add(time.Hour), Record: offlineRec("l1", "a", "k", 4)}); err != nil {
			return err
		}
		k, _, err := tx.DelayedKeyOf("l1")
		if err != nil {
			return err
		}
		delayed = append(delayed, k)
		if err := tx.Park("a", []byte("k"), offlineRec("k1", "a", "k", 5)); err != nil {
			return err
		}
		ps, _, err := tx.Parked("a", []byte("k"))
		for _, p := range ps {
			parked = append(parked, p.Key)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.RequeueDead(1, 77); !errors.Is(err, ErrNotFound) {
		t.Errorf("requeue of a missing key: %v, want ErrNotFound", err)
	}
	if c, err := st.Counts(); err != nil || c[BucketDead] != 2 || c[BucketPending] != 1 {
		t.Errorf("after a failed requeue: %v, %v; want nothing changed", c, err)
	}
	keys, err := st.RequeueDead(1)
	if err != nil || len(keys) != 1 {
		t.Fatalf("requeue: %v, %v", keys, err)
	}
	var got Record
	err = peek(st, func(tx *store.Tx) (err error) { got, _, err = tx.GetPending(keys[0]); return err })
	if err != nil || got.Message.ID != "d1" || got.Message.Attempt != 0 || got.Redeliveries != 0 || got.Reason != ReasonRequeued || got.Err != "boom d1" {
		t.Errorf("requeued record: %+v, %v", got, err)
	}
	if err := st.Delete(Source{From: FromPending, Key: 1}, Source{From: FromDead, Key: 2}, Source{From: FromDelayed, Delayed: delayed[0]},
		Source{From: FromParked, Parked: parked[0]}, Source{}); err != nil {
		t.Fatal(err)
	}
	c, err := st.Counts()
	if err != nil || c[BucketPending] != 1 || c[BucketDead] != 0 || c[BucketDelayed] != 0 || c[BucketParked] != 0 {
		t.Errorf("after Delete: %v, %v; want the requeued pending record only", c, err)
	}
}

// TestChangelogDead: of what a changelog holds, only a dead letter's
// writes are dead letters'; the last put decodes to the dead letter with
// the ID its writer's file gives it.
func TestChangelogDead(t *testing.T) {
	var changes []LogRecord
	st, _ := openOffline(t, &changes)
	var id DeadID
	err := seed(st, func(tx *store.Tx) error {
		if _, err := tx.SavePending(offlineRec("p1", "a", "k", 1)); err != nil {
			return err
		}
		keys, err := tx.SaveDead(offlineRec("d1", "a", "k", 2), offlineRec("d2", "a", "k", 3))
		if err != nil {
			return err
		}
		if id, err = tx.DeadID(keys[0]); err != nil {
			return err
		}
		return tx.DeleteDead(keys[1])
	})
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.FileInfo()
	if err != nil || !info.HasFileID {
		t.Fatalf("file info: %+v, %v", info, err)
	}
	if len(changes) != 4 {
		t.Fatalf("%d changes, want 4 (a pending record, two dead letters, a tombstone)", len(changes))
	}
	for i, c := range changes {
		dead, err := IsChangelogDead(c.Key, c.Value)
		if err != nil || dead != (i > 0) {
			t.Errorf("change %d: dead %v, %v", i, dead, err)
		}
	}
	d, err := DecodeChangelogDead(changes[1].Key, changes[1].Value)
	if err != nil || d.ID != id || d.Writer != info.FileID || d.Record.Message.ID != "d1" {
		t.Errorf("decoded: %+v, %v; want ID %s", d, err, id)
	}
	if _, err := DecodeChangelogDead(changes[0].Key, changes[0].Value); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a pending record as a dead letter: %v, want ErrCorrupt", err)
	}
	mk, mv := store.OwnerMarker(info.FileID)
	if dead, err := IsChangelogDead(mk, mv); dead || err != nil {
		t.Errorf("owner marker: dead %v, %v", dead, err)
	}
	if dead, err := IsChangelogDead([]byte("junk"), nil); dead || !errors.Is(err, ErrCorrupt) {
		t.Errorf("a key that is no changelog key: dead %v, %v", dead, err)
	}
	short := append(changes[1].Key[:len(changes[1].Key)-8:len(changes[1].Key)-8], 1, 2)
	if _, err := DecodeChangelogDead(short, changes[1].Value); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a dead letter key of 2 bytes: %v, want ErrCorrupt", err)
	}
}

// seed and peek run fn in a write or a read transaction of st's store:
// the tests write and check what the offline face reads without it.
func seed(st *State, fn func(tx *store.Tx) error) error { return st.st.Update(fn) }
func peek(st *State, fn func(tx *store.Tx) error) error { return st.st.View(fn) }

// fakeLog is a Log that keeps what it is sent (acknowledged at once, at
// consecutive offsets per partition) and reads it back.
type fakeLog struct {
	sent *[]LogRecord
	// onSend, when set, sees each send first.
	onSend func([]LogRecord)
}

func (f *fakeLog) Send(recs []LogRecord) func(context.Context) error {
	if f.onSend != nil {
		f.onSend(recs)
	}
	for i := range recs {
		n := int64(0)
		for _, r := range *f.sent {
			if r.Input == recs[i].Input && r.Partition == recs[i].Partition {
				n++
			}
		}
		recs[i].Offset = n
		*f.sent = append(*f.sent, recs[i])
	}
	return func(context.Context) error { return nil }
}

func (f *fakeLog) Read(ctx context.Context, input string, p int32, from int64, fn func([]LogRecord) error) (int64, error) {
	var batch []LogRecord
	for _, r := range *f.sent {
		if r.Input == input && r.Partition == p && r.Offset >= from {
			// As the Kafka log reads them: a moved put is MovedIn.
			r.MovedIn, r.Moved = r.Moved && r.Value != nil, r.Moved && r.Value == nil
			batch = append(batch, r)
		}
	}
	next := from
	if len(batch) > 0 {
		next = batch[len(batch)-1].Offset + 1
	}
	return next, fn(batch)
}

func (f *fakeLog) Topic(input string) string { return input + ".changelog" }
