package kclient

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	fetchAPI "github.com/segmentio/kafka-go/protocol/fetch"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime/internal/wait"
)

// The client on github.com/segmentio/kafka-go (Config.Client kafka-go): an eager,
// dynamic consumer group (ConsumerGroup), one session per generation;
// partition readers on kafka-go's protocol client; commits through the
// generation's connection, then fresh ones; metadata and lag on the same
// protocol client.

// kafkaGo is the kafka-go client.
type kafkaGo struct {
	cfg Config
	log *slog.Logger
	// commits is the client of the fresh-connection commits
	// (commitFresh), the topic check and the lag sampler.
	commits *kafka.Client
	// fetches is the partition readers' client (readPartition).
	fetches *kafka.Client

	cg       *kafka.ConsumerGroup // set by Join
	member   memberWatch          // what kafka-go joined the group as
	consumer sync.WaitGroup       // the loop of consume
	// closing counts the partition readers still closing; Close joins
	// them before it leaves the group.
	closing sync.WaitGroup
}

func newKafkaGo(cfg Config) *kafkaGo {
	return &kafkaGo{cfg: cfg, log: cfg.Log,
		commits: &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Timeout: CommitTimeout, Transport: cfg.transport(nil)},
		// Its connections are pooled, one per fetch in flight.
		fetches: &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: cfg.transport(nil)},
	}
}

// transport returns a new transport for a kafka-go client or writer,
// dialling with dial, or with cfg.DialFunc when nil.
func (c *Config) transport(dial func(context.Context, string, string) (net.Conn, error)) *kafka.Transport {
	if dial == nil {
		dial = c.DialFunc
	}
	return &kafka.Transport{ClientID: c.ClientID, Dial: dial}
}

func (k *kafkaGo) Join(ctx context.Context, topics []string, begin BeginFunc) error {
	start := kafka.FirstOffset
	if k.cfg.StartLast {
		start = kafka.LastOffset
	}
	d := &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, ClientID: k.cfg.ClientID, DialFunc: k.cfg.DialFunc}
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                k.cfg.Group,
		Brokers:           k.cfg.Brokers,
		Topics:            topics,
		StartOffset:       start,
		SessionTimeout:    k.cfg.SessionTimeout,
		RebalanceTimeout:  k.cfg.RebalanceTimeout,
		HeartbeatInterval: k.cfg.heartbeat(),
		JoinGroupBackoff:  time.Second,
		// The leader rebalances a topic that gained partitions in,
		// looking every 5s (kafka-go's PartitionWatchInterval).
		WatchPartitionChanges: true,
		Timeout:               5 * time.Second,
		Dialer:                d,
		GroupBalancers:        memberBalancers(k.cfg.Instance),
		Logger:                k.member.logger(k.kafkaLogger(ctx, k.log, false)),
		ErrorLogger:           k.member.logger(k.kafkaLogger(ctx, k.log, true)),
	})
	if err != nil {
		// Validated by the runtime's New; this means kafka-go disagrees.
		return fmt.Errorf("kafka-go consumer group: %w", err)
	}
	k.cg = cg
	k.consumer.Go(func() { k.consume(ctx, begin) })
	return nil
}

func (k *kafkaGo) Wait() { k.consumer.Wait() }

// consume joins generation after generation until ctx ends.
func (k *kafkaGo) consume(ctx context.Context, begin BeginFunc) {
	for {
		kg, err := k.cg.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			// kafka-go's error logger has said so already, with backoff.
			k.log.Debug("consumer group join failed; retrying", "group", k.cfg.Group, "err", err)
			continue
		}
		k.runGeneration(ctx, kg, begin)
		if ctx.Err() != nil {
			return
		}
	}
}

// runGeneration is one generation's session, until it ends or ctx ends.
// The keeper runs through Generation.Start; the fetch loops do not,
// because the first function started that way to return ends the
// generation, and the stop must keep the generation open after fetching
// ends, to commit through it. So when ctx ends the keeper stays, for the
// stop's final commit.
func (k *kafkaGo) runGeneration(ctx context.Context, kg *kafka.Generation, begin BeginFunc) {
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &kafkaGoSession{k: k, kg: kg}
	keeper := begin(gctx, s)
	kg.Start(func(kctx context.Context) {
		keeper.Keep(kctx)
		cancel() // the generation ended: so does runGeneration
	})
	<-gctx.Done()
	// The keeper's end stopped the fetch loops; at the stop they end with
	// ctx, and the keeper stays for the final commit.
	keeper.Quiesce()
}

// kafkaGoSession is one kafka-go generation.
type kafkaGoSession struct {
	k  *kafkaGo
	kg *kafka.Generation
	// connLost is set once a commit through the generation's connection
	// failed; the keeper's only.
	connLost bool
}

func (s *kafkaGoSession) Eager() bool       { return true }
func (s *kafkaGoSession) Generation() int32 { return s.kg.ID }

func (s *kafkaGoSession) Assigned() []Assigned {
	ps := []Assigned{}
	for topic, parts := range s.kg.Assignments {
		for _, pa := range parts {
			ps = append(ps, Assigned{Partition{topic, pa.ID}, pa.Offset})
		}
	}
	return ps
}

