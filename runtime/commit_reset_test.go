package runtime

import (
	"context"
	"errors"
	"sync"
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
	rt, err := newRuntime(cfg)
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

// TestCommitResetsUnderLoad: the commit connection is reset every 500ms
// while messages flow for 6s. Every message is handled once and
// committed (before the fresh-connection retry, each reset made the
// generation re-read everything since its last good commit).
func TestCommitResetsUnderLoad(t *testing.T) {
	t.Parallel()
	b := setup(t, 3, "orders")
	var mu sync.Mutex
	lastReset := time.Now()
	var resets atomic.Int64
	b.broker.Cluster().ControlKey(int16(kmsg.OffsetCommit), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		b.broker.Cluster().KeepControl()
		req := kreq.(*kmsg.OffsetCommitRequest)
		mu.Lock()
		defer mu.Unlock()
		if req.Group != b.group || req.Generation < 0 || time.Since(lastReset) < 500*time.Millisecond {
			return nil, nil, false
		}
		lastReset = time.Now()
		resets.Add(1)
		return nil, errors.New("test: connection reset"), true
	})
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		time.Sleep(time.Millisecond) // simulated work: keeps a backlog
		b.record(m)
		return nil
	}, nil)
	cfg.CommitInterval = 50 * time.Millisecond
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	produced := 0
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); {
		produced += b.produce(100)
		time.Sleep(50 * time.Millisecond) // paces production: load shape
	}
	waitFor(t, "everything committed", func() bool { return b.committed() == int64(produced) })
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	unique, total := b.counts()
	t.Logf("produced %d, handled %d unique, %d duplicates, %d commit connections reset", produced, unique, total-unique, resets.Load())
	if unique != produced || total != unique {
		t.Fatalf("handled %d messages %d times; want %d once each", unique, total, produced)
	}
}
