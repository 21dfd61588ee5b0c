package store

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	berrors "go.etcd.io/bbolt/errors"
)

// TestUpdateIsAtomic writes to every bucket in one Update whose fn then
// fails, and checks that nothing was written and the error came back
// unchanged.
func TestUpdateIsAtomic(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	pendingKeys, err := ts.savePending(records(2)...)
	if err != nil {
		t.Fatal(err)
	}
	deadKeys, err := ts.saveDead(records(2)...)
	if err != nil {
		t.Fatal(err)
	}
	before, err := ts.counts()
	if err != nil {
		t.Fatal(err)
	}

	errStop := errors.New("stop here")
	err = ts.Update(func(tx *Tx) error {
		if _, err := tx.SavePending(records(3)...); err != nil {
			return err
		}
		if err := tx.DeletePending(pendingKeys...); err != nil {
			return err
		}
		if _, err := tx.SaveDead(records(1)...); err != nil {
			return err
		}
		if err := tx.PutDead(deadKeys[0], fullRecord(9)); err != nil {
			return err
		}
		if err := tx.DeleteDead(deadKeys[1]); err != nil {
			return err
		}
		if _, err := tx.SaveDelayed(Delayed{Due: time.Now(), Record: fullRecord(1)}); err != nil {
			return err
		}
		if err := tx.Park("orders", []byte("k"), records(2)...); err != nil {
			return err
		}
		return errStop
	})
	if err != errStop {
		t.Fatalf("Update = %v, want fn's error unchanged", err)
	}
	after, err := ts.counts()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(before, after) {
		t.Fatalf("counts %v after a failed Update, want %v", after, before)
	}
	r, ok, err := ts.getDead(deadKeys[0])
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	requireEqualRecord(t, r, records(1)[0])

	// Sequence numbers taken by the rolled back transaction are reused.
	if k, err := ts.savePending(records(1)...); err != nil || !slices.Equal(k, []uint64{3}) {
		t.Fatalf("SavePending after a failed Update = %v, %v; want [3]", k, err)
	}
}

// TestUpdateDeadLetterAndDeletePending is the runtime's use: a re-pushed
// message fails, its dead letter is saved and its pending record deleted
// in one transaction.
func TestUpdateDeadLetterAndDeletePending(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	recs := records(3)
	keys, err := ts.savePending(recs...)
	if err != nil {
		t.Fatal(err)
	}
	var deadKeys []uint64
	err = ts.Update(func(tx *Tx) error {
		var err error
		dead := recs[1]
		dead.Reason, dead.Err, dead.FirstFailed = "failed", "boom", time.Now()
		if deadKeys, err = tx.SaveDead(dead); err != nil {
			return err
		}
		return tx.DeletePending(keys[1])
	})
	if err != nil {
		t.Fatal(err)
	}
	ts.reopen(t)
	pending, _, err := ts.loadPending()
	if err != nil {
		t.Fatal(err)
	}
	requireEntries(t, pending, []uint64{keys[0], keys[2]}, []Record{recs[0], recs[2]})
	dead, _, err := ts.dead()
	if err != nil || len(dead) != 1 || dead[0].Key != deadKeys[0] || dead[0].Record.Err != "boom" || dead[0].Record.FirstFailed.IsZero() {
		t.Fatalf("Dead = %+v, %v", dead, err)
	}
}