// Commit commits through the generation's connection and, once that has
// failed, on fresh connections. kafka-go commits through one connection
// per generation and never reconnects it: after a connection reset every
// later commit of the generation would fail, its end's commit too, and
// the next generation would read again everything since the last commit
// that got through. A fresh commit carries the generation's ID and member
// ID, so the broker fences it exactly as it fences the generation.
func (s *kafkaGoSession) Commit(offsets map[string]map[int]int64) error {
	if !s.connLost {
		err := s.kg.CommitOffsets(offsets)
		if err == nil {
			return nil
		}
		s.connLost = true
		s.k.log.Warn("commit through the generation's connection failed; committing on fresh connections for the rest of the generation",
			"generation", s.kg.ID, "err", err)
	}
	return s.k.commitFresh(s.kg, offsets)
}

// commitFresh commits offsets for generation kg through the commits
// client, which finds the group's coordinator and connects anew as
// needed. A connection failure is retried on a new connection (3 tries,
// within CommitTimeout); an answer of the broker (a fenced generation,
// say) is final.
func (k *kafkaGo) commitFresh(kg *kafka.Generation, offsets map[string]map[int]int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), CommitTimeout)
	defer cancel()
	req := &kafka.OffsetCommitRequest{
		Addr: k.commits.Addr, GroupID: kg.GroupID, GenerationID: int(kg.ID), MemberID: kg.MemberID,
		Topics: make(map[string][]kafka.OffsetCommit, len(offsets)),
	}
	for topic, parts := range offsets {
		for p, off := range parts {
			req.Topics[topic] = append(req.Topics[topic], kafka.OffsetCommit{Partition: p, Offset: off})
		}
	}
	var err error
	for try := 0; try < 3 && ctx.Err() == nil; try++ {
		var resp *kafka.OffsetCommitResponse
		if resp, err = k.commits.OffsetCommit(ctx, req); err == nil {
			return partitionErrors(resp)
		}
		if _, answered := errors.AsType[kafka.Error](err); answered {
			break
		}
	}
	return fmt.Errorf("fresh connection: %w", err)
}

// partitionErrors joins the per-partition errors of a commit's response.
func partitionErrors(resp *kafka.OffsetCommitResponse) error {
	var errs []error
	for topic, parts := range resp.Topics {
		for _, p := range parts {
			if p.Error != nil {
				errs = append(errs, fmt.Errorf("fresh connection: %s/%d: %w", topic, p.Partition, p.Error))
			}
		}
	}
	return errors.Join(errs...)
}

// Source is a partition reader (readPartition) that fetches and decodes
// up to about FetchQueue records ahead. It fetches with kafka-go's
// protocol client rather than its kafka.Reader: the Reader hands a
// zero-length key, value or header value over as nil, which the protocol
// client keeps apart from a null one.
func (s *kafkaGoSession) Source(ctx context.Context, a Assigned) Source {
	k := s.k
	src := &kafkaGoSource{k: k, read: make(chan struct{}),
		log: k.log.With("topic", a.Topic, "partition", a.Partition.Partition)}
	src.chunks, src.out = newChunkOut(k.cfg.FetchQueue)
	var rctx context.Context
	rctx, src.cancel = context.WithCancel(ctx)
	go func() {
		defer close(src.read)
		k.readPartition(rctx, a, src.out, src.log)
	}()
	return src
}

// maxChunk is the most records a partition reader hands its source at
// once: one channel operation for up to that many records, not one each.
const maxChunk = 64

// chunking returns the records of a chunk and how many chunks wait in the
// source's channel for a FetchQueue of fetchQueue: with the chunk the
// reader fills and the one the fetch loop takes from, about fetchQueue
// records ahead of the fetch loop in all (1000 is 64 × (13 + 2)).
func chunking(fetchQueue int) (size, depth int) {
	size = min(max(fetchQueue/4, 1), maxChunk)
	return size, max(fetchQueue/size-2, 1)
}

// chunkOut is where a partition reader sends its records: chunks of up
// to size records, on a channel, taking emptied chunks back from free.
type chunkOut struct {
	chunks chan<- []Record
	free   chan []Record
	size   int
}

// newChunkOut returns the channel of a partition reader's chunks for a
// FetchQueue of fetchQueue (see chunking), and the reader's end of it.
func newChunkOut(fetchQueue int) (chan []Record, chunkOut) {
	size, depth := chunking(fetchQueue)
	chunks := make(chan []Record, depth)
	return chunks, chunkOut{chunks: chunks, free: make(chan []Record, depth+2), size: size}
}

// make returns an empty chunk: one the source gave back, or a new one.
func (o chunkOut) make() []Record {
	select {
	case c := <-o.free:
		return c
	default:
		return make([]Record, 0, o.size)
	}
}

// kafkaGoSource is a partition reader's records.
type kafkaGoSource struct {
	k      *kafkaGo
	chunks chan []Record
	out    chunkOut
	// cur is what Next hands out next, the rest of chunk; the fetch
	// loop's only.
	cur, chunk []Record
	cancel     context.CancelFunc
	read       chan struct{} // closed when the reader returns
	log        *slog.Logger
}

// Ready reports the records left in the chunk Next takes from, taking
// the next chunk without waiting when that one is done.
func (s *kafkaGoSource) Ready() int {
	if len(s.cur) == 0 {
		select {
		case c := <-s.chunks:
			s.take(c)
		default:
		}
	}
	return len(s.cur)
}

func (s *kafkaGoSource) Next(ctx context.Context) (Record, bool) {
	for len(s.cur) == 0 {
		select {
		case <-ctx.Done():
			return Record{}, false
		case c := <-s.chunks:
			s.take(c)
		}
	}
	if ctx.Err() != nil {
		return Record{}, false
	}
	fr := s.cur[0]
	s.cur = s.cur[1:]
	return fr, true
}

