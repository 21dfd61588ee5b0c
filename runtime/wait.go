package runtime

import (
	"context"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/wait"
)

// The bounded waits of the retry loops and the stop (package wait).

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool { return wait.Sleep(ctx, d) }

// closedWithin waits up to d for ch to be closed; it reports whether it
// was.
func closedWithin(ch <-chan struct{}, d time.Duration) bool { return wait.ClosedWithin(ch, d) }

// within calls f on a goroutine of its own and waits up to d for it to
// return; it reports whether it did. An f that did not is left running.
func within(d time.Duration, f func()) bool { return wait.Within(d, f) }
