package runtime

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
)

// TestSlowClassHoldsOnlyItsPartitions: a class whose handlers block holds
// back only its own partitions: another class's are fetched and handled
// to the end meanwhile, the blocked class's fetched records stay bounded
// (on franz-go its partitions are paused once their queues are full, not
// its fetch loop blocked with the poll loop), and once its handlers are
// released it handles everything, all committed.
func TestSlowClassHoldsOnlyItsPartitions(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "slow", "fast")
	produced := b.produce(3000)
	release := make(chan struct{})
	var fast atomic.Int64
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		if m.Class == "slow" {
			select {
			case <-release:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		} else {
			fast.Add(1)
		}
		b.record(m)
		return nil
	}, nil)
	cfg.FetchQueue = 100
	rt, cancel, wait := startWithCancel(t, cfg)
	waitFor(t, "ready", rt.Ready) // Run has made the client
	waitFor(t, "the fast class handled all of its topic", func() bool { return fast.Load() == int64(produced/2) })
	if rt.cfg.Client == ClientFranzGo {
		waitFor(t, "the slow class's two partitions paused", func() bool {
			return len(kclient.PausedPartitions(rt.kafka.client)["slow"]) == 2
		})
		paused := kclient.PausedPartitions(rt.kafka.client)
		if len(paused["fast"]) != 0 {
			t.Errorf("fast partitions paused: %v", paused)
		}
		for k, q := range kclient.QueueFill(rt.kafka.client) {
			// FetchQueue and up to two partition fetches (all of a
			// partition's 1500 small records fit in one).
			if n := q[0]; k.Topic == "slow" && n > 100+2*1500 {
				t.Errorf("%s/%d buffers %d records", k.Topic, k.Partition, n)
			}
		}
	}
	close(release)
	waitFor(t, "everything handled", func() bool {
		unique, _ := b.counts()
		return unique == produced
	})
	waitFor(t, "everything committed", func() bool { return b.committed() == int64(produced) })
	if rt.cfg.Client == ClientFranzGo {
		if paused := kclient.PausedPartitions(rt.kafka.client); len(paused) != 0 {
			t.Errorf("partitions still paused after the slow class caught up: %v", paused)
		}
	}
	cancel()
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	unique, total := b.counts()
	t.Logf("produced %d, handled %d (%d distinct), committed %d", produced, total, unique, b.committed())
}

// TestFranzQueueBytesBounded: on franz-go a partition queue pauses its
// partition at QueueBytes of keys and values, whatever FetchQueue, so
// large records do not multiply its memory.
func TestFranzQueueBytesBounded(t *testing.T) {
	t.Parallel()
	onlyClient(t, ClientFranzGo, "the partition queue is franz-go's (kafka-go's reader is bounded by FetchQueue records)")
	b := setup(t, 1, "big")
	values := make([]string, 80)
	for i := range values {
		values[i] = strings.Repeat("x", 100<<10) // 80 × 100 KiB
	}
	produced := b.produceValues("big", "k", values...)
	release := make(chan struct{})
	rt, cancel, wait := startBlocked(t, b, release)
	waitFor(t, "ready", rt.Ready) // Run has made the client
	waitFor(t, "the partition paused", func() bool { return len(kclient.PausedPartitions(rt.kafka.client)["big"]) == 1 })
	q := kclient.QueueFill(rt.kafka.client)[kclient.Partition{Topic: "big", Partition: 0}]
	// QueueBytes, and up to two partition fetches while the pause takes
	// effect.
	if n := q[1]; n > kclient.QueueBytes+2*kclient.FetchMaxBytes {
		t.Errorf("the queue holds %d bytes, bound %d", n, kclient.QueueBytes+2*kclient.FetchMaxBytes)
	}
	t.Logf("paused holding %d records, %d KiB (FetchQueue %d)", q[0], q[1]>>10, rt.cfg.FetchQueue)
	close(release)
	waitFor(t, "everything handled", func() bool { unique, _ := b.counts(); return unique == produced })
	cancel()
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
}