// take makes c the chunk Next takes from, giving the one before back to
// the reader cleared (its records' bytes are the handed-out messages').
func (s *kafkaGoSource) take(c []Record) {
	if s.chunk != nil {
		clear(s.chunk)
		select {
		case s.out.free <- s.chunk[:0]:
		default:
		}
	}
	s.chunk, s.cur = c, c
}

// Close joins the reader in the background: the stop's quiesce needs the
// fetch loop gone, not the reader. Close of the client joins the readers
// before leaving the group.
func (s *kafkaGoSource) Close() {
	s.k.closing.Go(func() { s.cancel(); s.k.joinReader(s.read, s.log) })
}

// joinReader waits for a partition reader to end, at most FetchMaxWait
// plus a second: a fetch in flight ends with its context, unless the
// connection is stuck.
func (k *kafkaGo) joinReader(done <-chan struct{}, log *slog.Logger) {
	bound := k.cfg.FetchMaxWait + time.Second
	if !wait.ClosedWithin(done, bound) {
		log.Warn("partition reader did not end in time; left behind", "waited", bound)
	}
}

// Bounds of a partition reader's wait after a failed fetch: it doubles
// from the first to the second while fetches fail.
const (
	fetchBackoffMin = 100 * time.Millisecond
	fetchBackoffMax = 5 * time.Second
)

// readPartition fetches partition a from its offset on and sends its
// records to out, in offset order, until ctx ends. A fetch response is
// read whole into memory before the first record is decoded (kafka-go's
// Reader streamed its responses), and kafka-go's protocol client copies
// each record batch of it into 64 KiB pages of its own: a response of
// many small batches takes far more memory than its bytes (a page per
// batch). So each fetch asks for what fetchSize allows, which keeps a
// response's pages about FetchMaxBytes. A failed fetch is counted, logged
// (with backoff) and tried again after a wait that doubles from
// fetchBackoffMin to fetchBackoffMax while fetches fail; one answered
// OFFSET_OUT_OF_RANGE is tried again from where a partition without a
// committed offset starts (StartLast). It blocks while out is full.
func (k *kafkaGo) readPartition(ctx context.Context, a Assigned, out chunkOut, log *slog.Logger) {
	backoff := fetchBackoffMin
	offset := a.Offset
	size := newFetchSize()
	var rb recordBytes
	for {
		var err error
		if offset < 0 {
			// kafka-go's Fetch would look FirstOffset or LastOffset up
			// anew at every fetch until one returned a record: with
			// LastOffset, a record appended between an empty fetch and
			// the next lookup would be skipped. It is looked up once.
			offset, err = k.startOffset(ctx, a.Partition, offset)
		}
		var f fetched
		if err == nil {
			f, err = k.fetch(ctx, a.Partition, offset, size.maxBytes)
		}
		if err == nil {
			var read fetchRead
			offset, read, err = sendRecords(ctx, f, offset, out, &rb)
			size.learn(read)
		}
		if err == nil {
			k.cfg.FetchFunc(a.Partition, nil)
			backoff = fetchBackoffMin
			continue
		}
		if ctx.Err() != nil {
			return
		}
		k.cfg.FetchErrorFunc(a.Topic)
		k.cfg.FetchFunc(a.Partition, err)
		if errors.Is(err, kafka.OffsetOutOfRange) {
			// The offset is no longer in the log (retention deleted it,
			// the log was truncated, or the topic was deleted and
			// created again, its log starting over): go on from where a
			// partition without a committed offset starts, as franz-go's
			// ConsumeResetOffset does. Retrying it would never succeed.
			reset := kafka.FirstOffset
			if k.cfg.StartLast {
				reset = kafka.LastOffset
			}
			k.outOfRange(ctx, a.Partition, offset, reset, log)
			offset = reset
		} else {
			k.cfg.WarnFunc(log, "fetch failed", "fetch failed; retrying", "offset", offset, "err", err, "wait", backoff)
		}
		if !wait.Sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, fetchBackoffMax)
	}
}

// outOfRange logs at Warn that p's fetch at offset was answered
// OFFSET_OUT_OF_RANGE, with p's log range as its leader tells it now, and
// where the fetch goes on (reset: kafka-go's FirstOffset or LastOffset).
func (k *kafkaGo) outOfRange(ctx context.Context, p Partition, offset, reset int64, log *slog.Logger) {
	to := "the log's start (StartOffset first)"
	if reset == kafka.LastOffset {
		to = "the log's end (StartOffset last)"
	}
	args := []any{"offset", offset, "reset_to", to}
	ctx, cancel := context.WithTimeout(ctx, CommitTimeout)
	offs, errs, err := k.listOffsets(ctx, k.fetches, []Partition{p})
	cancel()
	if err == nil {
		err = errs[p]
	}
	if r, ok := offs[p]; ok && err == nil {
		args = append(args, "log_start", r.First, "log_end", r.Last)
	} else if err != nil {
		args = append(args, "log_range_err", err)
	}
	log.Warn("fetch offset out of range (the log was deleted past it, truncated, or the topic was created again); resetting", args...)
}

