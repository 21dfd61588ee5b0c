package runtime

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
)

// TestHeartbeatInterval: Config.HeartbeatInterval is the member's
// heartbeat interval on both clients. At 100ms, 20 intervals between
// heartbeats take 2s; the bound, 4s, leaves room for a loaded machine
// and is under the default's 10s (500ms) and the old SessionTimeout/3's
// 40s.
func TestHeartbeatInterval(t *testing.T) {
	t.Parallel()
	classicOnly(t, "under the consumer protocol the broker sets the interval")
	b := setup(t, 2, "orders")
	cluster := b.broker.Cluster()
	var mu sync.Mutex
	var beats []time.Time
	cluster.ControlKey(int16(kmsg.Heartbeat), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if kreq.(*kmsg.HeartbeatRequest).Group == b.group {
			mu.Lock()
			beats = append(beats, time.Now())
			mu.Unlock()
		}
		return nil, nil, false
	})
	cfg := b.config(func(context.Context, *handoff.Message) error { return nil }, nil)
	cfg.HeartbeatInterval = 100 * time.Millisecond
	rt, wait := startNew(t, cfg)
	const n = 20
	waitFor(t, "21 heartbeats", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(beats) > n
	})
	mu.Lock()
	span := beats[n].Sub(beats[0])
	mu.Unlock()
	stopAndWait(t, rt, wait)
	if span > 4*time.Second {
		t.Fatalf("%d heartbeat intervals took %s, want about %s", n, span.Round(time.Millisecond), n*cfg.HeartbeatInterval)
	}
	t.Logf("%d heartbeat intervals took %s", n, span.Round(time.Millisecond))
}
