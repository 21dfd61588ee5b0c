package store

import (
	"path/filepath"
	"testing"
	"time"
)

func TestPauses(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	since := time.Unix(1700000000, 123)
	err = st.Update(func(tx *Tx) error {
		if err := tx.PutPause("orders", Pause{Reason: "db migration", Since: since}); err != nil {
			return err
		}
		if err := tx.PutPause("users/eu", Pause{}); err != nil {
			return err
		}
		return tx.PutMeta("zzz", []byte("not a pause"))
	})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]Pause
	if err := st.View(func(tx *Tx) (err error) { got, err = tx.Pauses(); return err }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["orders"].Reason != "db migration" || !got["orders"].Since.Equal(since) ||
		!got["users/eu"].Since.IsZero() || got["users/eu"].Reason != "" {
		t.Fatalf("Pauses = %+v", got)
	}
	var had, again bool
	err = st.Update(func(tx *Tx) (err error) {
		if had, err = tx.DeletePause("orders"); err != nil {
			return err
		}
		again, err = tx.DeletePause("orders")
		return err
	})
	if err != nil || !had || again {
		t.Fatalf("DeletePause: had %v, again %v, err %v", had, again, err)
	}
	if err := st.View(func(tx *Tx) (err error) { got, err = tx.Pauses(); return err }); err != nil || len(got) != 1 {
		t.Fatalf("after delete: %+v %v", got, err)
	}
	if err := st.Update(func(tx *Tx) error { return tx.PutPause("", Pause{}) }); err == nil {
		t.Fatal("PutPause of an empty class name succeeded")
	}
}

func FuzzDecodePause(f *testing.F) {
	f.Add(encodePause(Pause{Reason: "x", Since: time.Unix(5, 0)}))
	f.Add([]byte{1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodePause(b)
		if err != nil {
			return
		}
		q, err := decodePause(encodePause(p))
		if err != nil || q.Reason != p.Reason || !q.Since.Equal(p.Since) {
			t.Fatalf("round trip of %x: %+v -> %+v, %v", b, p, q, err)
		}
	})
}
