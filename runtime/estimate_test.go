package runtime

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// countHandler counts the records logged with one message.
type countHandler struct {
	slog.Handler
	msg string
	n   *atomic.Int64
}

func (countHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h countHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return nil
}

// TestDrainWatch runs the drain-estimate watcher without a Runtime under
// a fake clock: a class over its drain timeout is warned about once, then
// at most every 30s while it stays over, and not while it is under.
func TestDrainWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var over atomic.Bool
		var warned atomic.Int64
		log := slog.New(countHandler{Handler: slog.DiscardHandler,
			msg: "queued work would not drain within DrainTimeout; a stop now would snapshot part of it", n: &warned})
		w := drainWatch{log: log, drainTimeout: time.Second, alive: &liveness{}, stats: func() []ClassStats {
			return []ClassStats{{Name: "a"}, {Name: "b", OverBudget: over.Load(), DrainEstimate: 5}}
		}}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { w.run(ctx) })
		time.Sleep(10 * time.Second)
		if n := warned.Load(); n != 0 {
			t.Fatalf("%d warnings while under the timeout", n)
		}
		over.Store(true)
		time.Sleep(65 * time.Second) // warnings at about 11s, 41s, 71s
		if n := warned.Load(); n != 3 {
			t.Errorf("%d warnings in 65s over the timeout, want 3", n)
		}
		cancel()
		wg.Wait()
	})
}