// startOffset returns the offset that kafka-go's FirstOffset or
// LastOffset (offset) stands for in p now, asked of its leader through
// the partition readers' client: LastOffset is p's end (see Range).
func (k *kafkaGo) startOffset(ctx context.Context, p Partition, offset int64) (int64, error) {
	offs, errs, err := k.listOffsets(ctx, k.fetches, []Partition{p})
	if err != nil {
		return offset, err
	}
	if err := errs[p]; err != nil {
		return offset, err
	}
	r, ok := offs[p]
	if !ok {
		return offset, fmt.Errorf("kclient: no offsets of %s in the ListOffsets answer", p)
	}
	if offset == kafka.FirstOffset {
		return r.First, nil
	}
	return r.Last, nil
}

// kafka-go's protocol client copies every record batch of a fetch
// response into pages of this size (protocol.pageSize): a batch of 200
// bytes takes a whole page.
const kafkaGoPage = 64 << 10

// Bounds of a partition reader's fetch size (fetchSize.maxBytes).
const (
	// minFetchBytes is the least a fetch asks for. Kafka returns a first
	// batch larger than MaxBytes whole (Fetch v3 on), so a partition of
	// large batches still makes progress.
	minFetchBytes = 4 << 10
	// firstFetchBytes is what a partition reader's first fetch asks for,
	// before it knows the partition's batches: 4 KiB of single-record
	// batches of 100-byte values are about 24 batches, 1.5 MiB of pages;
	// FetchMaxBytes of them would be about 6000, 380 MiB.
	firstFetchBytes = 4 << 10
)

// fetchRead is what sendRecords read of a fetch response.
type fetchRead struct {
	batches, records int
	bytes            int64 // keys' and values' bytes
}

// fetchSize is the MaxBytes of a partition reader's next fetch. It keeps
// the pages of a response (see kafkaGoPage) about FetchMaxBytes: after
// each response it estimates the memory a wire byte of this partition's
// batches takes (a page per batch at least, and the records' bytes) and
// asks for FetchMaxBytes over that, growing at most fourfold a fetch.
type fetchSize struct{ maxBytes int }

func newFetchSize() fetchSize { return fetchSize{maxBytes: firstFetchBytes} }

// learn sets the next fetch's size from what the last one read; an empty
// response changes nothing. kafka-go hands a response's batches over as
// one protocol.RecordStream; were it anything else, the batches would
// not be known, and the size grows fourfold a fetch to FetchMaxBytes.
func (f *fetchSize) learn(r fetchRead) {
	if r.records == 0 {
		return
	}
	if r.batches == 0 { // not a record stream: batches unknown, as before
		f.maxBytes = min(4*f.maxBytes, FetchMaxBytes)
		return
	}
	// On the wire: a record batch's header is 61 bytes, a record's own
	// fields about 12 (lengths, deltas, attributes), and its key and
	// value; compression makes it less, which makes the estimate safe.
	wire := 61*int64(r.batches) + 12*int64(r.records) + r.bytes
	mem := max(int64(r.batches)*kafkaGoPage, r.bytes)
	want := int64(FetchMaxBytes) * wire / mem
	f.maxBytes = int(min(max(want, minFetchBytes), 4*int64(f.maxBytes), FetchMaxBytes))
}

// fetched is one fetch response of a partition reader.
type fetched struct {
	// records are the response's record batches; nil for none.
	records protocol.RecordReader
	// end is the partition's end in the response (Record.End).
	end int64
	// aborted is the response's aborted transactions (with
	// ReadCommitted; nil without): the batches to leave out.
	aborted []fetchAPI.ResponseTransaction
}

// fetch fetches p from offset, asking for up to maxBytes (at least its
// first batch comes whole), at the client's isolation level. It is
// kafka-go's Client.Fetch (on the same client, so it goes to the
// partition's leader) without its answer's loss: Client.Fetch drops the
// aborted transactions of the response, without which a read_committed
// reader cannot tell an aborted transaction's records from a committed
// one's (the broker returns both below the last stable offset).
func (k *kafkaGo) fetch(ctx context.Context, p Partition, offset int64, maxBytes int) (fetched, error) {
	level := kafka.ReadUncommitted
	if k.cfg.ReadCommitted {
		level = kafka.ReadCommitted
	}
	m, err := k.fetches.Transport.RoundTrip(ctx, k.fetches.Addr, &fetchAPI.Request{
		ReplicaID:      -1,
		MaxWaitTime:    int32(k.cfg.FetchMaxWait.Milliseconds()),
		MinBytes:       1,
		MaxBytes:       int32(maxBytes),
		IsolationLevel: int8(level),
		SessionID:      -1,
		SessionEpoch:   -1,
		Topics: []fetchAPI.RequestTopic{{
			Topic: p.Topic,
			Partitions: []fetchAPI.RequestPartition{{
				Partition:          int32(p.Partition),
				CurrentLeaderEpoch: -1,
				FetchOffset:        offset,
				LogStartOffset:     -1,
				PartitionMaxBytes:  int32(maxBytes),
			}},
		}},
	})
	if err != nil {
		return fetched{}, fmt.Errorf("fetch %s at %d: %w", p, offset, err)
	}
	resp := m.(*fetchAPI.Response)
	if resp.ErrorCode != 0 {
		return fetched{}, fmt.Errorf("fetch %s at %d: %w", p, offset, kafka.Error(resp.ErrorCode))
	}
	if len(resp.Topics) == 0 || len(resp.Topics[0].Partitions) == 0 {
		return fetched{}, fmt.Errorf("fetch %s at %d: the answer has no partition", p, offset)
	}
	rp := &resp.Topics[0].Partitions[0]
	if rp.ErrorCode != 0 {
		return fetched{}, fmt.Errorf("fetch %s at %d: %w", p, offset, kafka.Error(rp.ErrorCode))
	}
	f := fetched{records: rp.RecordSet.Records, end: rp.HighWatermark}
	if k.cfg.ReadCommitted {
		f.end, f.aborted = rp.LastStableOffset, rp.AbortedTransactions
	}
	return f, nil
}