// TestFranzQueuesShareBytes: on franz-go the partition queues of a member
// share kclient.QueuesBytes, so a member of many partitions pauses each at
// its share, not at 1 MiB of each: records fetched ahead do not grow with
// the partition count. 32 partitions of 240 records of 4 KiB (960 KiB
// each, under QueueBytes and FetchQueue) behind a blocked handler: each
// fetch loop holds one batch of fetchBatch records, and every queue pauses
// its partition with the rest, above its 512 KiB share.
func TestFranzQueuesShareBytes(t *testing.T) {
	t.Parallel()
	onlyClient(t, ClientFranzGo, "the partition queues are franz-go's (kafka-go's readers are bounded by FetchQueue records each)")
	const partitions, perPartition, size = 32, 240, 4 << 10
	share := kclient.QueuesBytes / partitions
	if left := (perPartition - fetchBatch) * size; left <= share || perPartition*size >= kclient.QueueBytes {
		t.Fatalf("what a fetch loop leaves in its queue (%d bytes) must fill a share (%d bytes), and all of it not QueueBytes", left, share)
	}
	b := setup(t, partitions, "wide")
	w := b.writer()
	w.Balancer = kafka.BalancerFunc(func(m kafka.Message, _ ...int) int { return m.Partition })
	value := []byte(strings.Repeat("x", size))
	var msgs []kafka.Message
	for p := range partitions {
		for i := range perPartition {
			msgs = append(msgs, kafka.Message{Topic: "wide", Partition: p, Key: fmt.Appendf(nil, "k-%d-%d", p, i), Value: value})
		}
	}
	writeAndClose(t, w, msgs)
	release := make(chan struct{})
	rt, cancel, wait := startBlocked(t, b, release)
	waitFor(t, "ready", rt.Ready)
	waitFor(t, "every partition paused", func() bool { return len(kclient.PausedPartitions(rt.kafka.client)["wide"]) == partitions })
	var held int64
	for _, q := range kclient.QueueFill(rt.kafka.client) {
		held += q[1]
	}
	t.Logf("paused holding %d KiB in all (QueuesBytes %d KiB, %d KiB a partition)", held>>10, kclient.QueuesBytes>>10, share>>10)
	close(release)
	waitFor(t, "everything handled", func() bool { unique, _ := b.counts(); return unique == len(msgs) })
	cancel()
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
}

// startBlocked starts the bundle's runtime with one worker and a queue of
// one per class, its handler waiting for release before it records the
// message.
func startBlocked(t *testing.T, b *bundle, release <-chan struct{}) (*Runtime, context.CancelFunc, func() (*Report, error)) {
	t.Helper()
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		select {
		case <-release:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		b.record(m)
		return nil
	}, func(c *Class) { c.Workers, c.QueueSize = 1, 1 })
	return startWithCancel(t, cfg)
}

// TestKeptMessagesOutliveTheirBatches: a handler may keep its message
// (the default, Class.RecycleMessages off), and what it kept stays as it
// was produced after the batch it came in is long gone: on franz-go, a
// batch's records are decoded into a slice that goes back to a pool
// once the fetch loop has handed them all on, and later batches are
// decoded into it again. Many small compressed batches (37 records) and
// a FetchQueue of 64 make the poll loop fetch again and again while the
// handler keeps every message.
func TestKeptMessagesOutliveTheirBatches(t *testing.T) {
	t.Parallel()
	const n = 1500
	b := setup(t, 1, "kept")
	base := time.UnixMilli(1_700_000_000_000).UTC()
	w := b.writer()
	w.BatchSize = 37
	w.Compression = kafka.Lz4
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Topic: "kept", Key: fmt.Appendf(nil, "k-%d", i), Value: fmt.Appendf(nil, "v-%d-%s", i, strings.Repeat("x", i%200)),
			Headers: []kafka.Header{{Key: "h", Value: fmt.Appendf(nil, "%d", i)}}, Time: base.Add(time.Duration(i) * time.Millisecond)}
	}
	writeAndClose(t, w, msgs)
	var mu sync.Mutex
	kept := map[int64]*handoff.Message{}
	cfg := b.config(func(_ context.Context, m *handoff.Message) error {
		mu.Lock()
		kept[m.Origin.Offset] = m
		mu.Unlock()
		return nil
	}, nil)
	cfg.FetchQueue = 64
	rt, wait := startNew(t, cfg)
	waitFor(t, "every message handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(kept) == n })
	waitFor(t, "everything committed", func() bool { return b.committed() == n })
	stopAndWait(t, rt, wait)
	bad := 0
	for i := range n {
		m := kept[int64(i)]
		want := msgs[i]
		if m == nil || string(m.Key) != string(want.Key) || string(m.Value) != string(want.Value) || !m.Timestamp.Equal(want.Time) ||
			len(m.Headers) != 1 || m.Headers[0].Key != "h" || string(m.Headers[0].Value) != string(want.Headers[0].Value) {
			if bad++; bad <= 5 {
				t.Errorf("offset %d: kept %+v, produced key %q value %q time %v header %q", i, m, want.Key, want.Value, want.Time, want.Headers[0].Value)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d kept messages differ from what was produced", bad, n)
	}
}

// writeAndClose writes msgs with w, within 30 seconds, and closes w.
func writeAndClose(t *testing.T, w *kafka.Writer, msgs []kafka.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := w.WriteMessages(ctx, msgs...)
	cancel()
	devbroker.CloseWriter(w)
	if err != nil {
		t.Fatal(err)
	}
}
