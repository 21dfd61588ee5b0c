package runtime

import "github.com/handoff-go/handoff/snapshot"

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