// abortedTxns leaves out the batches of aborted transactions of one
// fetch response, as Kafka's own consumer does: the response names each
// aborted transaction its records overlap by producer and first offset;
// a transactional batch is left out when its producer's aborted
// transaction began at or before it and the transaction's marker has not
// come yet.
type abortedTxns struct {
	pending []fetchAPI.ResponseTransaction // by first offset, not begun yet
	open    map[int64]bool                 // producers in an aborted transaction
}

// newAbortedTxns returns the abortedTxns of a response's aborted
// transactions; it allocates nothing for none.
func newAbortedTxns(aborted []fetchAPI.ResponseTransaction) abortedTxns {
	if len(aborted) == 0 {
		return abortedTxns{}
	}
	pending := slices.Clone(aborted)
	slices.SortFunc(pending, func(a, b fetchAPI.ResponseTransaction) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	return abortedTxns{pending: pending, open: map[int64]bool{}}
}

// aborts reports whether the transactional batch of producer at base is
// one of an aborted transaction.
func (a *abortedTxns) aborts(producer, base int64) bool {
	for len(a.pending) > 0 && a.pending[0].FirstOffset <= base {
		a.open[a.pending[0].ProducerID] = true
		a.pending = a.pending[1:]
	}
	return a.open[producer] // false in a nil map
}

// ended notes the marker of producer's transaction: what producer writes
// after it is another transaction's.
func (a *abortedTxns) ended(producer int64) { delete(a.open, producer) }

// sendRecords sends the records of f from offset on to out, in chunks
// of up to out.size and the last one at the response's end, and returns
// the offset to fetch next and what it read. Their keys and values are
// copied into rb's blocks. A batch may start before the offset asked
// for: its earlier records are skipped. A control batch (a transaction's
// marker) is sent as one Record with Marker set, at its offset; the
// batches of aborted transactions (f.aborted) are left out, and the next
// fetch starts past them.
func sendRecords(ctx context.Context, f fetched, offset int64, out chunkOut, rb *recordBytes) (int64, fetchRead, error) {
	var read fetchRead
	var one [1]protocol.RecordReader
	var batches []protocol.RecordReader
	switch st := f.records.(type) {
	case nil:
	case *protocol.RecordStream:
		batches = st.Records
		read.batches = len(st.Records)
	default: // not a stream of batches: one batch, of no transaction
		one[0] = st
		batches = one[:]
	}
	aborted := newAbortedTxns(f.aborted)
	// after is the offset after the last record left out, which no
	// record sent covers when the response ends with it.
	after := int64(-1)
	cs := chunkSender{out: out, offset: offset}
	for _, batch := range batches {
		switch b := batch.(type) {
		case *protocol.ControlBatch:
			aborted.ended(b.ProducerID)
			if end := controlEnd(b); end > cs.offset {
				if err := cs.add(ctx, Record{Offset: end - 1, End: f.end, Marker: true}); err != nil {
					return cs.offset, read, err
				}
			}
			continue
		case *protocol.RecordBatch:
			if b.Attributes.Transactional() && aborted.aborts(b.ProducerID, b.BaseOffset) {
				n, size, end := leaveOut(b)
				read.records += n
				read.bytes += size
				after = max(after, end)
				continue
			}
		}
		if err := cs.sendBatch(ctx, batch, f.end, rb, &read); err != nil {
			return cs.offset, read, err
		}
	}
	err := cs.send(ctx)
	if err == nil && after > cs.offset {
		cs.offset = after
	}
	return cs.offset, read, err
}

// chunkSender gathers a fetch's records into chunks of up to out.size
// and sends each to out: sendRecords's.
type chunkSender struct {
	out chunkOut
	// chunk is made at its first record: an empty fetch makes none.
	chunk []Record
	// offset is the offset to fetch next: past the last record sent.
	offset int64
}

// send sends the chunk gathered, if any; it blocks until out takes it
// or ctx ends.
func (cs *chunkSender) send(ctx context.Context) error {
	if len(cs.chunk) == 0 {
		return nil
	}
	select {
	case cs.out.chunks <- cs.chunk:
	case <-ctx.Done():
		return ctx.Err()
	}
	cs.offset = cs.chunk[len(cs.chunk)-1].Offset + 1
	cs.chunk = nil
	return nil
}

// add adds fr to the chunk, and sends the chunk once it is full.
func (cs *chunkSender) add(ctx context.Context, fr Record) error {
	if cs.chunk == nil {
		cs.chunk = cs.out.make()
	}
	if cs.chunk = append(cs.chunk, fr); len(cs.chunk) == cs.out.size {
		return cs.send(ctx)
	}
	return nil
}

// sendBatch adds the records of batch from the offset asked for on
// (earlier ones are skipped), their keys and values copied into rb's
// blocks, counting what it read into read. A record that does not
// decode ends it: what was read before it is sent, and the fetch is
// tried again from the offset after it.
func (cs *chunkSender) sendBatch(ctx context.Context, batch protocol.RecordReader, end int64, rb *recordBytes, read *fetchRead) error {
	for {
		rec, err := batch.ReadRecord()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			serr := cs.send(ctx)
			return errors.Join(serr, fmt.Errorf("decode records: %w", err))
		}
		read.records++
		if rec.Offset < cs.offset && cs.offset >= 0 {
			read.bytes += closeBytes(rec.Key, rec.Value) // their pages go back to kafka-go's pool
			continue
		}
		fr := Record{Offset: rec.Offset, End: end, Time: recordTime(rec.Time)}
		fr.Key, fr.Value, err = readKeyValue(rec.Key, rec.Value, rb)
		read.bytes += int64(len(fr.Key) + len(fr.Value))
		if err != nil {
			serr := cs.send(ctx)
			return errors.Join(serr, fmt.Errorf("read record at offset %d: %w", rec.Offset, err))
		}
		if len(rec.Headers) > 0 {
			// kafka-go decodes each header value into a slice of its own.
			fr.Headers = make([]handoff.Header, len(rec.Headers))
			for i, h := range rec.Headers {
				fr.Headers[i] = handoff.Header{Key: h.Key, Value: h.Value}
			}
		}
		if err := cs.add(ctx, fr); err != nil {
			return err
		}
	}
}

