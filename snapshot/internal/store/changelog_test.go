package store

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder is a changelog that keeps what it is sent, one slice per
// Send, and answers the waits with waitErr.
type recorder struct {
	mu      sync.Mutex
	sends   [][]Change
	waitErr error
}

func (r *recorder) changelog() Changelog {
	return Changelog{
		Route: func(rec *Record) (string, int32, bool) {
			if rec.Message.Class == "local" {
				return "", 0, false
			}
			return rec.Message.Origin.Topic, int32(rec.Message.Origin.Partition), true
		},
		Send: func(changes []Change) func() error {
			r.mu.Lock()
			r.sends = append(r.sends, slices.Clone(changes))
			err := r.waitErr
			r.mu.Unlock()
			return func() error { return err }
		},
	}
}

// all returns every change sent, in order.
func (r *recorder) all() []Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Concat(r.sends...)
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.sends = nil
	r.mu.Unlock()
}

// capStore returns a store with capture on and its recorder.
func capStore(t testing.TB) (*testStore, *recorder, [16]byte) {
	t.Helper()
	ts := setup(t)
	rec := &recorder{}
	if err := ts.SetChangelog(rec.changelog()); err != nil {
		t.Fatal(err)
	}
	var id [16]byte
	err := ts.View(func(tx *Tx) error {
		var ok bool
		var err error
		id, ok, err = tx.ChangelogFileID()
		if !ok && err == nil {
			err = errors.New("no file ID")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ts, rec, id
}

// clRecord is a record routed to topic "in", partition p.
func clRecord(i, p int) Record {
	r := fullRecord(i)
	r.Message.Origin.Topic, r.Message.Origin.Partition = "in", p
	return r
}

// change describes a Change for comparisons: bucket code, file ID,
// local key, and whether it is a tombstone.
type change struct {
	bucket string
	file   [16]byte
	local  string
	tomb   bool
}

func describe(t *testing.T, cs []Change) []change {
	t.Helper()
	var out []change
	for _, c := range cs {
		ck, err := ParseChangelogKey(c.Key)
		if err != nil {
			t.Fatalf("change key %x: %v", c.Key, err)
		}
		if c.Topic != "in" {
			t.Fatalf("change routed to %q", c.Topic)
		}
		out = append(out, change{ck.Bucket, ck.FileID, string(ck.Local), c.Value == nil})
	}
	return out
}

func TestCaptureOffSendsNothing(t *testing.T) {
	ts := setup(t)
	rec := &recorder{}
	if _, err := ts.savePending(clRecord(1, 0)); err != nil {
		t.Fatal(err)
	}
	if err := ts.View(func(tx *Tx) error {
		_, ok, err := tx.ChangelogFileID()
		if ok {
			t.Error("file ID before SetChangelog")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(rec.all()) != 0 {
		t.Fatal("sent before SetChangelog")
	}
	// A file with only a file ID is not empty: the runtime reads Empty
	// before SetChangelog.
	ts2 := setup(t)
	if err := ts2.SetChangelog(rec.changelog()); err != nil {
		t.Fatal(err)
	}
	if err := ts2.View(func(tx *Tx) error {
		empty, err := tx.Empty()
		if empty {
			t.Error("file with a file ID is empty")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The ID stays across reopen and SetChangelog again.
	var before [16]byte
	ts2.View(func(tx *Tx) error { before, _, _ = tx.ChangelogFileID(); return nil })
	ts2.reopen(t)
	if err := ts2.SetChangelog(rec.changelog()); err != nil {
		t.Fatal(err)
	}
	if ts2.cl.Load().fileID != before {
		t.Fatal("file ID changed on reopen")
	}
}

// TestCaptureOwnKeys checks every write method: what it sends, under the
// file's own keys.
func TestCaptureOwnKeys(t *testing.T) {
	due := time.Unix(1e9, 0)
	for _, tc := range []struct {
		name string
		prep func(tx *Tx) error // not captured: before the reset
		fn   func(tx *Tx) error
		want func() []change // file ID filled in
	}{
		{
			name: "SavePending",
			fn:   func(tx *Tx) error { _, err := tx.SavePending(clRecord(1, 0), clRecord(2, 1)); return err },
			want: func() []change {
				return []change{{bucket: BucketPending, local: string(key8(1))}, {bucket: BucketPending, local: string(key8(2))}}
			},
		},
		{
			name: "local class stays local",
			fn: func(tx *Tx) error {
				r := clRecord(1, 0)
				r.Message.Class = "local"
				_, err := tx.SavePending(r)
				return err
			},
			want: func() []change { return nil },
		},
		{
			name: "PutPending and DeletePending",
			prep: func(tx *Tx) error { _, err := tx.SavePending(clRecord(1, 0)); return err },
			fn: func(tx *Tx) error {
				if err := tx.PutPending(1, clRecord(3, 0)); err != nil {
					return err
				}
				return tx.DeletePending(1, 99)
			},
			want: func() []change {
				return []change{{bucket: BucketPending, local: string(key8(1))}, {bucket: BucketPending, local: string(key8(1)), tomb: true}}
			},
		},
		{
			name: "SaveDead PutDead DeleteDead",
			fn: func(tx *Tx) error {
				if _, err := tx.SaveDead(clRecord(1, 0)); err != nil {
					return err
				}
				if err := tx.PutDead(1, clRecord(2, 0)); err != nil {
					return err
				}
				return tx.DeleteDead(1)
			},
			want: func() []change {
				k := string(key8(1))
				return []change{{bucket: BucketDead, local: k}, {bucket: BucketDead, local: k}, {bucket: BucketDead, local: k, tomb: true}}
			},
		},
		{
			name: "RequeueDead",
			prep: func(tx *Tx) error { _, err := tx.SaveDead(clRecord(1, 0)); return err },
			fn:   func(tx *Tx) error { _, err := tx.RequeueDead(1); return err },
			want: func() []change {
				return []change{{bucket: BucketDead, local: string(key8(1)), tomb: true}, {bucket: BucketPending, local: string(key8(1))}}
			},
		},
		{
			name: "delayed",
			fn: func(tx *Tx) error {
				r := clRecord(1, 0)
				if _, err := tx.SaveDelayed(Delayed{Due: due, Record: r}); err != nil {
					return err
				}
				k := delayedKey(due, r.Message.ID)
				if err := tx.PutDelayed(k, r); err != nil {
					return err
				}
				return tx.DeleteDelayed(k)
			},
			want: func() []change {
				k := string(delayedKey(due, clRecord(1, 0).Message.ID))
				return []change{{bucket: BucketDelayed, local: k}, {bucket: BucketDelayed, local: k}, {bucket: BucketDelayed, local: k, tomb: true}}
			},
		},
		{
			name: "parked",
			fn: func(tx *Tx) error {
				if err := tx.Park("orders", []byte("k"), clRecord(1, 0), clRecord(2, 0)); err != nil {
					return err
				}
				k := ParkedKey(appendParkedKey(nil, "orders", []byte("k"), 1))
				if err := tx.PutParked(k, clRecord(3, 0)); err != nil {
					return err
				}
				return tx.DeleteParked(k)
			},
			want: func() []change {
				k1 := string(appendParkedKey(nil, "orders", []byte("k"), 1))
				k2 := string(appendParkedKey(nil, "orders", []byte("k"), 2))
				return []change{{bucket: BucketParked, local: k1}, {bucket: BucketParked, local: k2}, {bucket: BucketParked, local: k1}, {bucket: BucketParked, local: k1, tomb: true}}
			},
		},
		{
			name: "RenameClass",
			prep: func(tx *Tx) error {
				if _, err := tx.SavePending(clRecord(1, 0)); err != nil {
					return err
				}
				return tx.Park("orders", nil, clRecord(2, 0))
			},
			fn: func(tx *Tx) error { _, err := tx.RenameClass("orders", "orders2"); return err },
			want: func() []change {
				return []change{
					{bucket: BucketPending, local: string(key8(1))},
					{bucket: BucketParked, local: string(appendParkedKey(nil, "orders", nil, 1)), tomb: true},
					{bucket: BucketParked, local: string(appendParkedKey(nil, "orders2", nil, 2))},
				}
			},
		},
		{
			name: "Quarantine sends nothing",
			prep: func(tx *Tx) error {
				b, _ := tx.bucket(BucketPending)
				return b.Put(key8(5), []byte{0xff})
			},
			fn: func(tx *Tx) error {
				_, bad, err := tx.LoadPending()
				if err != nil {
					return err
				}
				return tx.Quarantine(bad...)
			},
			want: func() []change { return nil },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, rec, id := capStore(t)
			if tc.prep != nil {
				if err := ts.Update(tc.prep); err != nil {
					t.Fatal(err)
				}
			}
			rec.reset()
			if err := ts.Update(tc.fn); err != nil {
				t.Fatal(err)
			}
			want := tc.want()
			for i := range want {
				want[i].file = id
			}
			got := describe(t, rec.all())
			if !slices.Equal(got, want) {
				t.Fatalf("changes\n got %+v\nwant %+v", got, want)
			}
			// Each put's value is the stored record.
			ts.View(func(tx *Tx) error {
				for _, c := range rec.all() {
					if c.Value == nil {
						continue
					}
					if _, err := decodeRecord(c.Value); err != nil {
						t.Errorf("sent value: %v", err)
					}
				}
				return nil
			})
		})
	}
}

// TestCaptureValueIsStored checks that a put's Value is the stored bytes.
func TestCaptureValueIsStored(t *testing.T) {
	ts, rec, _ := capStore(t)
	if _, err := ts.savePending(clRecord(1, 3)); err != nil {
		t.Fatal(err)
	}
	cs := rec.all()
	if len(cs) != 1 || cs[0].Partition != 3 {
		t.Fatalf("changes %+v", cs)
	}
	ts.View(func(tx *Tx) error {
		b, _ := tx.bucket(BucketPending)
		if !bytes.Equal(b.Get(key8(1)), cs[0].Value) {
			t.Error("sent value is not the stored one")
		}
		return nil
	})
}

func TestBatchGroupOneSend(t *testing.T) {
	ts, rec, _ := capStore(t)
	// Hold the leader's transaction so that the others queue behind it.
	release := make(chan struct{})
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ts.Batch(func(tx *Tx) error {
			close(started)
			<-release
			_, err := tx.SavePending(clRecord(0, 0))
			return err
		})
	}()
	<-started
	const n = 5
	var queued sync.WaitGroup
	for i := range n {
		wg.Add(1)
		queued.Add(1)
		go func() {
			defer wg.Done()
			queued.Done()
			if err := ts.Batch(func(tx *Tx) error { _, err := tx.SaveDead(clRecord(i+1, 0)); return err }); err != nil {
				t.Error(err)
			}
		}()
	}
	queued.Wait()
	for { // until every call is queued
		ts.group.mu.Lock()
		q := len(ts.group.queue)
		ts.group.mu.Unlock()
		if q == n {
			break
		}
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.sends) != 2 || len(rec.sends[1]) != n {
		t.Fatalf("sends %d (sizes %v), want the leader's then one of %d", len(rec.sends), sizes(rec.sends), n)
	}
}

func sizes(s [][]Change) []int {
	var out []int
	for _, c := range s {
		out = append(out, len(c))
	}
	return out
}

// TestSendOrderIsCommitOrder: concurrent Updates and Batches, each saving
// one pending record; the keys are given in commit order, so the sends
// must come in key order.
func TestSendOrderIsCommitOrder(t *testing.T) {
	ts, rec, _ := capStore(t)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			fn := func(tx *Tx) error { _, err := tx.SavePending(clRecord(i, 0)); return err }
			var err error
			if i%2 == 0 {
				err = ts.Update(fn)
			} else {
				err = ts.Batch(fn)
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var last []byte
	all := rec.all()
	if len(all) != 40 {
		t.Fatalf("%d changes, want 40", len(all))
	}
	for _, c := range all {
		ck, _ := ParseChangelogKey(c.Key)
		if bytes.Compare(ck.Local, last) <= 0 {
			t.Fatalf("key %x sent after %x", ck.Local, last)
		}
		last = ck.Local
	}
}

func TestWaitErrorRecordsUnsent(t *testing.T) {
	ts, rec, id := capStore(t)
	if _, err := ts.savePending(clRecord(1, 0), clRecord(2, 0)); err != nil {
		t.Fatal(err)
	}
	rec.waitErr = errors.New("broker down")
	err := ts.Update(func(tx *Tx) error {
		if err := tx.DeletePending(1); err != nil {
			return err
		}
		return tx.PutPending(2, clRecord(3, 0))
	})
	var ce *ChangelogError
	if !errors.As(err, &ce) || !errors.Is(err, ErrChangelog) || !errors.Is(err, rec.waitErr) {
		t.Fatalf("err %v, want a *ChangelogError wrapping ErrChangelog and the cause", err)
	}
	if want := "saved locally, not in the changelog"; !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Errorf("err %q lacks %q", err, want)
	}
	// Committed locally.
	entries, _, _ := ts.loadPending()
	if len(entries) != 1 || entries[0].Key != 2 {
		t.Fatalf("pending %+v", entries)
	}
	// Batch callers get it too.
	if err := ts.Batch(func(tx *Tx) error { _, err := tx.SaveDead(clRecord(4, 0)); return err }); !errors.As(err, &ce) {
		t.Fatalf("Batch: %v", err)
	}
	rec.waitErr = nil
	rec.reset()
	n, err := ts.ResendUnsent()
	if err != nil || n != 3 {
		t.Fatalf("ResendUnsent = %d, %v; want 3", n, err)
	}
	got := describe(t, rec.all())
	want := []change{
		{BucketDead, id, string(key8(1)), false},
		{BucketPending, id, string(key8(1)), true},
		{BucketPending, id, string(key8(2)), false},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("resent\n got %+v\nwant %+v", got, want)
	}
	rec.reset()
	if n, err := ts.ResendUnsent(); n != 0 || err != nil {
		t.Fatalf("second ResendUnsent = %d, %v", n, err)
	}
}

func TestUpdateLocalAndResend(t *testing.T) {
	ts, rec, id := capStore(t)
	err := ts.UpdateLocal(func(tx *Tx) error {
		_, err := tx.SavePending(clRecord(1, 0), clRecord(2, 0), clRecord(3, 0))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.all()) != 0 {
		t.Fatal("UpdateLocal sent")
	}
	// Record 2 deleted locally too; record 3 deleted with capture and a
	// successful send: its put is skipped.
	if err := ts.UpdateLocal(func(tx *Tx) error { return tx.DeletePending(2) }); err != nil {
		t.Fatal(err)
	}
	if err := ts.deletePending(3); err != nil {
		t.Fatal(err)
	}
	rec.reset()
	n, err := ts.ResendUnsent()
	if err != nil || n != 2 {
		t.Fatalf("ResendUnsent = %d, %v; want 2", n, err)
	}
	got := describe(t, rec.all())
	want := []change{{BucketPending, id, string(key8(1)), false}, {BucketPending, id, string(key8(2)), true}}
	if !slices.Equal(got, want) {
		t.Fatalf("resent\n got %+v\nwant %+v", got, want)
	}
	ts.View(func(tx *Tx) error {
		if n, _ := tx.count(bucketChangelogUnsent); n != 0 {
			t.Errorf("%d unsent left", n)
		}
		return nil
	})
	// Capture off: ResendUnsent fails.
	ts2 := setup(t)
	if _, err := ts2.ResendUnsent(); err == nil {
		t.Fatal("ResendUnsent without capture")
	}
}

// changesToRecords turns sent changes into changelog records at
// consecutive offsets from off.
func changesToRecords(cs []Change, off int64) []ChangelogRecord {
	out := make([]ChangelogRecord, len(cs))
	for i, c := range cs {
		out[i] = ChangelogRecord{Offset: off + int64(i), Key: c.Key, Value: c.Value, Writer: c.Writer}
	}
	return out
}

func applyAll(t *testing.T, s *Store, recs []ChangelogRecord, next int64) Applied {
	t.Helper()
	var out Applied
	err := s.UpdateLocal(func(tx *Tx) error {
		var err error
		out, err = tx.ApplyChangelog("in", 0, recs, next)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// dump returns every record bucket's values, keyed by bucket and a
// description of the record that does not depend on local keys
// (pending/dead: the value in order; delayed: key; parked: prefix + order).
func dump(t *testing.T, s *Store) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := s.View(func(tx *Tx) error {
		for _, name := range []string{BucketPending, BucketDead, BucketDelayed, BucketParked} {
			c, _ := tx.cursor(name)
			for k, v := c.First(); k != nil; k, v = c.Next() {
				r, _ := decodeRecord(v)
				d := fmt.Sprintf("%s/%s/%08x", r.Message.ID, r.Reason, crc32.ChecksumIEEE(v))
				switch name {
				case BucketDelayed:
					d = fmt.Sprintf("%x=%s", k, d)
				case BucketParked:
					d = fmt.Sprintf("%x=%s", k[:len(k)-8], d)
				}
				out[name] = append(out[name], d)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRoundTrip: file A writes; B applies A's changes and holds the same
// records; B's writes then tombstone A's keys, or re-key.
func TestRoundTrip(t *testing.T) {
	a, recA, idA := capStore(t)
	due := time.Unix(2e9, 0)
	err := a.Update(func(tx *Tx) error {
		if _, err := tx.SavePending(clRecord(1, 0), clRecord(2, 0)); err != nil {
			return err
		}
		if _, err := tx.SaveDead(clRecord(3, 0)); err != nil {
			return err
		}
		if _, err := tx.SaveDelayed(Delayed{Due: due, Record: clRecord(4, 0)}); err != nil {
			return err
		}
		if err := tx.Park("orders", []byte("k"), clRecord(5, 0), clRecord(6, 0)); err != nil {
			return err
		}
		return tx.DeletePending(2)
	})
	if err != nil {
		t.Fatal(err)
	}
	b, recB, idB := capStore(t)
	// B has a record of its own first: restored ones go behind it.
	if _, err := b.savePending(clRecord(9, 0)); err != nil {
		t.Fatal(err)
	}
	recB.reset()
	got := applyAll(t, b.Store, changesToRecords(recA.all(), 0), 100)
	if len(got.Bad) != 0 || got.Deleted != 0 || !slices.Equal(got.Pending, []uint64{2}) || !slices.Equal(got.Dead, []uint64{1}) || len(got.Delayed) != 1 || len(got.Parked) != 2 {
		t.Fatalf("applied %+v", got)
	}
	if len(recB.all()) != 0 {
		t.Fatal("ApplyChangelog was captured")
	}
	da, db := dump(t, a.Store), dump(t, b.Store)
	if db[BucketPending] = db[BucketPending][1:]; fmt.Sprint(da) != fmt.Sprint(db) {
		t.Fatalf("B holds\n%v\nA holds\n%v", db, da)
	}
	// Restored delayed record is indexed.
	b.View(func(tx *Tx) error {
		if _, ok, _ := tx.DelayedKeyOf(clRecord(4, 0).Message.ID); !ok {
			t.Error("restored delayed record not indexed")
		}
		next, ok, _ := tx.ChangelogCheckpoint("in", 0)
		if !ok || next != 100 {
			t.Errorf("checkpoint %d %v", next, ok)
		}
		cps, _ := tx.Checkpoints()
		if cps["in"][0] != 100 || len(cps) != 1 {
			t.Errorf("Checkpoints %v", cps)
		}
		return nil
	})
	// B deletes the restored pending record: a tombstone of A's key.
	// B replaces the dead letter: a put under A's key, the record's
	// identity, saying B wrote it.
	err = b.Update(func(tx *Tx) error {
		if err := tx.DeletePending(2); err != nil {
			return err
		}
		return tx.PutDead(1, clRecord(7, 0))
	})
	if err != nil {
		t.Fatal(err)
	}
	gotC := describe(t, recB.all())
	want := []change{
		{BucketPending, idA, string(key8(1)), true},
		{BucketDead, idA, string(key8(1)), false},
	}
	if !slices.Equal(gotC, want) {
		t.Fatalf("B's changes\n got %+v\nwant %+v", gotC, want)
	}
	for _, c := range recB.all() {
		if !bytes.Equal(c.Writer, idB[:]) {
			t.Fatalf("change %x: writer %x, want B's %x", c.Key, c.Writer, idB)
		}
	}
	// The updated dead letter keeps its mapping: B reading its own put
	// back changes nothing, A's late tombstone of the key (A finished or
	// moved the message) deletes it.
	put := recB.all()[1]
	if got := applyAll(t, b.Store, []ChangelogRecord{{Offset: 150, Key: put.Key, Value: put.Value, Writer: put.Writer}}, 151); got.Deleted != 0 || len(got.Dead) != 0 {
		t.Fatalf("B's own put applied: %+v", got)
	}
	if r, ok, _ := b.getDead(1); !ok || r.Message.ID != clRecord(7, 0).Message.ID {
		t.Fatal("updated dead letter lost")
	}
	recs := []ChangelogRecord{{Offset: 200, Key: recA.all()[2].Key}}
	if got := applyAll(t, b.Store, recs, 201); got.Deleted != 1 {
		t.Fatalf("late tombstone deleted %d", got.Deleted)
	}
	if _, ok, _ := b.getDead(1); ok {
		t.Fatal("the dead letter A's tombstone names is still here")
	}
	// A tombstone of a mapped key deletes the restored record.
	delayedKeyA := recA.all()[3].Key
	got = applyAll(t, b.Store, []ChangelogRecord{{Offset: 300, Key: delayedKeyA}}, 301)
	if got.Deleted != 1 {
		t.Fatalf("mapped tombstone deleted %d", got.Deleted)
	}
	b.View(func(tx *Tx) error {
		if _, ok, _ := tx.DelayedKeyOf(clRecord(4, 0).Message.ID); ok {
			t.Error("deleted delayed record still indexed")
		}
		return nil
	})
}

func TestApplyOwnKeys(t *testing.T) {
	ts, rec, _ := capStore(t)
	if _, err := ts.savePending(clRecord(1, 0), clRecord(2, 0)); err != nil {
		t.Fatal(err)
	}
	if err := ts.deletePending(2); err != nil {
		t.Fatal(err)
	}
	cs := rec.all() // put 1, put 2, tombstone 2
	// Own put of a deleted record: not resurrected. Own put of an
	// existing one: ignored. Own tombstone: deletes.
	got := applyAll(t, ts.Store, changesToRecords(cs[:2], 0), 2)
	if got.Deleted != 0 || len(got.Pending) != 0 {
		t.Fatalf("own puts applied: %+v", got)
	}
	if n, _ := ts.count(BucketPending); n != 1 {
		t.Fatalf("%d pending, want 1", n)
	}
	tomb := ChangelogRecord{Offset: 5, Key: cs[0].Key}
	if got := applyAll(t, ts.Store, []ChangelogRecord{tomb}, 6); got.Deleted != 1 {
		t.Fatalf("own tombstone: %+v", got)
	}
	if n, _ := ts.count(BucketPending); n != 0 {
		t.Fatalf("%d pending, want 0", n)
	}
}

func TestApplyParkedOrder(t *testing.T) {
	a, recA, _ := capStore(t)
	c, recC, _ := capStore(t)
	if err := a.park("orders", []byte("k"), clRecord(1, 0), clRecord(2, 0), clRecord(3, 0)); err != nil {
		t.Fatal(err)
	}
	if err := c.park("orders", []byte("k"), clRecord(4, 0)); err != nil {
		t.Fatal(err)
	}
	csA, csC := recA.all(), recC.all()
	// Offsets out of park order for A (3 before 1, 2), C's record between.
	recs := []ChangelogRecord{
		{Offset: 0, Key: csA[2].Key, Value: csA[2].Value},
		{Offset: 1, Key: csC[0].Key, Value: csC[0].Value},
		{Offset: 2, Key: csA[0].Key, Value: csA[0].Value},
		{Offset: 3, Key: csA[1].Key, Value: csA[1].Value},
	}
	b := setup(t)
	if err := b.park("orders", []byte("k"), clRecord(0, 0)); err != nil {
		t.Fatal(err)
	}
	applyAll(t, b.Store, recs, 4)
	parked, err := b.parked("orders", []byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range parked {
		ids = append(ids, p.Record.Message.ID)
	}
	want := []string{clRecord(0, 0).Message.ID, clRecord(1, 0).Message.ID, clRecord(2, 0).Message.ID, clRecord(3, 0).Message.ID, clRecord(4, 0).Message.ID}
	if !slices.Equal(ids, want) {
		t.Fatalf("park order\n got %v\nwant %v", ids, want)
	}
}

// TestApplyDelayedIDCollision: a restored delayed record meets a local
// one of its ID. The one saved first stays, the other is deleted and
// tombstoned in the changelog; a local record whose message is running
// or done (handed over) gives way to a schedule saved after it only.
func TestApplyDelayedIDCollision(t *testing.T) {
	early, late := time.Unix(1e9, 0), time.Unix(1e9+4, 0)
	for _, tc := range []struct {
		name               string
		localSaved, aSaved time.Time
		handed             bool
		wantA              bool // A's record stays, the local one goes
	}{
		{"local first", early, late, false, false},
		{"restored first", late, early, false, true},
		{"handed, restored later", early, late, true, true},
		{"handed, restored earlier", late, early, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, recA, idA := capStore(t)
			r := clRecord(1, 0)
			r.SavedAt = tc.aSaved
			if _, err := a.saveDelayed(Delayed{Due: time.Unix(2e9, 0), Record: r}); err != nil {
				t.Fatal(err)
			}
			b, recB, idB := capStore(t)
			local := r
			local.Reason, local.SavedAt = "local", tc.localSaved
			if _, err := b.saveDelayed(Delayed{Due: time.Unix(2e9+4, 0), Record: local}); err != nil {
				t.Fatal(err)
			}
			localKey := recB.all()[0].Key
			recB.reset()
			b.SetDelayedHandedOver(func(DelayedKey) bool { return tc.handed })
			var got Applied
			err := b.Update(func(tx *Tx) (err error) {
				got, err = tx.ApplyChangelog("in", 0, changesToRecords(recA.all(), 0), 1)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			page, err := b.listDelayed(nil, 0)
			if err != nil || len(page) != 1 {
				t.Fatalf("delayed %+v, %v; want one", page, err)
			}
			wantReason, wantDue, wantTomb := "local", time.Unix(2e9+4, 0), change{BucketDelayed, idA, "", true}
			wantTomb.local = string(recA.all()[0].Key[changelogKeyHeader:])
			if tc.wantA {
				wantReason, wantDue = r.Reason, time.Unix(2e9, 0)
				wantTomb = change{BucketDelayed, idB, string(localKey[changelogKeyHeader:]), true}
			}
			if page[0].Record.Reason != wantReason || !page[0].Due.Equal(wantDue) {
				t.Fatalf("kept %q due %v, want %q due %v (applied %+v)", page[0].Record.Reason, page[0].Due, wantReason, wantDue, got)
			}
			if tc.wantA != (len(got.Delayed) == 1 && got.Deleted == 1) {
				t.Errorf("applied %+v", got)
			}
			cs := recB.all()
			if d := describe(t, cs); len(d) != 1 || d[0] != wantTomb {
				t.Fatalf("B's changes %+v, want the tombstone %+v", d, wantTomb)
			}
			if wantTomb.file == idA && !bytes.Equal(cs[0].Writer, idB[:]) {
				t.Errorf("tombstone of A's key: writer %x, want B's", cs[0].Writer)
			}
			b.View(func(tx *Tx) error {
				k, ok, _ := tx.DelayedKeyOf(r.Message.ID)
				if !ok || !bytes.Equal(k, page[0].Key) {
					t.Errorf("index %x, want %x", k, page[0].Key)
				}
				return nil
			})
			// A applying B's changes keeps the same one: every instance
			// converges.
			recA.reset()
			applyAll(t, a.Store, changesToRecords(cs, 10), 11)
			pa, err := a.listDelayed(nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantA != (len(pa) == 1) {
				t.Errorf("A holds %d delayed records after B's tombstone", len(pa))
			}
		})
	}
}

func TestApplyBadRecords(t *testing.T) {
	a, recA, _ := capStore(t)
	if _, err := a.savePending(clRecord(1, 0)); err != nil {
		t.Fatal(err)
	}
	good := recA.all()[0]
	badKey := append([]byte{2}, good.Key[1:]...)
	delayedWrongID := appendChangelogKey(nil, &[16]byte{9}, 'l', delayedKey(time.Unix(1, 0), "other"))
	recs := []ChangelogRecord{
		{Offset: 0, Key: badKey, Value: good.Value},
		{Offset: 1, Key: good.Key, Value: []byte{0xff}},
		{Offset: 2, Key: delayedWrongID, Value: good.Value},
		{Offset: 3, Key: nil, Value: nil},
	}
	b := setup(t)
	got := applyAll(t, b.Store, recs, 4)
	if len(got.Bad) != 4 {
		t.Fatalf("bad %v", got.Bad)
	}
	for _, de := range got.Bad {
		if !errors.Is(de, ErrCorrupt) {
			t.Errorf("%v does not wrap ErrCorrupt", de)
		}
	}
	if c, _ := b.counts(); c[BucketPending]+c[BucketDelayed] != 0 {
		t.Fatalf("counts %v", c)
	}
}

// TestApplyCompactionProperty: applying a random history of changes
// gives the same file as applying only each key's last record (what
// compaction leaves), and as applying it in several batches.
func TestApplyCompactionProperty(t *testing.T) {
	a, recA, _ := capStore(t)
	for round := range 30 {
		err := a.Update(func(tx *Tx) error {
			if _, err := tx.SavePending(clRecord(round, 0)); err != nil {
				return err
			}
			if round%3 == 1 {
				return tx.DeletePending(uint64(round))
			}
			if round%4 == 2 {
				return tx.PutPending(uint64(round-1), clRecord(100+round, 0))
			}
			if err := tx.Park("orders", []byte{byte(round % 3)}, clRecord(200+round, 0)); err != nil {
				return err
			}
			if round%5 == 0 {
				return tx.DeleteParked(ParkedKey(appendParkedKey(nil, "orders", []byte{byte(round % 3)}, uint64(round/2+1))))
			}
			_, err := tx.SaveDelayed(Delayed{Due: time.Unix(int64(round%4), 0), Record: clRecord(300+round%7, 0)})
			return err
		})
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	}
	full := changesToRecords(recA.all(), 0)
	last := map[string]int{}
	for i, r := range full {
		last[string(r.Key)] = i
	}
	var compacted []ChangelogRecord
	for i, r := range full {
		if last[string(r.Key)] == i {
			compacted = append(compacted, r)
		}
	}
	if len(compacted) == len(full) {
		t.Fatal("nothing to compact")
	}
	one, two := setup(t), setup(t)
	applyAll(t, one.Store, full, int64(len(full)))
	applyAll(t, two.Store, compacted, int64(len(full)))
	d1, d2 := dump(t, one.Store), dump(t, two.Store)
	if fmt.Sprint(d1) != fmt.Sprint(d2) {
		t.Fatalf("full history gives\n%v\ncompacted gives\n%v", d1, d2)
	}
	// And the same as A holds.
	if da := dump(t, a.Store); fmt.Sprint(da) != fmt.Sprint(d1) {
		t.Fatalf("restored\n%v\nA holds\n%v", d1, da)
	}
}

// TestChangelogBucketsOpenInOlderBuild: the changelog buckets and meta
// keys need no feature: a build that knows none (0.2.0's knownFeatures)
// accepts the file, and the file reopens.
func TestChangelogBucketsOpenInOlderBuild(t *testing.T) {
	ts, _, _ := capStore(t)
	if err := ts.UpdateLocal(func(tx *Tx) error { _, err := tx.SavePending(clRecord(1, 0)); return err }); err != nil {
		t.Fatal(err)
	}
	applyAll(t, ts.Store, nil, 7)
	err := ts.View(func(tx *Tx) error {
		_, features, err := tx.Format()
		if len(features) != 0 {
			t.Errorf("features %v", features)
		}
		_, err2 := checkMark(ts.path, tx.tx.Bucket([]byte(bucketMeta)), map[string]bool{})
		return errors.Join(err, err2)
	})
	if err != nil {
		t.Fatal(err)
	}
	ts.reopen(t)
	if _, err := Open(filepath.Join(t.TempDir(), "x.db"), Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestPutMetaRefusesChangelogKeys(t *testing.T) {
	ts := setup(t)
	for _, k := range []string{metaFileIDKey, "changelog/in/0"} {
		if err := ts.Update(func(tx *Tx) error { return tx.PutMeta(k, []byte{1}) }); err == nil {
			t.Errorf("PutMeta(%q) accepted", k)
		}
	}
}

// TestBatchWaitErrorReachesEveryCaller: every caller of a group whose
// wait failed gets the *ChangelogError, and every change is unsent.
func TestBatchWaitErrorReachesEveryCaller(t *testing.T) {
	ts, rec, _ := capStore(t)
	rec.waitErr = errors.New("broker down")
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			err := ts.Batch(func(tx *Tx) error { _, err := tx.SaveDead(clRecord(i, 0)); return err })
			var ce *ChangelogError
			if !errors.As(err, &ce) {
				t.Errorf("Batch: %v, want a *ChangelogError", err)
			}
		})
	}
	wg.Wait()
	if err := ts.View(func(tx *Tx) error {
		n, err := tx.count(bucketChangelogUnsent)
		if n != 20 {
			t.Errorf("%d unsent, want 20", n)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestUpdateRestoredKeepsIdentity: an in-place put of a restored record
// of each bucket is sent under the record's original key (its identity),
// saying this file wrote it, and tombstones nothing, every time.
func TestUpdateRestoredKeepsIdentity(t *testing.T) {
	a, recA, idA := capStore(t)
	due := time.Unix(2e9, 0)
	err := a.Update(func(tx *Tx) error {
		if _, err := tx.SavePending(clRecord(1, 0)); err != nil {
			return err
		}
		if _, err := tx.SaveDelayed(Delayed{Due: due, Record: clRecord(2, 0)}); err != nil {
			return err
		}
		return tx.Park("orders", []byte("k"), clRecord(3, 0))
	})
	if err != nil {
		t.Fatal(err)
	}
	b, recB, idB := capStore(t)
	got := applyAll(t, b.Store, changesToRecords(recA.all(), 0), 3)
	dk, pk := got.Delayed[0], got.Parked[0]
	for _, tc := range []struct {
		name string
		fn   func(tx *Tx) error
		code string
	}{
		{"pending", func(tx *Tx) error { return tx.PutPending(got.Pending[0], clRecord(1, 0)) }, BucketPending},
		{"delayed", func(tx *Tx) error { return tx.PutDelayed(dk, clRecord(2, 0)) }, BucketDelayed},
		{"parked", func(tx *Tx) error { return tx.PutParked(pk, clRecord(3, 0)) }, BucketParked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var aLocal string
			for _, c := range recA.all() {
				if ck, _ := ParseChangelogKey(c.Key); ck.Bucket == tc.code {
					aLocal = string(ck.Local)
				}
			}
			for round := range 2 {
				recB.reset()
				if err := b.Update(tc.fn); err != nil {
					t.Fatal(err)
				}
				want := []change{{tc.code, idA, aLocal, false}}
				if got := describe(t, recB.all()); !slices.Equal(got, want) {
					t.Fatalf("round %d\n got %+v\nwant %+v", round, got, want)
				}
				if w := recB.all()[0].Writer; !bytes.Equal(w, idB[:]) {
					t.Fatalf("round %d: writer %x, want B's %x", round, w, idB)
				}
			}
		})
	}
}

// TestBatchLocal: concurrent BatchLocal calls share transactions and act
// as UpdateLocal's: nothing is sent, every change is recorded unsent (and
// ResendUnsent sends it), and a call that fails leaves the others' writes
// in and its own out.
func TestBatchLocal(t *testing.T) {
	ts, rec, _ := capStore(t)
	errBad := errors.New("bad")
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- ts.BatchLocal(func(tx *Tx) error {
				if i == 5 {
					if _, err := tx.SavePending(clRecord(1000, 0)); err != nil {
						return err
					}
					return errBad
				}
				_, err := tx.SavePending(clRecord(i+1, 0))
				return err
			})
		}()
	}
	failed := 0
	for range n {
		if err := <-errs; errors.Is(err, errBad) {
			failed++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if failed != 1 {
		t.Fatalf("%d calls failed, want 1", failed)
	}
	if len(rec.all()) != 0 {
		t.Fatal("BatchLocal sent")
	}
	ts.View(func(tx *Tx) error {
		if c, _ := tx.count(bucketChangelogUnsent); c != n-1 {
			t.Errorf("%d unsent, want %d", c, n-1)
		}
		if c, _ := tx.count(BucketPending); c != n-1 {
			t.Errorf("%d pending, want %d: the failed call's write is in", c, n-1)
		}
		return nil
	})
	if sent, err := ts.ResendUnsent(); err != nil || sent != n-1 {
		t.Fatalf("ResendUnsent = %d, %v; want %d", sent, err, n-1)
	}
}
