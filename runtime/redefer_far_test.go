package runtime

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
)

// TestFarDeferredRecordReadAgain is TestDeferredRecordReadAgain with a
// HeaderDeliverAt past what the delayed bucket keeps to the nanosecond
// (the end of 2262; "9999-12-31T23:59:59Z" stands for "not before a
// decision" in many systems): its delayed record is due at the end of
// 2262, and the record read again must find it waiting rather than run
// at once.
func TestFarDeferredRecordReadAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	w := b.writer()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx,
		kafka.Message{Topic: "orders", Key: []byte("a"), Value: []byte("slow")},
		kafka.Message{Topic: "orders", Key: []byte("b"), Value: []byte("later"),
			Headers: []kafka.Header{{Key: HeaderDeliverAt, Value: []byte("9999-12-31T23:59:59Z")}}},
	); err != nil {
		t.Fatal(err)
	}
	devbroker.CloseWriter(w)

	var mu sync.Mutex
	later := 0
	first := true
	blocked := make(chan struct{})
	h := func(ctx context.Context, m *handoff.Message) error {
		switch string(m.Value) {
		case "slow":
			mu.Lock()
			block := first
			first = false
			mu.Unlock()
			if block {
				close(blocked)
				<-ctx.Done() // interrupted by the first run's hard stop
				return context.Cause(ctx)
			}
		case "later":
			mu.Lock()
			later++
			mu.Unlock()
		}
		return nil
	}
	mod := func(c *Class) { c.StopPolicy = StopRedeliver }
	cfg := b.config(h, mod)
	cfg.DrainTimeout = 50 * time.Millisecond
	cfg.HardStopGrace = time.Second
	rt, wait := startNew(t, cfg)
	<-blocked
	waitFor(t, "the deferral", func() bool { return rt.classes.byName["orders"].count(evDeferred) == 1 })
	rep := stopAndWait(t, rt, wait)
	if rep.GivenBack != 1 {
		t.Fatalf("given back %d, want 1 (slow)", rep.GivenBack)
	}

	rt2, wait2 := startNew(t, cfg)
	waitFor(t, "both records read again and committed", func() bool { return b.committed() == 2 })
	stopAndWait(t, rt2, wait2)
	mu.Lock()
	defer mu.Unlock()
	if later != 0 {
		t.Errorf("later ran %d times, want none: it is due at the end of 2262", later)
	}
}
