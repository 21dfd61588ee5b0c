package runtime

import (
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/snapshot"
)

// The state file's changelog bookkeeping as the changelog side (restore,
// follow, ownership, repartition) asks for it: each is one transaction,
// the only one its caller opens.

// fileID returns the file's changelog ID; ok is false while it has none.
func (f *stateFile) fileID() (id [16]byte, ok bool, err error) { return f.store.FileID() }

// hasCheckpoint reports whether the file keeps a changelog checkpoint of
// topic's partition p.
func (f *stateFile) hasCheckpoint(topic string, p int32) (known bool, err error) {
	_, known, err = f.store.Checkpoint(topic, p)
	return known, err
}

// setRoutedBy records, in the file alone, that p's changelog was read
// whole and its records moved by partition count n.
func (f *stateFile) setRoutedBy(p kclient.Partition, n int32) error {
	return f.store.SetRoutedBy(p.Topic, int32(p.Partition), n)
}

// routedBy returns the partition count by which p's changelog was last
// read whole here; 0 when never, or when the file cannot tell.
func (f *stateFile) routedBy(p kclient.Partition) int32 {
	return f.store.RoutedBy(p.Topic, int32(p.Partition))
}

// readApplied reads back, in one read, the records a follow applied:
// block is called with each dead letter and each delayed record waiting
// for its redelivery, and the pending ones are returned. Records gone or
// undecodable are skipped.
func (f *stateFile) readApplied(applied snapshot.Applied, block func(snapshot.Record)) ([]snapshot.Entry, error) {
	return f.store.ReadApplied(applied, func(rec *snapshot.Record) bool { return rec.Reason == reasonRedelivery }, block)
}

// eachApplied calls each, in one read, with the read of every pending,
// dead and delayed record applied holds, in that order; a failed read
// ends nothing.
func (f *stateFile) eachApplied(applied snapshot.Applied, each func(rec snapshot.Record, ok bool, err error)) {
	f.store.EachApplied(applied, each)
}
