package store

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/handoff-go/handoff"
)

func TestMeta(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.View(func(tx *Tx) error {
		if _, ok, err := tx.Meta(MetaGroup); ok || err != nil {
			t.Fatalf("fresh file has a group: %v %v", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(func(tx *Tx) error { return tx.PutMeta(MetaGroup, []byte("g1")) }); err != nil {
		t.Fatal(err)
	}
	err = s.Update(func(tx *Tx) error { return tx.PutMeta(metaFormatKey, []byte{9}) })
	if want := "snapshot: write meta/format in " + path + ": reserved key"; err == nil || err.Error() != want {
		t.Errorf("format key overwritten: %v, want %q", err, want)
	}
	err = s.View(func(tx *Tx) error { return tx.PutMeta(MetaInstance, []byte("i1")) })
	if err == nil || !strings.HasPrefix(err.Error(), "snapshot: write meta/instance in "+path+": ") {
		t.Errorf("PutMeta in a View: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.View(func(tx *Tx) error {
		v, ok, err := tx.Meta(MetaGroup)
		if err != nil || !ok || string(v) != "g1" {
			t.Errorf("group after reopen: %q %v %v", v, ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestClasses: AddClasses records names once each and says how many were
// new, Classes lists them in byte order across a reopen, an empty name is
// refused, and the pauses stored beside them are not taken for classes.
// TestEmpty: a file Open created is empty; a meta key or a record left
// behind (a record deleted leaves its format mark) makes it not.
func TestEmpty(t *testing.T) {
	empty := func(s *Store) bool {
		t.Helper()
		var e bool
		if err := s.View(func(tx *Tx) (err error) { e, err = tx.Empty(); return err }); err != nil {
			t.Fatal(err)
		}
		return e
	}
	s, err := Open(filepath.Join(t.TempDir(), "s.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !empty(s) {
		t.Fatal("a file Open created is not empty")
	}
	if err := s.Update(func(tx *Tx) error { return tx.PutMeta(MetaInstance, []byte{}) }); err != nil {
		t.Fatal(err)
	}
	if empty(s) {
		t.Error("a file with an (empty) instance is empty")
	}

	s2, err := Open(filepath.Join(t.TempDir(), "s2.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	err = s2.Update(func(tx *Tx) error {
		keys, err := tx.SavePending(Record{Message: handoff.Message{ID: "a", Class: "c"}})
		if err != nil {
			return err
		}
		return tx.DeletePending(keys...)
	})
	if err != nil {
		t.Fatal(err)
	}
	if empty(s2) {
		t.Error("a file whose only record was deleted is empty")
	}
}

func TestClasses(t *testing.T) {
	ts := setup(t)
	var added int
	if err := ts.Store.Update(func(tx *Tx) (err error) { added, err = tx.AddClasses("users", "orders"); return err }); err != nil || added != 2 {
		t.Fatalf("first AddClasses: %d new, %v", added, err)
	}
	if err := ts.Store.Update(func(tx *Tx) (err error) { added, err = tx.AddClasses("orders", "beats"); return err }); err != nil || added != 1 {
		t.Fatalf("second AddClasses: %d new, %v", added, err)
	}
	if err := ts.Store.Update(func(tx *Tx) error { return tx.PutPause("paused-only", Pause{Reason: "x"}) }); err != nil {
		t.Fatal(err)
	}
	ts.reopen(t)
	var got []string
	if err := ts.Store.View(func(tx *Tx) (err error) { got, err = tx.Classes(); return err }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "beats,orders,users" {
		t.Errorf("classes %q, want beats,orders,users", got)
	}
	err := ts.Store.Update(func(tx *Tx) (err error) { _, err = tx.AddClasses(""); return err })
	if err == nil || !strings.Contains(err.Error(), "empty class name") {
		t.Errorf("empty class name: %v", err)
	}
}
