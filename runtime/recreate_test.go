package runtime

import (
	"context"
	"fmt"
	"testing"

	"github.com/handoff-go/handoff"
)

// TestTopicRecreatedWhileConsuming: the broker's topics (the input and
// its changelog's) deleted and created again under the same names (new
// topic IDs, logs starting at 0 again, the group's offsets of the old
// topic gone) while the runtime consumes them. Before, franz-go fetched the old topic ID and
// failed with UNKNOWN_TOPIC_ID for good, handling nothing of the new
// topic, with the runtime still ready; kafka-go handled the new messages
// but committed none (the tracker's commit was the old topic's, above
// them). Now both clients go on with the new topic's messages and commit
// them.
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

	// The broker rebuilt: every topic deleted and created again, the
	// changelog's too.
	c := b.broker.Cluster()
	compact := map[string]string{"cleanup.policy": "compact"}
	for topic, configs := range map[string]map[string]string{
		"orders": nil, b.group + ".orders.handoff-changelog": compact, b.group + ".handoff-meta": compact,
	} {
		if err := c.DeleteTopic(topic); err != nil {
			t.Fatal(err)
		}
		if err := c.CreateTopic(topic, 1, configs); err != nil {
			t.Fatal(err)
		}
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
	if _, total := b.counts(); total != before+after {
		t.Errorf("%d handlings, want %d: the old topic's %d and the new one's %d, each once", total, before+after, before, after)
	}
	if got := b.committed(); got != after {
		t.Errorf("committed %d after the stop, want the new topic's %d", got, after)
	}
}
