// Package wait holds the bounded waits of the runtime's retry loops and
// its stop, shared by the runtime and its Kafka clients.
package wait

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ClosedWithin waits up to d for ch to be closed; it reports whether it
// was.
func ClosedWithin(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// Within calls f on a goroutine of its own and waits up to d for it to
// return; it reports whether it did. An f that did not is left running.
func Within(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return ClosedWithin(done, d)
}
