package runtime

import (
	"github.com/handoff-go/handoff/snapshot"
)

// The state file's changelog reads the follow asks for besides what the
// state component's changelog side (snapshot.Changelog) answers: each is
// one transaction, the only one its caller opens.

// readApplied reads back, in one read, the records a follow applied:
// block is called with each dead letter and each delayed record waiting
// for its redelivery, and the pending ones are returned. Records gone or
// undecodable are skipped.
func (f *stateFile) readApplied(applied snapshot.Applied, block func(snapshot.Record)) ([]snapshot.Entry, error) {
	return f.store.ReadApplied(applied, func(rec *snapshot.Record) bool { return rec.Reason == reasonRedelivery }, block)
}
