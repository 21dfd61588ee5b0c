package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestDrainWaitsForRetries: every message fails its first attempt and
// retries after a backoff of at most 50ms; the stop begins once all have
// failed once. A 2s drain has time for every retry, so nothing is saved:
// produced = handled = committed, snapshotted 0. Before the drain waited
// for due retries it ended at once and saved the messages waiting out
// their backoff.
func TestDrainWaitsForRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "retry")
	const n = 20
	produced := b.produce(n)
	var failed atomic.Int64
	allFailed := make(chan struct{})
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		if m.Attempt == 0 {
			if failed.Add(1) == n {
				close(allFailed)
			}
			return errors.New("flaky dependency")
		}
		b.record(m)
		return nil
	}, func(c *Class) {
		c.Retry = RetryPolicy{MaxAttempts: 5, InitialBackoff: 50 * time.Millisecond}
		// Twenty failures in a row would read as an outage and suspend
		// the class; this test is about messages' own retries.
		c.Suspend.After = -1
	})
	cfg.DrainTimeout = 2 * time.Second
	rt, wait := startNew(t, cfg)
	waitClosed(t, allFailed, func() string { return fmt.Sprintf("%d of %d messages failed once", failed.Load(), n) })
	rep := shutdownAndWait(t, rt, wait)
	unique, total := b.counts()
	committed := b.committed()
	t.Logf("produced %d, handled %d (%d unique), snapshotted %d, waiting at the hard stop %d, committed %d, drain %s",
		produced, total, unique, rep.Snapshotted, rep.Waiting, committed, rep.Drain)
	if unique != produced || rep.Snapshotted != 0 || rep.Waiting != 0 || committed != int64(produced) {
		t.Errorf("want every message handled during the drain and none saved")
	}
	if unique+rep.Snapshotted != produced {
		t.Errorf("handled %d + saved %d != produced %d", unique, rep.Snapshotted, produced)
	}
}
