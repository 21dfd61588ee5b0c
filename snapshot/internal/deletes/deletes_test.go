package deletes

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot/internal/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDeletesBatch runs the batched deletes on a real state file under a
// fake clock: records of done messages queued between
// two ticks go in one transaction at the next tick, the scheduler is told
// which delayed ones went once it has committed, and a parked record
// queued here is left out of what its key's release may push.
func TestDeletesBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{LockTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		rec := func(id string) store.Record {
			return store.Record{Message: handoff.Message{ID: id, Class: "c", Key: []byte("k")}}
		}
		var pending []uint64
		var delayed []bool
		err = st.Update(func(tx *store.Tx) (err error) {
			if pending, err = tx.SavePending(rec("p1"), rec("p2"), rec("p3")); err != nil {
				return err
			}
			if delayed, err = tx.SaveDelayed(store.Delayed{Due: time.Now(), Record: rec("d1")}); err != nil || !delayed[0] {
				return err
			}
			return tx.Park("c", []byte("k"), rec("k1"), rec("k2"))
		})
		if err != nil {
			t.Fatal(err)
		}
		var dkey store.DelayedKey
		var parked []store.ParkedEntry
		err = st.View(func(tx *store.Tx) (err error) {
			if dkey, _, err = tx.DelayedKeyOf("d1"); err != nil {
				return err
			}
			parked, _, err = tx.Parked("c", []byte("k"))
			return err
		})
		if err != nil || len(parked) != 2 {
			t.Fatalf("parked %d, %v", len(parked), err)
		}

		var d Queue
		var beats atomic.Int64
		var mu sync.Mutex
		var batches []Records
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() {
			d.Run(ctx, func(r Records) error { return st.Update(r.Delete) }, slog.New(slog.DiscardHandler), func() { beats.Add(1) }, func(b Records) {
				mu.Lock()
				batches = append(batches, b)
				mu.Unlock()
			}, func(err error) { t.Errorf("delete failed: %v", err) })
		})
		d.Pending(pending[0])
		d.Pending(pending[1])
		d.Delayed(dkey)
		d.Parked(parked[0].Key)
		if kept := d.NotDone(append([]store.ParkedEntry(nil), parked...)); len(kept) != 1 || string(kept[0].Key) != string(parked[1].Key) {
			t.Errorf("a release may push %d parked records, want only the second", len(kept))
		}
		counts := func() map[string]int {
			var c map[string]int
			if err := st.View(func(tx *store.Tx) (err error) { c, err = tx.Counts(); return err }); err != nil {
				t.Fatal(err)
			}
			return c
		}
		if c := counts(); c[store.BucketPending] != 3 {
			t.Fatalf("deleted before the tick: %v", c)
		}
		time.Sleep(Interval)
		synctest.Wait()
		c := counts()
		if c[store.BucketPending] != 1 || c[store.BucketDelayed] != 0 || c[store.BucketParked] != 1 {
			t.Errorf("after one tick: %v; want 1 pending, 0 delayed, 1 parked", c)
		}
		mu.Lock()
		if len(batches) != 1 || len(batches[0].Delayed) != 1 || len(batches[0].Pending) != 2 || len(batches[0].Parked) != 1 {
			t.Errorf("batches %+v; want one of 2 pending, 1 delayed, 1 parked", batches)
		}
		mu.Unlock()
		time.Sleep(3 * Interval) // nothing queued: no transaction
		synctest.Wait()
		cancel()
		wg.Wait()
		if !d.Take().Empty() {
			t.Error("records left queued")
		}
		if len(batches) != 1 {
			t.Errorf("%d batches, want 1", len(batches))
		}
		if n := beats.Load(); n != 4 {
			t.Errorf("%d beats in 4 intervals, want 4", n)
		}
	})
}

// TestDeletesFlush: Flush deletes what is queued at once, without Run's
// tick, and tells deleted; a failed delete is returned and its records
// are queued again, before those queued since.
func TestDeletesFlush(t *testing.T) {
	var d Queue
	d.Pending(1)
	d.Delayed(store.DelayedKey("d1"))
	var got []Records
	deleted := func(r Records) { got = append(got, r) }
	if err := d.Flush(func(Records) error { return nil }, deleted); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Pending) != 1 || len(got[0].Delayed) != 1 || !d.Take().Empty() {
		t.Fatalf("flushed %+v", got)
	}

	d.Pending(2)
	failed := errors.New("disk full")
	if err := d.Flush(func(Records) error { return failed }, deleted); !errors.Is(err, failed) {
		t.Fatalf("Flush: %v, want %v", err, failed)
	}
	d.Pending(3)
	if r := d.Take(); len(got) != 1 || len(r.Pending) != 2 || r.Pending[0] != 2 || r.Pending[1] != 3 {
		t.Fatalf("after a failed flush: deleted %d batches, queued %v", len(got), r.Pending)
	}
}
