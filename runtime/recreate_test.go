package runtime

import (
	"context"
	"fmt"
	"testing"

	"github.com/handoff-go/handoff"
)

// TestTopicRecreatedWhileConsuming: the broker's topic deleted and
// created again under the same name (a new topic ID, its log starting
// at 0 again, the group's offsets of the old topic gone) while the
// runtime consumes it. Before, franz-go fetched the old topic ID and
// failed with UNKNOWN_TOPIC_ID for good, handling nothing of the new
// topic, with the runtime still ready. Now both clients go on with the
// new topic's messages.
func TestTopicRecreatedWhileConsuming(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	cfg := b.config(func(_ context.Context, m *handoff.Message) error {
		b.record(m)
		return nil
	}, nil)
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	const before, after = 20, 5
	b.produce(before)
	waitFor(t, "the old topic's messages handled", func() bool { u, _ := b.counts(); return u == before })
	waitFor(t, "the old topic's offsets committed", func() bool { return b.committed() == before })

	c := b.broker.Cluster()
	if err := c.DeleteTopic("orders"); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic("orders", 1, nil); err != nil {
		t.Fatal(err)
	}
	values := make([]string, after)
	for i := range values {
		values[i] = fmt.Sprintf("new-%d", i)
	}
	b.produceValues("orders", "k", values...)
	// The new topic's messages have the IDs of the old one's first
	// offsets: count the handlings past the old topic's.
	newHandled := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.order) - before
	}
	waitFor(t, "the new topic's messages handled", func() bool { return newHandled() >= after })
	if !rt.Ready() {
		t.Error("not ready after the recreated topic's messages were handled")
	}
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if got := b.committed(); got != after {
		t.Errorf("committed %d after the stop, want the new topic's %d", got, after)
	}
}
