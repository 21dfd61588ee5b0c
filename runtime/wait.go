package runtime

import (
	"context"
	"time"
)

// The bounded waits of the retry loops and the stop.

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// closedWithin waits up to d for ch to be closed; it reports whether it
// was.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// within calls f on a goroutine of its own and waits up to d for it to
// return; it reports whether it did. An f that did not is left running.
func within(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return closedWithin(done, d)
}
