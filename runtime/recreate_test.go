package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// TestCommittedOffsetPastTheEnd: the group's committed offset is past
// the partition's end when the runtime starts (a topic created again
// while no instance ran, its offsets kept by name). The partition is
// read from StartOffset, a WARN names the partition, the offset and
// where it resumes, and the new log's offsets are committed. Before,
// kafka-go handled the messages and committed none (its tracker began
// at the old offset, above them), and neither client said so above
// Info.
func TestCommittedOffsetPastTheEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	const n = 5
	b.produce(n)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.broker.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = b.group, -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic, rt.TopicID = "orders", b.broker.Cluster().TopicInfo("orders").TopicID
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = 0, 50
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	resp, err := req.RequestWith(ctx, cl)
	cancel()
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); err != nil {
		t.Fatal(err)
	}
	if got := b.committed(); got != 50 {
		t.Fatalf("committed %d before the start, want 50", got)
	}

	log, warned := countLogs(t, "fetch offset out of range (the log was deleted past it, truncated, or the topic was created again); resetting")
	cfg := b.config(func(_ context.Context, m *handoff.Message) error {
		b.record(m)
		return nil
	}, nil)
	cfg.Logger = log
	r, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, r, context.Background())
	waitFor(t, "the messages handled", func() bool { u, _ := b.counts(); return u == n })
	waitFor(t, "the new log's offsets committed", func() bool { return b.committed() == n })
	r.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if got := warned.Load(); got != 1 {
		t.Errorf("%d out-of-range WARN lines, want 1", got)
	}
	if _, total := b.counts(); total != n {
		t.Errorf("%d handlings, want %d", total, n)
	}
}