// leaveOut reads (and closes) the records of batch b, which nothing
// else reads, and returns how many there were, their keys' and values'
// bytes and the offset after the last one (-1 when it has none).
func leaveOut(b *protocol.RecordBatch) (n int, size, end int64) {
	end = -1
	for {
		rec, err := b.ReadRecord()
		if err != nil {
			return n, size, end
		}
		n++
		size += closeBytes(rec.Key, rec.Value)
		end = max(end, rec.Offset+1)
	}
}

// controlEnd returns the offset after the last record of control batch
// cb, reading (and closing) its records, which nothing else reads; -1
// when it has none.
func controlEnd(cb *protocol.ControlBatch) int64 {
	end := int64(-1)
	for {
		rec, err := cb.ReadRecord()
		if err != nil {
			return end
		}
		closeBytes(rec.Key, rec.Value)
		end = max(end, rec.Offset+1)
	}
}

// recordBlockSize is the size of the blocks a partition reader carves its
// records' keys and values from: about 60 records of 256-byte values a
// block, one allocation for them instead of one a record.
const recordBlockSize = 16 << 10

// recordBytes carves the bytes of one partition reader's records from
// shared blocks, for that reader alone. No byte of a block is handed out
// twice. A key or value kept after its message is handled keeps its
// block alive: at most recordBlockSize bytes, with no pointers (franz-go's
// records keep their whole fetch response alive so). A record of more
// than a quarter of a block gets bytes of its own.
type recordBytes struct{ block []byte }

// take returns n bytes for one record, capped at n: the next n of the
// current block, or of a new one when they do not fit.
func (r *recordBytes) take(n int) []byte {
	if n > recordBlockSize/4 {
		return make([]byte, n)
	}
	if r.block == nil || cap(r.block)-len(r.block) < n {
		r.block = make([]byte, 0, recordBlockSize) // a block for empty ones too: they are not nil
	}
	start := len(r.block)
	r.block = r.block[:start+n]
	return r.block[start : start+n : start+n]
}

// closeBytes closes the keys and values of records not read, which gives
// their pages back to kafka-go's pool, and returns their length.
func closeBytes(bs ...protocol.Bytes) (n int64) {
	for _, b := range bs {
		if b != nil {
			n += int64(b.Len())
			_ = b.Close()
		}
	}
	return n
}

// readKeyValue copies a record's key and value out of the fetch buffer,
// together into bytes rb carves (each capped at its length, so that an
// append to one cannot reach the other or the next record's), and closes
// them, which gives the buffer's pages back to kafka-go's pool once every
// record's bytes are read. A null key or value is nil, an empty one
// empty.
func readKeyValue(k, v protocol.Bytes, rb *recordBytes) (key, value []byte, err error) {
	var kl, vl int
	if k != nil {
		kl = k.Len()
	}
	if v != nil {
		vl = v.Len()
	}
	buf := rb.take(kl + vl)
	if k != nil {
		key = buf[:kl:kl]
		_, err = io.ReadFull(k, key)
		err = errors.Join(err, k.Close())
	}
	if v != nil {
		value = buf[kl:]
		_, verr := io.ReadFull(v, value)
		err = errors.Join(err, verr, v.Close())
	}
	return key, value, err
}

// Missing asks the brokers for topics' metadata.
func (k *kafkaGo) Missing(ctx context.Context, topics []string) (map[string]bool, error) {
	resp, err := k.commits.Metadata(ctx, &kafka.MetadataRequest{Addr: k.commits.Addr, Topics: topics})
	if err != nil {
		return nil, err
	}
	answers := make([]topicAnswer, len(resp.Topics))
	for i, t := range resp.Topics {
		answers[i] = topicAnswer{name: t.Name, err: t.Error, partitions: len(t.Partitions)}
	}
	return missingOf(topics, answers, kafka.UnknownTopicOrPartition)
}

// Offsets asks the partitions' leaders for their first offsets and their
// ends.
func (k *kafkaGo) Offsets(ctx context.Context, ps []Partition) (map[Partition]Range, error) {
	offs, _, err := k.listOffsets(ctx, k.commits, ps)
	return offs, err
}

