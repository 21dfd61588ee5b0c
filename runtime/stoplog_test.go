package runtime

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestNormalStopLogsNoWarning: a run that handles what it was given and
// stops gracefully (with a message waiting out a short backoff at the
// stop, which the drain waits for) logs nothing at Warn or above.
func TestNormalStopLogsNoWarning(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "calm")
	produced := b.produce(30)
	log, rec := recordLogs(t)
	// Messages ending in 7 fail their first attempt; the stop begins once
	// every other message is handled and those have failed once.
	var n atomic.Int64
	all := make(chan struct{})
	seen := func() {
		if n.Add(1) == int64(produced) {
			close(all)
		}
	}
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		if m.Value[len(m.Value)-1] == '7' {
			if m.Attempt == 0 {
				seen()
				return errLogTest // retried after a short backoff
			}
			b.record(m)
			return nil
		}
		b.record(m)
		seen()
		return nil
	}, func(c *Class) { c.Retry = RetryPolicy{InitialBackoff: 50 * time.Millisecond} })
	cfg.Logger = log
	rt, wait := startNew(t, cfg)
	<-all
	rep := stopAndWait(t, rt, wait)
	if unique, _ := b.counts(); unique+rep.Snapshotted != produced {
		t.Errorf("handled %d + saved %d != produced %d", unique, rep.Snapshotted, produced)
	}
	for _, r := range rec.records(slog.LevelWarn) {
		t.Errorf("a normal stop logged %s %q %v", r.level, r.msg, r.attrs)
	}
}

var errLogTest = errorString("flaky")

type errorString string

func (e errorString) Error() string { return string(e) }
