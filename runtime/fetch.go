package runtime

import (
	"context"
	"log/slog"
	"strconv"
	"time"
	"unsafe"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
)

// fetch reads one partition and hands its records to the class's pool.
// A full pool makes it wait, which pushes back on this partition only.
func (r *Runtime) fetch(ctx context.Context, g *generation, c *class, tr *tracker, start int64) {
	log := r.log.With("topic", tr.topic, "partition", tr.partition)
	rd := kafka.NewReader(kafka.ReaderConfig{
		Brokers:       r.cfg.Brokers,
		Topic:         tr.topic,
		Partition:     tr.partition,
		MinBytes:      1,
		MaxBytes:      10 << 20,
		MaxWait:       r.cfg.FetchMaxWait,
		QueueCapacity: r.cfg.FetchQueue,
		// The runtime samples the lag itself (lag.go); kafka-go's own
		// lag reader would ask again per partition, and log a failure
		// when a normal stop cancels it.
		ReadLagInterval: -1,
		Dialer:          r.kafkaDialer(),
		Logger:          r.kafkaLogger(ctx, log, false),
		ErrorLogger:     r.kafkaLogger(ctx, log, true),
	})
	// Closed in the background: the stop's quiesce needs the fetch loop
	// gone, not the reader closed (kafka-go's Close waits for an
	// in-flight fetch). The stop joins the closes before leaving the
	// group.
	defer r.closing.Go(func() { r.closeReader(rd, log) })
	if err := rd.SetOffset(start); err != nil {
		log.Error("reader offset not set", "offset", start, "err", err)
		return
	}
	ids := newKafkaIDs(tr.topic, tr.partition)
	caughtUp := false
	backoff := fetchBackoffMin
	for {
		if !r.mayFetch(ctx, c) { // suspended or paused
			return
		}
		m, err := rd.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.metrics.fetchError(tr.topic)
			r.logs.warn(log, "fetch failed", "fetch failed; retrying", "err", err, "wait", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, fetchBackoffMax)
			continue
		}
		backoff = fetchBackoffMin
		it := r.fetched(c, tr, ids, &m)
		last := m.Offset+1 >= m.HighWaterMark
		if err := c.pool.Submit(ctx, it); err != nil {
			// Never accepted: it stays unsettled, so the commit stops
			// before it and Kafka delivers it again.
			tr.abandoned.Add(1)
			return
		}
		if last != caughtUp { // written on change only: the keeper reads it
			caughtUp = last
			tr.caughtUp.Store(last)
		}
		if last {
			select {
			case g.caughtUp <- struct{}{}:
			default:
			}
		}
	}
}

// Bounds of the fetch loop's wait after a failed fetch: it doubles from
// the first to the second while fetches fail.
const (
	fetchBackoffMin = 100 * time.Millisecond
	fetchBackoffMax = 5 * time.Second
)

// fetched returns the recycled item of record m, its offset added to tr.
func (r *Runtime) fetched(c *class, tr *tracker, ids *kafkaIDs, m *kafka.Message) *item {
	it := r.items.Get().(*item) // zero: result clears an item before it returns it
	it.msg.ID = ids.id(m.Offset)
	it.msg.Class = c.cfg.Name
	it.msg.Key, it.msg.Value = m.Key, m.Value
	it.msg.Origin = handoff.Origin{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}
	seen := r.mono()
	it.msg.FirstSeen = r.epoch.Add(time.Duration(seen))
	it.src, it.tr = fromKafka, tr
	if len(m.Headers) > 0 {
		it.msg.Headers = make([]handoff.Header, len(m.Headers))
		for i, h := range m.Headers {
			it.msg.Headers[i] = handoff.Header{Key: h.Key, Value: h.Value}
		}
	}
	it.slot = tr.add(m.Offset, seen)
	return it
}

// closeReader closes rd, waiting at most FetchMaxWait plus a second: a
// kafka-go reader's Close can block on an in-flight fetch.
func (r *Runtime) closeReader(rd *kafka.Reader, log *slog.Logger) {
	done := make(chan struct{})
	go func() { rd.Close(); close(done) }()
	wait := r.cfg.FetchMaxWait + time.Second
	select {
	case <-done:
	case <-time.After(wait):
		log.Warn("partition reader did not close in time; left behind", "waited", wait)
	}
}

// kafkaIDPrefix returns "topic/partition/": a Kafka record's stable ID is
// that prefix and its offset, so one partition's records share it.
func kafkaIDPrefix(topic string, partition int) []byte {
	b := make([]byte, 0, len(topic)+24)
	b = append(b, topic...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(partition), 10)
	return append(b, '/')
}

// idBlockSize is the size of the blocks kafkaIDs carves IDs from: about
// 40 IDs of a 25-byte "topic/partition/offset" per allocation.
const idBlockSize = 1024

// kafkaIDs makes the IDs of one partition's records. It carves them from
// shared blocks instead of allocating a string per message: the fetch
// loop's one allocation per record otherwise. The bytes behind an ID are
// never written again once it is handed out, as unsafe.String requires.
// An ID kept after its message is handled keeps its block alive, at most
// idBlockSize bytes; the runtime copies the IDs it keeps (parking).
type kafkaIDs struct {
	prefix []byte // "topic/partition/"
	block  []byte
}

func newKafkaIDs(topic string, partition int) *kafkaIDs {
	return &kafkaIDs{prefix: kafkaIDPrefix(topic, partition)}
}

// id returns the ID of the record at offset.
func (k *kafkaIDs) id(offset int64) string {
	const maxOffsetLen = 20 // digits of the largest int64, and a sign
	if cap(k.block)-len(k.block) < len(k.prefix)+maxOffsetLen {
		k.block = make([]byte, 0, max(idBlockSize, len(k.prefix)+maxOffsetLen))
	}
	start := len(k.block)
	k.block = append(k.block, k.prefix...)
	k.block = strconv.AppendInt(k.block, offset, 10)
	return unsafe.String(&k.block[start], len(k.block)-start)
}
