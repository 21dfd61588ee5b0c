package snapshot

import (
	"path/filepath"
	"strings"
	"testing"
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
