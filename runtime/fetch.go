package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/handoff-go/handoff"
)

// partSource is where a partition's fetch loop takes its records from:
// a kafka-go partition reader (kafkaGoSource) or franz-go's poll loop
// (franzgo.go). Records come in offset order.
type partSource interface {
	// next returns the partition's next record, blocking until there is
	// one; false once ctx ended.
	next(ctx context.Context) (fetchedRecord, bool)
	// close ends the source once the fetch loop is done with it. It does
	// not block: a reader still closing is joined by the stop (closing).
	close()
}

// fetch reads one partition from src and hands its records to the
// class's pool. A full pool makes it wait, which pushes back on this
// partition only.
func (r *Runtime) fetch(ctx context.Context, g *generation, c *class, tr *tracker, src partSource) {
	defer src.close()
	caughtUp := false
	for {
		if !c.hold.MayFetch(ctx) { // suspended or paused
			return
		}
		fr, ok := src.next(ctx)
		if !ok {
			return
		}
		it := r.fetched(c, tr, &fr)
		last := fr.offset+1 >= fr.hwm
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

// kafkaGoSource is a kafka-go partition reader (readPartition) that
// fetches and decodes up to FetchQueue records ahead. It fetches with
// kafka-go's protocol client rather than its kafka.Reader: the Reader
// hands a zero-length key, value or header value over as nil, which the
// protocol client keeps apart from a null one (see handoff.Message).
type kafkaGoSource struct {
	r      *Runtime
	recs   chan fetchedRecord
	cancel context.CancelFunc
	read   chan struct{} // closed when the reader returns
	log    *slog.Logger
}

func (r *Runtime) kafkaGoSource(ctx context.Context, tr *tracker, start int64) partSource {
	s := &kafkaGoSource{r: r, recs: make(chan fetchedRecord, r.cfg.FetchQueue), read: make(chan struct{}),
		log: r.log.With("topic", tr.topic, "partition", tr.partition)}
	var rctx context.Context
	rctx, s.cancel = context.WithCancel(ctx)
	go func() {
		defer close(s.read)
		r.readPartition(rctx, tr, start, s.recs, s.log)
	}()
	return s
}

func (s *kafkaGoSource) next(ctx context.Context) (fetchedRecord, bool) {
	select {
	case <-ctx.Done():
		return fetchedRecord{}, false
	case fr := <-s.recs:
		return fr, true
	}
}

// close joins the reader in the background: the stop's quiesce needs the
// fetch loop gone, not the reader. The stop joins the readers before
// leaving the group.
func (s *kafkaGoSource) close() {
	s.r.closing.Go(func() { s.cancel(); s.r.joinReader(s.read, s.log) })
}

// fetchedRecord is one record a partition reader decoded, its bytes
// copied out of the fetch buffer.
type fetchedRecord struct {
	offset     int64
	hwm        int64 // the partition's high watermark in the fetch response
	time       time.Time
	key, value []byte
	headers    []handoff.Header
}

// Bounds of a partition reader's wait after a failed fetch: it doubles
// from the first to the second while fetches fail.
const (
	fetchBackoffMin = 100 * time.Millisecond
	fetchBackoffMax = 5 * time.Second
)

// fetchMaxBytes bounds one fetch response, which kafka-go's protocol
// client reads whole into memory before the first record is decoded
// (kafka-go's Reader streamed its 10 MiB responses): Kafka's own
// max.partition.fetch.bytes default. A first batch larger than it is
// still returned whole (Fetch v3 on), so large records make progress.
const fetchMaxBytes = 1 << 20

// readPartition fetches tr's partition from offset on and sends its
// records to out, in offset order, until ctx ends. A failed fetch is
// counted, logged (with backoff: see Runtime.logs) and tried again after
// a wait that doubles from fetchBackoffMin to fetchBackoffMax while
// fetches fail. It blocks while out is full.
func (r *Runtime) readPartition(ctx context.Context, tr *tracker, offset int64, out chan<- fetchedRecord, log *slog.Logger) {
	backoff := fetchBackoffMin
	for {
		resp, err := r.fetches.Fetch(ctx, &kafka.FetchRequest{
			Topic:     tr.topic,
			Partition: tr.partition,
			Offset:    offset,
			MinBytes:  1,
			MaxBytes:  fetchMaxBytes,
			MaxWait:   r.cfg.FetchMaxWait,
		})
		if err == nil && resp.Error != nil {
			err = resp.Error
		}
		if err == nil {
			offset, err = sendRecords(ctx, resp, offset, out)
		}
		if err == nil {
			backoff = fetchBackoffMin
			continue
		}
		if ctx.Err() != nil {
			return
		}
		r.metrics.fetchError(tr.topic)
		r.logs.warn(log, "fetch failed", "fetch failed; retrying", "offset", offset, "err", err, "wait", backoff)
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, fetchBackoffMax)
	}
}

// sendRecords sends the records of resp from offset on to out and
// returns the offset after the last one sent. A batch may start before
// the offset asked for: its earlier records are skipped. Control batches
// (transaction markers) are skipped by kafka-go's record stream.
func sendRecords(ctx context.Context, resp *kafka.FetchResponse, offset int64, out chan<- fetchedRecord) (int64, error) {
	for {
		rec, err := resp.Records.ReadRecord()
		if errors.Is(err, io.EOF) {
			return offset, nil
		}
		if err != nil {
			return offset, fmt.Errorf("decode records: %w", err)
		}
		if rec.Offset < offset && offset >= 0 {
			continue
		}
		fr := fetchedRecord{offset: rec.Offset, hwm: resp.HighWatermark, time: recordTime(rec.Time)}
		if fr.key, err = readBytes(rec.Key); err == nil {
			fr.value, err = readBytes(rec.Value)
		}
		if err != nil {
			return offset, fmt.Errorf("read record at offset %d: %w", rec.Offset, err)
		}
		if len(rec.Headers) > 0 {
			// kafka-go decodes each header value into a slice of its own.
			fr.headers = make([]handoff.Header, len(rec.Headers))
			for i, h := range rec.Headers {
				fr.headers[i] = handoff.Header{Key: h.Key, Value: h.Value}
			}
		}
		select {
		case out <- fr:
		case <-ctx.Done():
			return offset, ctx.Err()
		}
		offset = rec.Offset + 1
	}
}

// readBytes copies b out of the fetch buffer and closes it, which gives
// the buffer's pages back to kafka-go's pool once every record's bytes
// are read; nil for a null b.
func readBytes(b protocol.Bytes) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	out, err := protocol.ReadAll(b)
	return out, errors.Join(err, b.Close())
}

