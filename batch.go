package handoff

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// BatchHandlerFunc handles a batch of messages of one class in one call,
// as a bulk insert does. ms holds between one and the class's MaxBatch
// messages, in the order their pool started them (in an ordered class, at
// most one message per key).
//
// Returning nil marks every message done. Returning a [*BatchError] (or
// an error wrapping one) fails only the messages it names, each with its
// own error, and marks the others done (a nil *BatchError names no
// failure: every message is done). Any other error fails every
// message of the batch with it: each is then retried, redelivered or made
// a dead letter by the class's policy, as if a single-message handler had
// returned it (so [Permanent] makes all of them dead letters at once).
//
// The context is cancelled, with a cause, when the runtime's hard stop
// begins. A message that then fails (the whole batch's error, or its
// entry in a BatchError) is not failed but interrupted: it is saved and
// handled again after the restart, and the attempt is not counted. A
// handler that stops part-way should therefore return a BatchError naming
// the messages it did not finish, so that only those run again.
//
// The handler may keep ms and its messages after it returns, for as long
// as it likes (a buffer flushed by a later call, say), as a single
// message's handler may keep its [Message]: ms is a slice of the call's
// own, and each message is the delivery's own copy, which the runtime
// never writes to again (it recycles only its internal records of Kafka
// messages, never the Messages it hands out). It must not write to them.
type BatchHandlerFunc func(ctx context.Context, ms []*Message) error

// BatchError is the error a [BatchHandlerFunc] returns when some of the
// batch's messages failed and the others are done. The zero value names
// no failure; use [BatchError.Fail] to add one and [BatchError.Err] to
// return it:
//
//	var be handoff.BatchError
//	for i, m := range ms {
//		if err := insert(ctx, m); err != nil {
//			be.Fail(i, err)
//		}
//	}
//	return be.Err()
type BatchError struct {
	// Failed maps the index in the batch of each failed message to its
	// error. A nil error, or an index outside the batch, fails nothing.
	// An entry may be [Permanent] to make that message a dead letter
	// without retries.
	Failed map[int]error
}

// Fail records that the batch's message i failed with err.
func (e *BatchError) Fail(i int, err error) {
	if e.Failed == nil {
		e.Failed = make(map[int]error)
	}
	e.Failed[i] = err
}

// Err returns e when it names a failure, and nil otherwise, so that a
// handler can end with return be.Err() without returning a non-nil
// interface holding an empty BatchError.
func (e *BatchError) Err() error {
	for _, err := range e.Failed {
		if err != nil {
			return e
		}
	}
	return nil
}

// Error lists the failed indexes, lowest first, with their errors (at
// most five of them).
func (e *BatchError) Error() string {
	idx := make([]int, 0, len(e.Failed))
	for i, err := range e.Failed {
		if err != nil {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	var b strings.Builder
	fmt.Fprintf(&b, "handoff: %d messages of the batch failed", len(idx))
	for n, i := range idx {
		if n == 5 {
			b.WriteString("; ...")
			break
		}
		b.WriteString("; [" + strconv.Itoa(i) + "]: " + e.Failed[i].Error())
	}
	return b.String()
}