// listOffsets asks the leaders of ps for their first offsets and their
// ends (see Range) through cl: the ranges of the partitions that
// answered, and the errors of those that did not.
func (k *kafkaGo) listOffsets(ctx context.Context, cl *kafka.Client, ps []Partition) (map[Partition]Range, map[Partition]error, error) {
	req := &kafka.ListOffsetsRequest{Addr: cl.Addr, Topics: map[string][]kafka.OffsetRequest{}}
	if k.cfg.ReadCommitted {
		req.IsolationLevel = kafka.ReadCommitted // the last offset is the last stable one
	}
	for _, p := range ps {
		req.Topics[p.Topic] = append(req.Topics[p.Topic], kafka.FirstOffsetOf(p.Partition), kafka.LastOffsetOf(p.Partition))
	}
	resp, err := cl.ListOffsets(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	offs := map[Partition]Range{}
	var errs map[Partition]error
	for topic, parts := range resp.Topics {
		for _, p := range parts {
			if p.Error != nil {
				if errs == nil {
					errs = map[Partition]error{}
				}
				errs[Partition{topic, p.Partition}] = p.Error
				continue
			}
			offs[Partition{topic, p.Partition}] = Range{First: p.FirstOffset, Last: p.LastOffset}
		}
	}
	return offs, errs, nil
}

// Committed asks the group's coordinator for the committed offsets of ps
// (an OffsetFetch through the commits client, which finds the
// coordinator). A group the broker does not know has none.
func (k *kafkaGo) Committed(ctx context.Context, ps []Partition) (map[Partition]int64, error) {
	req := &kafka.OffsetFetchRequest{Addr: k.commits.Addr, GroupID: k.cfg.Group, Topics: map[string][]int{}}
	for _, p := range ps {
		req.Topics[p.Topic] = append(req.Topics[p.Topic], p.Partition)
	}
	resp, err := k.commits.OffsetFetch(ctx, req)
	if err == nil {
		err = resp.Error
	}
	if errors.Is(err, kafka.GroupIdNotFound) {
		return map[Partition]int64{}, nil
	}
	if err != nil {
		return nil, err
	}
	offs := map[Partition]int64{}
	for topic, parts := range resp.Topics {
		for _, p := range parts {
			if p.Error == nil && p.CommittedOffset >= 0 {
				offs[Partition{topic, p.Partition}] = p.CommittedOffset
			}
		}
	}
	return offs, nil
}

// Partitions asks the brokers for topics' metadata.
func (k *kafkaGo) Partitions(ctx context.Context, topics []string) ([]Partition, error) {
	resp, err := k.commits.Metadata(ctx, &kafka.MetadataRequest{Addr: k.commits.Addr, Topics: topics})
	if err != nil {
		return nil, err
	}
	var ps []Partition
	for _, t := range resp.Topics {
		if t.Error != nil || !slices.Contains(topics, t.Name) {
			continue
		}
		for _, p := range t.Partitions {
			ps = append(ps, Partition{t.Name, p.ID})
		}
	}
	return ps, nil
}

// Close waits for the partition readers to finish closing (each bounded
// by FetchMaxWait plus a second; they have been closing since the
// quiesce), then leaves the group. kafka-go's ConsumerGroup.Close
// finishes a join in flight (the group may be waiting for other members
// to rejoin), syncs, then sends LeaveGroup: a member that exits before
// that is given partitions by the generation its join completes, and
// they stall until its session expires. So the leave waits for it for
// what is left until deadline (see leaveWait), and says so when that runs
// out first. Then Close sends a LeaveGroup of its own for the member
// kafka-go joined with (memberWatch): kafka-go's may not have been sent.
func (k *kafkaGo) Close(deadline time.Time) {
	k.closing.Wait()
	if k.cg != nil {
		bound := k.cfg.leaveWait(deadline)
		if wait.Within(bound, func() { k.cg.Close() }) {
			if id := k.member.joined(); id != "" {
				k.leaveFor(id, max(LeaveTimeout, time.Until(deadline)))
			}
		} else {
			k.log.Warn("leaving the group did not finish within the stop's budget (a join may be in flight); the broker will give this member partitions until its session expires",
				"phase", "leave", "waited", bound, "session_timeout", k.cfg.SessionTimeout)
		}
	}
	k.commits.Transport.(*kafka.Transport).CloseIdleConnections()
	k.fetches.Transport.(*kafka.Transport).CloseIdleConnections()
}

// kafka-go (v0.4.51) leaves the group when its ConsumerGroup is closed,
// but not on every path, and says so on none of them:
//   - a join that finishes at the close (the group was waiting for
//     another member to rejoin) and whose sync then answers
//     REBALANCE_IN_PROGRESS (the group began rebalancing again) makes its
//     loop return without a LeaveGroup;
//   - its leaveGroup logs "Leaving group" first, then looks the
//     coordinator up on a new connection, and a failed dial or lookup
//     (a broker restarting, a coordinator moving) returns before the
//     request is sent, with no line.
//
// The broker then keeps the gone member and gives it partitions, which
// stall until its session expires. So Close always sends a LeaveGroup of
// its own for the member kafka-go joined with: after kafka-go's own leave
// the broker answers UNKNOWN_MEMBER_ID, which is fine. memberWatch
// follows that member ID from the group's own log lines.
//
// The line is kafka-go's (consumergroup.go); should a version word it
// differently the watch sees nothing and the stop is what it was.
const (
	kgJoined      = "Joined group %s as member %s in generation %d"
	kgJoinedLower = "joined group %s as member %s in generation %d"
)

type memberWatch struct {
	mu sync.Mutex
	id string // the member ID of kafka-go's last successful join
}

// logger returns next, noting the member lines on the way.
func (w *memberWatch) logger(next kafka.LoggerFunc) kafka.LoggerFunc {
	return func(format string, args ...any) {
		w.note(format, args)
		next(format, args...)
	}
}

// note takes in one of kafka-go's group log lines.
func (w *memberWatch) note(format string, args []any) {
	if format != kgJoined && format != kgJoinedLower || len(args) < 2 {
		return
	}
	id, ok := args[1].(string)
	if !ok || id == "" {
		return
	}
	w.mu.Lock()
	w.id = id
	w.mu.Unlock()
}

// joined returns the member ID of kafka-go's last successful join, or ""
// before any.
func (w *memberWatch) joined() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.id
}

