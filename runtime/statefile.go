package runtime

import (
	"fmt"
	"slices"

	"github.com/handoff-go/handoff/snapshot"
)

// Reads of the state file that the runtime makes in more than one place.
// A read transaction cannot write, so records found undecodable are moved
// to the quarantine bucket afterwards, in a write of their own.

// quarantine moves bad to the quarantine bucket (a no-op for none).
func (r *Runtime) quarantine(bad []*snapshot.DecodeError) error {
	if len(bad) == 0 {
		return nil
	}
	return r.store.Update(func(tx *snapshot.Tx) error { return tx.Quarantine(bad...) })
}

// parked returns the records parked under class's key, in park order.
func (r *Runtime) parked(class string, key []byte) ([]snapshot.ParkedEntry, error) {
	var entries []snapshot.ParkedEntry
	var bad []*snapshot.DecodeError
	err := r.store.View(func(tx *snapshot.Tx) (err error) { entries, bad, err = tx.Parked(class, key); return err })
	if err != nil {
		return nil, err
	}
	return entries, r.quarantine(bad)
}

// parkedKeys returns every parked (class, key) with its count.
func (r *Runtime) parkedKeys() ([]snapshot.ParkedCount, error) {
	var keys []snapshot.ParkedCount
	var bad []*snapshot.DecodeError
	err := r.store.View(func(tx *snapshot.Tx) (err error) { keys, bad, err = tx.ParkedKeys(); return err })
	if err != nil {
		return nil, err
	}
	return keys, r.quarantine(bad)
}

// recordClasses notes the configured classes in the state file, which
// keeps every class name it has seen (the CLI's pause refuses others).
// It writes only when a class is new to the file.
func recordClasses(store *snapshot.Store, classes []Class) error {
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = c.Name
	}
	var known []string
	if err := store.View(func(tx *snapshot.Tx) (err error) { known, err = tx.Classes(); return err }); err != nil {
		return fmt.Errorf("runtime: record classes in state file: %w", err)
	}
	if containsAll(known, names) {
		return nil
	}
	err := store.Update(func(tx *snapshot.Tx) error { _, err := tx.AddClasses(names...); return err })
	if err != nil {
		return fmt.Errorf("runtime: record classes in state file: %w", err)
	}
	return nil
}

// containsAll reports whether every name is in set.
func containsAll(set, names []string) bool {
	for _, n := range names {
		if !slices.Contains(set, n) {
			return false
		}
	}
	return true
}
