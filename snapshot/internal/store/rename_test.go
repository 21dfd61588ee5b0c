package store

import (
	"maps"
	"slices"
	"testing"
	"time"
)

// TestRenameClass: every record of the old class, in each bucket, takes
// the new name under its key (parked ones under the new class's key, in
// order); another class's records and undecodable values stay as they
// are; the pause moves; a second run changes nothing.
func TestRenameClass(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	rec := func(i int, class string) Record { r := fullRecord(i); r.Message.Class = class; return r }
	err := ts.Update(func(tx *Tx) error {
		if _, err := tx.SavePending(rec(1, "bookings"), rec(2, "users"), rec(3, "bookings")); err != nil {
			return err
		}
		if _, err := tx.SaveDead(rec(4, "bookings")); err != nil {
			return err
		}
		if _, err := tx.SaveDelayed(Delayed{Due: time.Unix(1e9, 0), Record: rec(5, "bookings")}); err != nil {
			return err
		}
		if err := tx.Park("bookings", []byte("k"), rec(6, "bookings"), rec(7, "bookings")); err != nil {
			return err
		}
		if err := tx.Park("users", []byte("k"), rec(8, "users")); err != nil {
			return err
		}
		if _, err := tx.putNew(BucketPending, [][]byte{{0xff, 1, 2}}, nil); err != nil {
			return err
		}
		return tx.PutPause("bookings", Pause{Reason: "migration", Since: time.Unix(1e9, 0)})
	})
	if err != nil {
		t.Fatal(err)
	}
	var counts map[string]int
	if err := ts.Update(func(tx *Tx) (err error) { counts, err = tx.RenameClass("bookings", "orders"); return err }); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{BucketPending: 2, BucketDead: 1, BucketDelayed: 1, BucketParked: 2, "pause": 1}
	if !maps.Equal(counts, want) {
		t.Fatalf("counts %v, want %v", counts, want)
	}
	ts.reopen(t)
	err = ts.View(func(tx *Tx) error {
		pending, bad, err := tx.LoadPending()
		if err != nil {
			return err
		}
		if len(bad) != 1 || len(pending) != 3 {
			t.Fatalf("%d pending, %d undecodable; want 3 and 1", len(pending), len(bad))
		}
		for i, want := range []string{"orders", "users", "orders"} {
			if c := pending[i].Record.Message.Class; c != want {
				t.Errorf("pending %d class %q, want %q", i, c, want)
			}
		}
		d, _, err := tx.GetDead(1)
		if err != nil || d.Message.Class != "orders" {
			t.Errorf("dead letter: %v, class %q", err, d.Message.Class)
		}
		l, err := tx.ListDelayed(DelayedKey{}, 10)
		if err != nil || len(l) != 1 || l[0].Record.Message.Class != "orders" {
			t.Errorf("delayed: %v, %+v", err, l)
		}
		parked, _, err := tx.Parked("orders", []byte("k"))
		if err != nil || len(parked) != 2 || parked[0].Record.Message.ID != rec(6, "").Message.ID ||
			parked[1].Record.Message.Class != "orders" {
			t.Errorf("parked under the new class: %v, %d", err, len(parked))
		}
		if old, _, _ := tx.Parked("bookings", []byte("k")); len(old) != 0 {
			t.Errorf("%d parked left under the old class", len(old))
		}
		if users, _, _ := tx.Parked("users", []byte("k")); len(users) != 1 {
			t.Errorf("another class's parked: %d", len(users))
		}
		if cs, err := tx.Classes(); err != nil || !slices.Contains(cs, "orders") {
			t.Errorf("classes the file has seen: %v %v, want orders among them", cs, err)
		}
		ps, err := tx.Pauses()
		if err != nil || ps["orders"].Reason != "migration" || len(ps) != 1 {
			t.Errorf("pauses %v %v", ps, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.Update(func(tx *Tx) (err error) { counts, err = tx.RenameClass("bookings", "orders"); return err }); err != nil {
		t.Fatal(err)
	}
	for b, n := range counts {
		if n != 0 {
			t.Errorf("second rename changed %d in %s", n, b)
		}
	}
	if err := ts.Update(func(tx *Tx) error { _, err := tx.RenameClass("orders", "orders"); return err }); err == nil {
		t.Error("a rename to the same name was accepted")
	}
}
