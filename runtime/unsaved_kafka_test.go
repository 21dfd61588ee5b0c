package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestKafkaMessageUnsavedDoesNotHoldRevoke: a fetched message whose
// dead-letter write failed stays unsettled (Kafka delivers it again to
// the partition's next owner) and nothing will settle it, so a
// revocation of its partition does not wait RevokeTimeout for it: it is
// counted abandoned, as a message the hard stop gives back is. Before, a
// second instance joining got its partition only once A had waited the
// whole RevokeTimeout (on kafka-go, whose rebalances revoke every
// partition; franz-go's cooperative one may leave that partition where
// it is), and so did every later rebalance until A restarted. Here B
// got its partition about 8 s after it joined before (A's revoke still
// waiting when the group went on without it, and A's final commit then
// failed), 1 to 2 s after; the bound is half of RevokeTimeout.
func TestKafkaMessageUnsavedDoesNotHoldRevoke(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	var handled atomic.Int64
	h := func(_ context.Context, m *handoff.Message) error {
		if string(m.Value) == "bad" {
			return handoff.Permanent(errors.New("cannot parse"))
		}
		handled.Add(1)
		return nil
	}
	cfg := b.config(h, nil)
	cfg.RevokeTimeout, cfg.RebalanceTimeout = 15*time.Second, 30*time.Second
	rtA, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int64
	rtA.state.beforeWrite = func(string, *item) error {
		failed.Add(1)
		return errDiskFull
	}
	waitA := start(t, rtA, context.Background())
	waitFor(t, "a ready", rtA.Ready)
	b.produceValues("orders", "k", "good", "bad")
	waitFor(t, "the good one handled and the bad one's dead-letter write failed", func() bool {
		return handled.Load() == 1 && failed.Load() > 0
	})
	began := time.Now()
	rtB, waitB := b.instance("b", cfg)
	waitFor(t, "b owning a partition", func() bool { return len(ownedPartitions(rtB)) > 0 })
	took := time.Since(began)
	t.Logf("b got a partition %s after it joined", took.Round(time.Millisecond))
	if took >= cfg.RevokeTimeout/2 {
		t.Errorf("b got a partition %s after it joined: a's revoke waited for the message whose dead-letter write failed (RevokeTimeout %s)",
			took.Round(time.Millisecond), cfg.RevokeTimeout)
	}
	shutdownAndWait(t, rtB, waitB)
	stopAndWait(t, rtA, waitA)
}
