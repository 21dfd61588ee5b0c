package snapshot

import (
	"path/filepath"
	"testing"
)

func TestMeta(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Meta(MetaGroup); ok || err != nil {
		t.Fatalf("fresh file has a group: %v %v", ok, err)
	}
	if err := s.PutMeta(MetaGroup, []byte("g1")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMeta(metaFormatKey, []byte{9}); err == nil {
		t.Error("format key overwritten")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v, ok, err := s.Meta(MetaGroup)
	if err != nil || !ok || string(v) != "g1" {
		t.Errorf("group after reopen: %q %v %v", v, ok, err)
	}
}