// leaveFor sends a LeaveGroup for member id, within bound. A member the
// broker no longer knows (kafka-go's own leave went through) is not an
// error.
func (k *kafkaGo) leaveFor(id string, bound time.Duration) {
	client := &kafka.Client{Addr: kafka.TCP(k.cfg.Brokers...), Timeout: bound, Transport: k.cfg.transport(nil)}
	defer client.Transport.(*kafka.Transport).CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	resp, err := client.LeaveGroup(ctx, &kafka.LeaveGroupRequest{GroupID: k.cfg.Group, Members: []kafka.LeaveGroupRequestMember{{ID: id}}})
	if err == nil {
		err = resp.Error
		for _, m := range resp.Members {
			if err == nil && m.Error != nil {
				err = m.Error
			}
		}
	}
	switch {
	case errors.Is(err, kafka.UnknownMemberId):
		k.log.Debug("member already left the group", "phase", "leave", "member", id)
	case err != nil:
		k.log.Warn("leaving the group for a member kafka-go did not leave with failed; the broker will give it partitions until its session expires",
			"phase", "leave", "member", id, "err", err, "session_timeout", k.cfg.SessionTimeout)
	default:
		k.log.Info("left the group for a member kafka-go did not leave with", "phase", "leave", "member", id)
	}
}

// kafkaLogger adapts kafka-go's Printf logging to slog: Debug for its
// chatter, Warn for its errors, repeated errors with backoff (WarnFunc).
// kafka-go's text goes in the attribute kafka_message, never in a second
// msg key. Once ctx (the fetching's) has ended, errors are Debug too:
// they come from the closes the stop or a rebalance started (a reader's
// connection ends with an i/o timeout, its loops with context.Canceled).
func (k *kafkaGo) kafkaLogger(ctx context.Context, log *slog.Logger, isErr bool) kafka.LoggerFunc {
	if isErr {
		return func(format string, args ...any) {
			if ctx.Err() != nil || cancelled(args) {
				// A loop of kafka-go ended by our own Close: routine.
				log.Debug("kafka-go", "kafka_message", fmt.Sprintf(format, args...))
				return
			}
			k.cfg.WarnFunc(log, "kafka-go: "+format, "kafka-go error", "kafka_message", fmt.Sprintf(format, args...))
		}
	}
	return func(format string, args ...any) {
		if log.Enabled(context.Background(), slog.LevelDebug) {
			log.Debug("kafka-go", "kafka_message", fmt.Sprintf(format, args...))
		}
	}
}

// cancelled reports whether one of kafka-go's log arguments is a
// context.Canceled error: the line reports a loop our Close ended.
func cancelled(args []any) bool {
	for _, a := range args {
		if err, ok := a.(error); ok && errors.Is(err, context.Canceled) {
			return true
		}
	}
	return false
}

// kafkaGoWriter is the dead-letter writer on kafka-go: a Writer with a
// transport of its own, closed with it.
type kafkaGoWriter struct{ w *kafka.Writer }

func newKafkaGoWriter(cfg Config, dial func(context.Context, string, string) (net.Conn, error)) *kafkaGoWriter {
	return &kafkaGoWriter{w: &kafka.Writer{
		Addr:                   kafka.TCP(cfg.Brokers...),
		Balancer:               &kafka.Hash{},
		RequiredAcks:           kafka.RequireAll,
		BatchTimeout:           time.Millisecond,
		WriteTimeout:           PublishTimeout,
		AllowAutoTopicCreation: false,
		Transport:              cfg.transport(dial),
	}}
}

func (k *kafkaGoWriter) Write(ctx context.Context, recs []OutRecord) []error {
	msgs := make([]kafka.Message, len(recs))
	for i, d := range recs {
		hs := make([]kafka.Header, len(d.Headers))
		for j, h := range d.Headers {
			hs[j] = kafka.Header{Key: h.Key, Value: h.Value}
		}
		msgs[i] = kafka.Message{Topic: d.Topic, Key: d.Key, Value: d.Value, Headers: hs, Time: d.Time}
	}
	err := k.w.WriteMessages(ctx, msgs...)
	var each kafka.WriteErrors
	errors.As(err, &each)
	errs := make([]error, len(recs))
	for i := range errs {
		errs[i] = err
		if each != nil {
			errs[i] = each[i]
		}
	}
	return errs
}

func (k *kafkaGoWriter) Close() error {
	err := k.w.Close()
	k.w.Transport.(*kafka.Transport).CloseIdleConnections()
	return err
}