// recordTime returns a record's timestamp in UTC, or the zero time for
// the -1 of a record without one.
func recordTime(t time.Time) time.Time {
	if t.UnixMilli() < 0 {
		return time.Time{}
	}
	return t.UTC()
}

// fetched returns the recycled item of record fr, its offset added to
// tr. The message's ID and bytes are its own, and the handler is handed
// copies of the message (see handler): a handler may keep them (see
// handoff.Message).
func (r *Runtime) fetched(c *class, tr *tracker, fr *fetchedRecord) *item {
	it := r.items.Get().(*item) // zero: result clears an item before it returns it
	it.src, it.tr = fromKafka, tr
	seen := r.mono()
	it.msg = handoff.Message{
		ID:        kafkaID(tr.idPrefix, fr.offset),
		Class:     c.cfg.Name,
		Key:       fr.key,
		Value:     fr.value,
		Headers:   fr.headers,
		Origin:    handoff.Origin{Topic: tr.topic, Partition: tr.partition, Offset: fr.offset},
		Timestamp: fr.time,
		FirstSeen: r.epoch.Add(time.Duration(seen)),
	}
	it.slot = tr.add(fr.offset, seen)
	return it
}

// joinReader waits for a partition reader to end, at most FetchMaxWait
// plus a second: a fetch in flight ends with its context, unless the
// connection is stuck.
func (r *Runtime) joinReader(done <-chan struct{}, log *slog.Logger) {
	wait := r.cfg.FetchMaxWait + time.Second
	if !closedWithin(done, wait) {
		log.Warn("partition reader did not end in time; left behind", "waited", wait)
	}
}

// kafkaIDPrefix returns "topic/partition/": a Kafka record's stable ID is
// that prefix and its offset, so one partition's records share it.
func kafkaIDPrefix(topic string, partition int) string {
	return tp{topic, partition}.String() + "/"
}

// kafkaID returns the ID of the record at offset, prefix its partition's
// kafkaIDPrefix: a string of its own, in one allocation for topics of up
// to about 40 bytes.
func kafkaID(prefix string, offset int64) string {
	var buf [64]byte
	b := append(buf[:0], prefix...)
	return string(strconv.AppendInt(b, offset, 10))
}
