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

// TestDeferredRecordReadAgain: a Kafka record deferred by its
// HeaderDeliverAt is read again after a restart (a StopRedeliver stop
// gave back an earlier offset of its partition, so the commit stopped
// before it). Its delayed record is already waiting: the second read
// must not run it early, and it runs once, when due.
func TestDeferredRecordReadAgain(t *testing.T) {
	t.Parallel()
	due := time.Now().Add(4 * time.Second)
	runs := readDeferredAgain(t, due.Format(time.RFC3339Nano), func(_ *bundle, runs int) bool { return runs > 0 })
	if len(runs) != 1 {
		t.Fatalf("later ran %d times, want 1", len(runs))
	}
	if runs[0].Before(due) {
		t.Errorf("later ran %s before its deliver-at time", due.Sub(runs[0]))
	}
}

// TestFarDeferredRecordReadAgain is TestDeferredRecordReadAgain with a
// HeaderDeliverAt past what the delayed bucket keeps to the nanosecond
// (the end of 2262; "9999-12-31T23:59:59Z" stands for "not before a
// decision" in many systems): its delayed record is due at the end of
// 2262, and the record read again must find it waiting rather than run
// at once.
func TestFarDeferredRecordReadAgain(t *testing.T) {
	t.Parallel()
	runs := readDeferredAgain(t, "9999-12-31T23:59:59Z", func(b *bundle, _ int) bool { return b.committed() == 2 })
	if len(runs) != 0 {
		t.Errorf("later ran %d times, want none: it is due at the end of 2262", len(runs))
	}
}

// readDeferredAgain writes a record "slow" and a record "later" whose
// HeaderDeliverAt is deliverAt to a partition, runs a StopRedeliver
// class until "later" is deferred, hard-stops it while "slow" runs (so
// both are read again), and runs a second instance on the same file
// until done says so, given how many times "later" ran. It returns when
// "later" ran.
func readDeferredAgain(t *testing.T, deliverAt string, done func(b *bundle, runs int) bool) []time.Time {
	t.Helper()
	b := setup(t, 1, "orders")
	w := b.writer()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx,
		kafka.Message{Topic: "orders", Key: []byte("a"), Value: []byte("slow")},
		kafka.Message{Topic: "orders", Key: []byte("b"), Value: []byte("later"),
			Headers: []kafka.Header{{Key: HeaderDeliverAt, Value: []byte(deliverAt)}}},
	); err != nil {
		t.Fatal(err)
	}
	devbroker.CloseWriter(w)

	var mu sync.Mutex
	var runs []time.Time // of "later"
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
			runs = append(runs, time.Now())
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
	waitFor(t, "the second run", func() bool {
		mu.Lock()
		n := len(runs)
		mu.Unlock()
		return done(b, n)
	})
	stopAndWait(t, rt2, wait2)
	mu.Lock()
	defer mu.Unlock()
	return runs
}
