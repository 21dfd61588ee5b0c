package runtime

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
)

// countDelayedReads returns a test logger that counts, from the
// scheduler's debug log, the records of the delayed bucket it read: those
// it handed over, the undecodable ones and, when one follows, the record
// it looked at for its due time only. That is all snapshot.State.DueDelayed
// reads (the snapshot tests prove it).
func countDelayedReads(t *testing.T) (*slog.Logger, *atomic.Uint64) {
	n := new(atomic.Uint64)
	return slog.New(delayedReads{testLogger(t).Handler(), n}), n
}

// delayedReads is the handler of countDelayedReads.
type delayedReads struct {
	slog.Handler
	n *atomic.Uint64
}

func (h delayedReads) Enabled(ctx context.Context, l slog.Level) bool {
	return l == slog.LevelDebug || h.Handler.Enabled(ctx, l)
}

func (h delayedReads) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "delayed messages read" {
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "due", "undecodable":
				h.n.Add(uint64(a.Value.Int64()))
			case "next":
				if !a.Value.Time().IsZero() {
					h.n.Add(1)
				}
			}
			return true
		})
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h delayedReads) WithAttrs(as []slog.Attr) slog.Handler {
	return delayedReads{h.Handler.WithAttrs(as), h.n}
}

func (h delayedReads) WithGroup(name string) slog.Handler {
	return delayedReads{h.Handler.WithGroup(name), h.n}
}
