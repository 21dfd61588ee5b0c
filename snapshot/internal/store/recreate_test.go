package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestRecreateDeletedFile: a state file deleted while open is noticed
// (FileGone), and Recreate puts everything written before and after the
// delete back at the path, where the next Open finds it; a file that
// replaced it is not overwritten.
func TestRecreateDeletedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	put := func(k string) {
		t.Helper()
		if err := st.Update(func(tx *Tx) error { return tx.PutMeta(k, []byte("v-"+k)) }); err != nil {
			t.Fatal(err)
		}
	}
	gone := func() bool {
		t.Helper()
		g, err := st.FileGone()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	put("before")
	if gone() {
		t.Fatal("an open file reported gone")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if !gone() {
		t.Fatal("a deleted file not reported gone")
	}
	put("while-gone")
	if err := st.Recreate(); err != nil {
		t.Fatal(err)
	}
	if gone() {
		t.Fatal("gone after Recreate")
	}
	put("after")

	// Replaced by another file: left alone.
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, []byte("not mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	if !gone() {
		t.Fatal("a replaced file not reported gone")
	}
	if err := st.Recreate(); !errors.Is(err, ErrFileReplaced) {
		t.Fatalf("Recreate over another file: %v, want ErrFileReplaced", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "not mine" {
		t.Fatal("Recreate overwrote another file")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".moved", path); err != nil {
		t.Fatal(err)
	}

	st2, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	for _, k := range []string{"before", "while-gone", "after"} {
		err := st2.View(func(tx *Tx) error {
			v, ok, err := tx.Meta(k)
			if err == nil && (!ok || string(v) != "v-"+k) {
				err = fmt.Errorf("meta %s = %q, %v", k, v, ok)
			}
			return err
		})
		if err != nil {
			t.Error(err)
		}
	}
}
