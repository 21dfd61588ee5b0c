package snapshot

import (
	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// PutPause records in the file that class is paused, replacing its
// pause if it had one, in one write transaction: the service's next
// start comes back with the class paused. The class name is not
// checked.
func (s *State) PutPause(class string, p Pause) error {
	return s.st.Update(func(tx *store.Tx) error { return tx.PutPause(class, p) })
}

// DeletePause removes class's pause from the file, in one write
// transaction, and reports whether it had one.
func (s *State) DeletePause(class string) (bool, error) {
	var had bool
	err := s.st.Update(func(tx *store.Tx) (err error) { had, err = tx.DeletePause(class); return err })
	return had, err
}

// Delete deletes the records srcs name, in one write transaction: all
// of them or, on an error, none. A source with no record (deleted
// already) is not an error; a Kafka source (the zero Source) names none.
// No srcs is no transaction.
func (s *State) Delete(srcs ...Source) error {
	if len(srcs) == 0 {
		return nil
	}
	return s.st.Update(func(tx *store.Tx) error {
		for _, src := range srcs {
			if err := src.delete(tx); err != nil {
				return err
			}
		}
		return nil
	})
}
