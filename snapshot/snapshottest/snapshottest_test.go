package snapshottest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// fatalTB records what a helper fails with instead of ending the test,
// so that a test can check that a helper fails.
type fatalTB struct {
	testing.TB
	failed []string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.failed = append(f.failed, fmt.Sprintf(format, args...))
}

func rec(id, class, key string) snapshot.Record {
	return snapshot.Record{Message: handoff.Message{ID: id, Class: class, Key: []byte(key), Value: []byte("v-" + id)}, Reason: "unstarted"}
}

// TestSeedAndRead: what the Seed functions write is what the readers
// return, in order, and what Counts counts.
func TestSeedAndRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	SeedPending(t, path, rec("p1", "orders", "a"), rec("p2", "orders", "b"))
	ids := SeedDead(t, path, rec("d1", "orders", "c"), rec("d2", "mail", ""))
	SeedDelayed(t, path, snapshot.Delayed{Due: due.Add(time.Minute), Record: rec("l2", "orders", "")},
		snapshot.Delayed{Due: due, Record: rec("l1", "orders", "")})
	SeedParked(t, path, "orders", []byte("c"), rec("k1", "orders", "c"), rec("k2", "orders", "c"))
	SeedGroup(t, path, "billing")

	ids2 := func(n int, id func(i int) string) string {
		var s []string
		for i := range n {
			s = append(s, id(i))
		}
		return strings.Join(s, ",")
	}
	if p := Pending(t, path); ids2(len(p), func(i int) string { return p[i].Record.Message.ID }) != "p1,p2" {
		t.Errorf("pending %+v, want p1, p2", p)
	}
	d := Dead(t, path)
	if ids2(len(d), func(i int) string { return d[i].Record.Message.ID }) != "d1,d2" || len(ids) != 2 || d[0].ID != ids[0] || d[1].ID != ids[1] {
		t.Errorf("dead %+v with IDs %v, want d1, d2 with the IDs SeedDead returned", d, ids)
	}
	if !ids[0].Local || ids[0].String() == ids[1].String() {
		t.Errorf("dead letter IDs %v of a file without a changelog: want distinct Local IDs", ids)
	}
	l := Delayed(t, path)
	if ids2(len(l), func(i int) string { return l[i].Record.Message.ID }) != "l1,l2" || !l[0].Due.Equal(due) {
		t.Errorf("delayed %+v, want l1 due %v, then l2", l, due)
	}
	k := Parked(t, path, "orders", []byte("c"))
	if ids2(len(k), func(i int) string { return k[i].Record.Message.ID }) != "k1,k2" {
		t.Errorf("parked %+v, want k1, k2", k)
	}
	if n := len(Parked(t, path, "orders", []byte("a"))); n != 0 {
		t.Errorf("%d parked behind a key with none", n)
	}
	if g, i := Owner(t, path); g != "billing" || i != "" {
		t.Errorf("owner %q %q, want group billing and no instance", g, i)
	}
	want := map[string]int{snapshot.BucketPending: 2, snapshot.BucketDead: 2, snapshot.BucketDelayed: 2, snapshot.BucketParked: 2, snapshot.BucketQuarantine: 0}
	c := Counts(t, path)
	for b, n := range want {
		if c[b] != n {
			t.Errorf("counts %v, want %v", c, want)
			break
		}
	}
	if len(Quarantined(t, path)) != 0 || len(Pauses(t, path)) != 0 {
		t.Errorf("quarantine or pauses in a file with none")
	}
}

// TestDamage: a damaged value is counted, fails the reader of its
// bucket, and the readers fail on a file that is not there rather than
// create it.
func TestDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	SeedPending(t, path, rec("p1", "orders", "a"))
	Damage(t, path, snapshot.BucketPending, SeqKey(7), []byte{0xff, 0x01})
	Damage(t, path, snapshot.BucketDelayed, DelayedKey(time.Now(), "bad"), []byte{0xff, 0x02})
	if c := Counts(t, path); c[snapshot.BucketPending] != 2 || c[snapshot.BucketDelayed] != 1 {
		t.Errorf("counts %v, want 2 pending and 1 delayed", c)
	}
	f := &fatalTB{TB: t}
	if p := Pending(f, path); len(f.failed) != 1 || len(p) != 1 {
		t.Errorf("Pending of a file with a damaged record: %d records, failures %q; want the good one and one failure", len(p), f.failed)
	}
	f = &fatalTB{TB: t}
	if Delayed(f, path); len(f.failed) != 1 {
		t.Errorf("Delayed of a file with a damaged record: failures %q, want one", f.failed)
	}
	f = &fatalTB{TB: t}
	Damage(f, filepath.Join(t.TempDir(), "none.db"), snapshot.BucketPending, SeqKey(1), nil)
	missing := filepath.Join(t.TempDir(), "missing.db")
	Counts(f, missing)
	if len(f.failed) != 2 {
		t.Errorf("Damage of a non-state file and Counts of a missing one: failures %q, want two", f.failed)
	}
	if _, err := store.Open(missing, store.Options{ReadOnly: true}); err == nil {
		t.Errorf("Counts created %s", missing)
	}
}

// TestParseChangelog: the changes a store sends to its changelog parse
// back to their bucket, a delayed record's message ID (a tombstone's
// too) and the record; an owner marker parses as one.
func TestParseChangelog(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var changes []store.Change
	err = st.SetChangelog(store.Changelog{
		Route: func(*store.Record) (string, int32, bool) { return "orders", 0, true },
		Send:  func(c []store.Change) func() error { changes = append(changes, c...); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Update(func(tx *store.Tx) error {
		if _, err := tx.SaveDelayed(snapshot.Delayed{Due: time.Now(), Record: rec("l1", "orders", "")}); err != nil {
			return err
		}
		_, err := tx.SaveDead(rec("d1", "orders", ""))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Update(func(tx *store.Tx) error {
		key, ok, err := tx.DelayedKeyOf("l1")
		if err != nil || !ok {
			return fmt.Errorf("l1's delayed key: %v %v", ok, err)
		}
		return tx.DeleteDelayed(key)
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		e, err := ParseChangelog(c.Key, c.Value)
		if err != nil {
			t.Fatalf("change %x: %v", c.Key, err)
		}
		s := e.Bucket + " " + e.DelayedID
		if e.Record != nil {
			s += " " + e.Record.Message.ID
		}
		got = append(got, s)
	}
	if want := "delayed l1 l1|dead  d1|delayed l1"; strings.Join(got, "|") != want {
		t.Errorf("changes parsed as %q, want %q", strings.Join(got, "|"), want)
	}
	k, v := store.OwnerMarker([16]byte{1})
	if e, err := ParseChangelog(k, v); err != nil || !e.Owner || e.Bucket != "" {
		t.Errorf("owner marker parsed as %+v, %v", e, err)
	}
	if _, err := ParseChangelog([]byte("nope"), []byte("x")); err == nil {
		t.Error("a key that is no changelog key parsed")
	}
}
