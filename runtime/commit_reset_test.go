package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
)

// TestCommitAfterConnectionReset: the broker closes the connection a
// generation commits through (a connection reset), once. kafka-go commits
// through one connection per generation and never reconnects it, so every
// later commit of the generation failed, the generation's end failed to
// commit too, and the next generation read again from the last commit that
// got through: messages handled twice. The runtime retries a failed commit
// on a fresh connection fenced by the generation: every message is handled
// once and committed. Issue 11, item 5.
func TestCommitAfterConnectionReset(t *testing.T) {
	t.Parallel()
	b := setup(t, 3, "orders")
	var resets atomic.Int64
	b.broker.Cluster().ControlKey(int16(kmsg.OffsetCommit), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.OffsetCommitRequest)
		if req.Group != b.group || req.Generation < 0 {
			b.broker.Cluster().KeepControl()
			return nil, nil, false
		}
		resets.Add(1)
		return nil, errors.New("test: connection reset"), true // closes the connection
	})
	const first, second = 200, 200
	var handled atomic.Int64
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		b.record(m)
		handled.Add(1)
		return nil
	}, nil)
	cfg.CommitInterval = 50 * time.Millisecond
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	b.produce(first)
	waitFor(t, "first batch handled", func() bool { return handled.Load() >= first })
	waitFor(t, "the reset", func() bool { return resets.Load() == 1 })
	b.produce(second)
	// Every message handled and committed, with no restart in between.
	waitFor(t, "everything committed", func() bool { return b.committed() == first+second })
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	unique, total := b.counts()
	if unique != first+second || total != unique {
		t.Fatalf("handled %d messages %d times; want %d once each", unique, total, first+second)
	}
}
