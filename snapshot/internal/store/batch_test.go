package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/handoff-go/handoff"
)

// TestBatchGroupCommit: concurrent Batch calls all commit; one whose fn
// fails gets its error and writes nothing, the others are unaffected.
func TestBatchGroupCommit(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "s.db"), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	errBad := errors.New("bad")
	var wg sync.WaitGroup
	errs := make([]error, 200)
	for i := range 200 {
		wg.Go(func() {
			errs[i] = s.Batch(func(tx *Tx) error {
				if _, err := tx.SaveDead(Record{Message: handoff.Message{ID: fmt.Sprint(i)}}); err != nil {
					return err
				}
				if i%50 == 7 {
					return errBad // after a write: it must be rolled back
				}
				return nil
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if (i%50 == 7) != errors.Is(err, errBad) {
			t.Errorf("call %d: %v", i, err)
		}
	}
	dead, _, err := s.dead()
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 196 {
		t.Errorf("%d dead letters, want 196", len(dead))
	}
	seen := map[string]bool{}
	for _, d := range dead {
		if seen[d.Record.Message.ID] {
			t.Errorf("%s saved twice", d.Record.Message.ID)
		}
		seen[d.Record.Message.ID] = true
	}
}