func TestViewIsReadOnly(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	keys, err := ts.saveDead(records(1)...)
	if err != nil {
		t.Fatal(err)
	}
	err = ts.View(func(tx *Tx) error {
		r, ok, err := tx.GetDead(keys[0])
		if err != nil || !ok {
			t.Errorf("GetDead in View = %v, %v", ok, err)
		}
		requireEqualRecord(t, r, records(1)[0])
		if _, ok, err := tx.GetDead(keys[0] + 1); ok || err != nil {
			t.Errorf("GetDead of a missing key = %v, %v", ok, err)
		}
		_, err = tx.SaveDead(records(1)...)
		return err
	})
	if !errors.Is(err, berrors.ErrTxNotWritable) {
		t.Fatalf("SaveDead in View: %v, want ErrTxNotWritable", err)
	}
	for _, want := range []string{"snapshot: save 1 dead letters in " + ts.path, "put dead/0000000000000002"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestPutDead(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	keys, err := ts.saveDead(records(2)...)
	if err != nil {
		t.Fatal(err)
	}
	again := fullRecord(7)
	again.Message.Attempt = 9
	if err := ts.Update(func(tx *Tx) error { return tx.PutDead(keys[1], again) }); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := ts.getDead(keys[1]); err != nil || !ok {
		t.Fatal(ok, err)
	} else {
		requireEqualRecord(t, r, again)
	}

	// A discarded dead letter is not brought back.
	if err := ts.deleteDead(keys[0]); err != nil {
		t.Fatal(err)
	}
	err = ts.Update(func(tx *Tx) error { return tx.PutDead(keys[0], again) })
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "dead/0000000000000001") || !strings.Contains(err.Error(), ts.path) {
		t.Fatalf("PutDead of a discarded key: %v, want ErrNotFound naming dead/0000000000000001 and the file", err)
	}
	if _, ok, err := ts.getDead(keys[0]); ok || err != nil {
		t.Fatalf("GetDead after a refused PutDead = %v, %v", ok, err)
	}
}

// TestUpdateCommitErrorNamesFile closes the store and checks the error
// of Update, which comes from bbolt, not from fn.
func TestUpdateCommitErrorNamesFile(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	if err := ts.Store.Close(); err != nil {
		t.Fatal(err)
	}
	err := ts.Update(func(tx *Tx) error { return nil })
	if !errors.Is(err, berrors.ErrDatabaseNotOpen) || !strings.HasPrefix(err.Error(), "snapshot: update "+ts.path+": ") {
		t.Fatalf("Update on a closed store: %v", err)
	}
	err = ts.View(func(tx *Tx) error { return nil })
	if !errors.Is(err, berrors.ErrDatabaseNotOpen) || !strings.HasPrefix(err.Error(), "snapshot: read "+ts.path+": ") {
		t.Fatalf("View on a closed store: %v", err)
	}
}

// TestPutReplaces checks the Put methods of the other buckets: the record
// is replaced under its key, so it keeps its place; a missing key is
// ErrNotFound and leaves the transaction usable.
func TestPutReplaces(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	pk, err := ts.savePending(records(2)...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.saveDelayed(delayedAt("a", 0), delayedAt("b", time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := ts.park("orders", []byte("k"), parkRec("1", 1), parkRec("2", 2)); err != nil {
		t.Fatal(err)
	}
	delayed, err := ts.listDelayed(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	parked, err := ts.parked("orders", []byte("k"))
	if err != nil {
		t.Fatal(err)
	}

	newPending := fullRecord(5)
	newDelayed := delayed[0].Record
	newDelayed.Redeliveries, newDelayed.Message.Attempt = 1, 3
	newParked := parkRec("1", 9)
	newParked.Err = "still parked"
	err = ts.Update(func(tx *Tx) error {
		if err := tx.PutPending(pk[0], newPending); err != nil {
			return err
		}
		if err := tx.PutDelayed(delayed[0].Key, newDelayed); err != nil {
			return err
		}
		if err := tx.PutParked(parked[0].Key, newParked); err != nil {
			return err
		}
		// Missing keys: ErrNotFound, and the transaction goes on.
		for name, err := range map[string]error{
			"pending/0000000000000063":                                   tx.PutPending(99, newPending),
			"delayed/" + fmt.Sprintf("%x", []byte(delayedKey(t0, "zz"))): tx.PutDelayed(delayedKey(t0, "zz"), delayedAt("zz", 0).Record),
			"parked/class orders sequence 77":                            tx.PutParked(ParkedKey(appendParkedKey(nil, "orders", []byte("k"), 77)), newParked),
			"dead/0000000000000001":                                      tx.PutDead(1, newParked),
		} {
			if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), name) {
				t.Errorf("Put of missing %s: %v", name, err)
			}
		}
		// A delayed record keeps its key's ID.
		other := newDelayed
		other.Message.ID = "b"
		if err := tx.PutDelayed(delayed[0].Key, other); err == nil || !strings.Contains(err.Error(), `record ID "b" is not the key's`) {
			t.Errorf("PutDelayed with another ID: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	pending, _, err := ts.loadPending()
	if err != nil || len(pending) != 2 || pending[0].Key != pk[0] {
		t.Fatalf("LoadPending = %v, %v", entryKeys(pending), err)
	}
	requireEqualRecord(t, pending[0].Record, newPending)
	gotDelayed, err := ts.listDelayed(nil, 0)
	if err != nil || !slices.Equal(ids(gotDelayed), []string{"a", "b"}) {
		t.Fatalf("ListDelayed = %q, %v", ids(gotDelayed), err)
	}
	requireEqualRecord(t, gotDelayed[0].Record, newDelayed)
	gotParked, err := ts.parked("orders", []byte("k"))
	if err != nil || !slices.Equal(parkedIDs(gotParked), []string{"1", "2"}) {
		t.Fatalf("Parked = %q, %v", parkedIDs(gotParked), err)
	}
	requireEqualRecord(t, gotParked[0].Record, newParked)
}
