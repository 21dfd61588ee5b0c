package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDamagedPage: a state file one of whose pages is overwritten (a
// torn write, a bad sector, a stray tool) makes Open or the reads and
// writes that reach the page return an error wrapping ErrDamaged naming
// the file, never a crash: bbolt asserts on such a page, or indexes out
// of its bounds, and the recovery at start reads every pending record in
// a goroutine of its own, where no caller could recover the panic.
func TestDamagedPage(t *testing.T) {
	damaged := 0
	defer func() {
		if damaged == 0 && !t.Failed() {
			t.Error("no damaged page was noticed: the test damaged nothing bbolt reads")
		}
		t.Logf("%d reads and writes found the file damaged", damaged)
	}()
	for page := 2; page < 24; page++ {
		for _, fill := range []byte{0x00, 0xff, 0x5a} {
			t.Run(fmt.Sprintf("page%d-%02x", page, fill), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "state.db")
				s, err := Open(path, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.savePending(records(300)...); err != nil {
					t.Fatal(err)
				}
				if _, err := s.saveDead(records(50)...); err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				const pageSize = 4096 // os.Getpagesize() on the test machines; bbolt's default
				if len(b) < (page+1)*pageSize {
					t.Skipf("file has %d pages", len(b)/pageSize)
				}
				for i := page * pageSize; i < (page+1)*pageSize; i++ {
					b[i] = fill
				}
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
				var errs []error
				if ro, err := Open(path, Options{ReadOnly: true}); err != nil {
					errs = append(errs, err)
				} else {
					_, _, err = ro.dead()
					errs = append(errs, err, ro.Close())
				}
				s, err = Open(path, Options{})
				if err != nil {
					errs = append(errs, err)
				} else {
					_, err = s.ScanPending(func([]Entry) bool { return true })
					errs = append(errs, err)
					_, _, err = s.dead()
					errs = append(errs, err)
					_, err = s.counts()
					errs = append(errs, err)
					_, err = s.savePending(records(10)...)
					errs = append(errs, err)
					errs = append(errs, s.Batch(func(tx *Tx) error { _, err := tx.SaveDead(records(3)...); return err }))
					errs = append(errs, s.Close())
				}
				for _, err := range errs {
					if err != nil && errors.Is(err, ErrDamaged) {
						damaged++
						if !strings.Contains(err.Error(), path) {
							t.Errorf("%v does not name the file", err)
						}
					}
				}
			})
		}
	}
}
