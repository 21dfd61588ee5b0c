package runtime

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
)

// The consumer group on franz-go (Config.Client = ClientFranzGo): one kgo
// client for the runtime's life, a cooperative-sticky member, static when
// Config.Instance is set. It drives one generation (group.go) whose
// partitions come and go with franz-go's assignment callbacks, applied by
// the generation's keeper. One poll loop reads the fetches of every
// broker and hands each partition's records to that partition's queue, a
// partSource its fetch loop reads; a queue that stays full (FetchQueue
// records or 1 MiB) for pauseGrace pauses its partition's fetching until
// its fetch loop has handed on half of it, so a full pool or a suspended
// class stops only its own partitions.

// Fetch settings of the franz-go client: one fetch response per broker of
// at most franzFetchMaxBytes, at most fetchMaxBytes (1 MiB, Kafka's
// max.partition.fetch.bytes default) of it per partition. kgo buffers one
// response per broker until the poll loop takes it; franz-go's own
// default of 50 MiB made fetches of hundreds of partitions slower, not
// faster, on the embedded broker (see docs/bench.md).
const franzFetchMaxBytes = 3 << 20

// franzGo is the runtime's franz-go consumer group member.
type franzGo struct {
	r  *Runtime
	cl *kgo.Client
	g  *generation

	// life ends the generation's keeper once the client is closed.
	life    context.Context
	endLife context.CancelFunc

	mu sync.Mutex
	// queues is each owned partition's record queue; the poll loop drops
	// the records of a partition that has none (not, or no more, ours).
	queues map[tp]*franzQueue
}

// startFranzGo creates the kgo client for topics, as r.franz, and starts
// its poll loop and the generation's keeper. The poll loop ends with
// fetchCtx; the membership lasts until the stop's leave (r.franz.leave).
func (r *Runtime) startFranzGo(fetchCtx context.Context, topics []string, poll *sync.WaitGroup) error {
	f := &franzGo{r: r, queues: map[tp]*franzQueue{}}
	f.life, f.endLife = context.WithCancel(context.Background())
	f.g = r.newGeneration(fetchCtx, ClientFranzGo, -1, f.commit, f.source)
	reset := kgo.NewOffset().AtStart()
	if r.cfg.StartOffset == StartLast {
		reset = kgo.NewOffset().AtEnd()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(r.cfg.Brokers...),
		kgo.ClientID(r.cfg.ClientID),
		kgo.ConsumerGroup(r.cfg.Group),
		kgo.ConsumeTopics(topics...),
		// Cooperative-sticky, and range for a group that still has
		// kafka-go members (its default balancers are range and round
		// robin): a rolling move from kafka-go to franz-go runs eager
		// until the last kafka-go member is gone, then cooperative.
		kgo.Balancers(kgo.CooperativeStickyBalancer(), kgo.RangeBalancer()),
		kgo.SessionTimeout(r.cfg.SessionTimeout),
		kgo.RebalanceTimeout(r.cfg.RebalanceTimeout),
		kgo.HeartbeatInterval(r.cfg.SessionTimeout / 3),
		kgo.ConsumeResetOffset(reset),
		kgo.DisableAutoCommit(),
		// A rebalance waits for the poll loop to hand out what it polled:
		// no record of a revoked partition reaches a queue after the
		// revocation.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(f.assigned),
		kgo.OnPartitionsRevoked(f.revoked),
		kgo.OnPartitionsLost(f.lost),
		kgo.FetchMaxWait(r.cfg.FetchMaxWait),
		kgo.FetchMaxBytes(franzFetchMaxBytes),
		kgo.FetchMaxPartitionBytes(fetchMaxBytes),
		kgo.WithLogger(&franzLogger{r: r, log: r.log.With("client", string(ClientFranzGo)), ctx: fetchCtx}),
		// The runtime's metrics are Prometheus'; no client telemetry
		// (KIP-714) to the brokers, whose final push would add a second
		// to a close against a broker that does not answer.
		kgo.DisableClientMetrics(),
	}
	if r.cfg.staticID != "" {
		opts = append(opts, kgo.InstanceID(r.cfg.staticID))
	}
	if r.conn.secure {
		// The runtime's own dial does TLS and SASL, so their failures are
		// typed, counted and logged as on kafka-go (connect.go).
		opts = append(opts, kgo.Dialer(r.dial))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		f.endLife()
		return fmt.Errorf("runtime: franz-go client: %w", err)
	}
	f.cl = cl
	r.franz = f
	r.setGen(f.g)
	go f.g.keep(f.life)
	f.g.fetching.Store(true)
	lag := f.g.startLag(fetchCtx)
	poll.Go(func() {
		f.poll(fetchCtx)
		f.g.quiesce() // the stop's quiesce waits for the fetch loops
		f.g.fetching.Store(false)
		lag.stop()
	})
	return nil
}

// assigned is franz-go's OnPartitionsAssigned: the partitions start
// fetching where franz-go resumes them (the committed offset).
func (f *franzGo) assigned(_ context.Context, cl *kgo.Client, added map[string][]int32) {
	_, gen := cl.GroupMetadata()
	f.g.id.Store(gen)
	var ps []partStart
	f.mu.Lock()
	for topic, parts := range added {
		for _, p := range parts {
			ps = append(ps, partStart{topic: topic, partition: int(p), offset: -1})
			f.queues[tp{topic, int(p)}] = newFranzQueue(f, topic, p)
		}
	}
	f.mu.Unlock()
	f.g.request(change{add: ps})
	f.r.ready.joined.Store(true)
	// As kafka-go's path logs each generation it joins: cooperative
	// generations keep their partitions, so the count is all it holds.
	f.r.log.Info("joined group generation", "group", f.r.cfg.Group, "generation", gen, "partitions", len(f.g.trackers()))
}

// revoked is franz-go's OnPartitionsRevoked: the partitions moving away
// stop, give back what they did not start, wait up to RevokeTimeout for
// what runs, and commit, all before franz-go rejoins.
func (f *franzGo) revoked(_ context.Context, cl *kgo.Client, gone map[string][]int32) {
	f.end(cl, gone, false)
}

// lost is franz-go's OnPartitionsLost: as revoked, but the membership is
// gone (session expired, fenced), so nothing is committed.
func (f *franzGo) lost(_ context.Context, cl *kgo.Client, gone map[string][]int32) {
	f.end(cl, gone, true)
}

func (f *franzGo) end(cl *kgo.Client, gone map[string][]int32, lost bool) {
	var ps []tp
	for topic, parts := range gone {
		for _, p := range parts {
			ps = append(ps, tp{topic, int(p)})
		}
	}
	if len(ps) == 0 {
		return
	}
	f.g.request(change{remove: ps, lost: lost})
	f.mu.Lock()
	var paused map[string][]int32
	for _, k := range ps {
		if q := f.queues[k]; q != nil {
			if q.drop() {
				if paused == nil {
					paused = map[string][]int32{}
				}
				paused[k.topic] = append(paused[k.topic], int32(k.partition))
			}
			delete(f.queues, k)
		}
	}
	f.mu.Unlock()
	if paused != nil {
		// A pause outlives the assignment: a partition that comes back
		// must fetch.
		cl.ResumeFetchPartitions(paused)
	}
}

// source is the generation's partSource of a partition: its queue.
func (f *franzGo) source(_ context.Context, tr *tracker, _ int64) partSource {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queues[tp{tr.topic, tr.partition}]
	if q == nil { // revoked before it started
		q = newFranzQueue(f, tr.topic, int32(tr.partition))
		q.drop()
	}
	return q
}

// poll reads fetches until ctx ends and hands each partition's records to
// its queue. It never blocks on a queue: a full one pauses its partition.
func (f *franzGo) poll(ctx context.Context) {
	for {
		fetches := f.cl.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			f.cl.AllowRebalance()
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			f.r.metrics.fetchError(topic)
			f.r.logs.warn(f.r.log, "fetch failed", "fetch failed; franz-go retries", "topic", topic, "partition", p, "err", err)
		})
		var full []*franzQueue
		f.mu.Lock()
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			if q := f.queues[tp{p.Topic, int(p.Partition)}]; q != nil && q.put(p.Records, p.HighWatermark) {
				full = append(full, q)
			}
		})
		f.mu.Unlock()
		pauseFull(full)
		f.cl.AllowRebalance()
	}
}

// pauseFull pauses the partitions of the queues in full that are still
// full after pauseGrace. Meanwhile franz-go's next fetch may be on its
// way, for these partitions too: memory per partition is FetchQueue
// records and up to two partition fetches (1 MiB each).
func pauseFull(full []*franzQueue) {
	if len(full) == 0 {
		return
	}
	grace := time.NewTimer(pauseGrace)
	defer grace.Stop()
	late := false
	for _, q := range full {
		for !late && q.full() {
			select {
			case <-q.room:
			case <-grace.C:
				late = true
			}
		}
	}
	for _, q := range full {
		q.pauseIfFull()
	}
}

// commit commits offsets in the member's current generation; franz-go
// sends its generation and member ID, so the broker fences a member that
// lost them. Bounded by commitTimeout.
func (f *franzGo) commit(offsets map[string]map[int]int64) error {
	req := make(map[string]map[int32]kgo.EpochOffset, len(offsets))
	for topic, parts := range offsets {
		m := make(map[int32]kgo.EpochOffset, len(parts))
		for p, off := range parts {
			m[int32(p)] = kgo.EpochOffset{Epoch: -1, Offset: off}
		}
		req[topic] = m
	}
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	var errs []error
	f.cl.CommitOffsetsSync(ctx, req, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, err))
				}
			}
		}
	})
	return errors.Join(errs...)
}

// leave ends the membership within wait, then closes the client and ends
// the keeper. A static member does not leave the group (its restart
// within SessionTimeout takes its partitions back without a rebalance); a
// dynamic one sends LeaveGroup, after a join in flight if there is one.
// kgo's Close waits for the leave without a bound, so the leave is made
// first with wait as its deadline, after which Close is immediate.
func (f *franzGo) leave(wait time.Duration) {
	// The close gets a second of wait (kgo ends its fetch sessions within
	// one), the leave the rest.
	closeWait := min(leaveTimeout, wait/2)
	ctx, cancel := context.WithTimeout(context.Background(), wait-closeWait)
	err := f.cl.LeaveGroupContext(ctx)
	cancel()
	if err != nil {
		f.r.log.Warn("leaving the group did not finish within the stop's budget (a join may be in flight, or the broker does not answer); the broker will give this member partitions until its session expires",
			"phase", "leave", "waited", wait, "session_timeout", f.r.cfg.SessionTimeout, "err", err)
	}
	if !within(closeWait, f.cl.Close) {
		f.r.log.Warn("closing the franz-go client did not finish in time; left closing", "phase", "leave", "waited", closeWait)
	}
	f.endLife()
	closedWithin(f.g.ended, closeWait) // a commit in flight ends within commitTimeout
}

// pauseGrace is how long the poll loop waits for a partition's fetch loop
// to take records from a full queue before it pauses the partition: a
// queue that is only full because one fetch brought more than FetchQueue
// records drains within it, and is never paused. A pause costs more than
// the wait: a partition resumed has to wait for the next fetch to its
// broker, which waits up to FetchMaxWait when the broker's other
// partitions have nothing new.
const pauseGrace = 20 * time.Millisecond

// queueBytes caps the key and value bytes a franz-go partition queue
// holds, whatever FetchQueue: a partition fetch's worth (1 MiB), so that
// large records do not multiply FetchQueue's memory.
const queueBytes = fetchMaxBytes

// franzQueue is one partition's records between the poll loop (put) and
// the partition's fetch loop (next): the partSource of franz-go. It holds
// about FetchQueue records or queueBytes of keys and values, whichever
// comes first: one that stays full for pauseGrace pauses its partition's
// fetching, and the fetch loop resumes it once half of both are handed on.
type franzQueue struct {
	f         *franzGo
	topic     string
	partition int32
	high, low int64 // pause at high (FetchQueue) records, resume at low

	// buffered counts the records put and not yet handed on by next,
	// bytes their keys' and values' bytes.
	buffered, bytes atomic.Int64
	// room is signalled when buffered falls below high.
	room chan struct{}

	mu      sync.Mutex
	recs    []*kgo.Record
	hwm     int64
	paused  atomic.Bool   // set and cleared under mu, with the pause or resume
	dropped bool          // the partition is gone: next ends
	wake    chan struct{} // signalled by put and drop

	// The fetch loop's own: the records it took and not yet returned.
	taken   []*kgo.Record
	takenHW int64
}

func newFranzQueue(f *franzGo, topic string, p int32) *franzQueue {
	high := int64(f.r.cfg.FetchQueue)
	return &franzQueue{f: f, topic: topic, partition: p, high: high, low: high / 2,
		wake: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// put appends a fetch's records and reports whether the queue is full.
func (q *franzQueue) put(recs []*kgo.Record, hwm int64) (full bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dropped {
		return false
	}
	q.recs = append(q.recs, recs...)
	q.hwm = hwm
	n := 0
	for _, r := range recs {
		n += len(r.Key) + len(r.Value)
	}
	q.bytes.Add(int64(n))
	q.buffered.Add(int64(len(recs)))
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return q.full()
}

// full reports whether the queue holds high records, or queueBytes, or
// more.
func (q *franzQueue) full() bool { return q.buffered.Load() >= q.high || q.bytes.Load() >= queueBytes }

// pauseIfFull pauses the partition's fetching if the queue is still full.
func (q *franzQueue) pauseIfFull() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dropped || q.paused.Load() {
		return
	}
	// paused first, then the check: a record handed on meanwhile sees
	// paused and resumes (it waits for mu, so never before the pause), or
	// the queue is no longer full and there is no pause.
	q.paused.Store(true)
	if !q.full() {
		q.paused.Store(false)
		return
	}
	q.f.cl.PauseFetchPartitions(map[string][]int32{q.topic: {q.partition}})
}

// resume resumes the partition's fetching if it is paused.
func (q *franzQueue) resume() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dropped || !q.paused.Load() {
		return
	}
	q.paused.Store(false)
	q.f.cl.ResumeFetchPartitions(map[string][]int32{q.topic: {q.partition}})
}

// drop ends the queue and reports whether its partition was paused.
func (q *franzQueue) drop() (paused bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dropped, q.recs = true, nil
	paused = q.paused.Swap(false)
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return paused
}

func (q *franzQueue) next(ctx context.Context) (fetchedRecord, bool) {
	for len(q.taken) == 0 {
		q.mu.Lock()
		if q.dropped {
			q.mu.Unlock()
			return fetchedRecord{}, false
		}
		q.taken, q.recs, q.takenHW = q.recs, nil, q.hwm
		q.mu.Unlock()
		if len(q.taken) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fetchedRecord{}, false
		case <-q.wake:
		}
	}
	if ctx.Err() != nil {
		return fetchedRecord{}, false
	}
	rec := q.taken[0]
	q.taken[0] = nil
	q.taken = q.taken[1:]
	size := int64(len(rec.Key) + len(rec.Value))
	n, b := q.buffered.Add(-1), q.bytes.Add(-size)
	switch {
	case q.paused.Load():
		if n <= q.low && b <= queueBytes/2 {
			q.resume()
		}
	case n == q.high-1 || b < queueBytes && b+size >= queueBytes:
		select { // below a bound: the poll loop may wait for room (pauseFull)
		case q.room <- struct{}{}:
		default:
		}
	}
	fr := fetchedRecord{offset: rec.Offset, hwm: q.takenHW, time: recordTime(rec.Timestamp), key: rec.Key, value: rec.Value}
	if len(rec.Headers) > 0 {
		fr.headers = make([]handoff.Header, len(rec.Headers))
		for i, h := range rec.Headers {
			fr.headers[i] = handoff.Header{Key: h.Key, Value: h.Value}
		}
	}
	return fr, true
}

// close: the queue has nothing to join; the poll loop drops what comes
// for a partition once end removed its queue.
func (q *franzQueue) close() {}

// franzLogger writes franz-go's log lines to the runtime's logger: its
// errors and warnings at Warn (a run of the same line once per
// logBackoff interval), its info at Debug, as kafka-go's are.
type franzLogger struct {
	r   *Runtime
	log *slog.Logger
	ctx context.Context // the fetching's: once it ended, errors are routine
}

func (l *franzLogger) Level() kgo.LogLevel {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelWarn
}

func (l *franzLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if level > kgo.LogLevelWarn || l.ctx.Err() != nil {
		l.log.Debug("franz-go: "+msg, keyvals...)
		return
	}
	l.r.logs.warn(l.log, "franz-go: "+msg, "franz-go: "+msg, keyvals...)
}

// franzDLQ is the dead-letter writer on franz-go: a producer client of its
// own (the group member's closes at the leave, before the publisher has
// finished), acks from all in-sync replicas, records placed as kafka-go's
// Hash balancer places them (kgo's Sarama-compatible hasher over FNV-1a).
type franzDLQ struct{ cl *kgo.Client }

func (r *Runtime) newFranzDLQ(dial func(context.Context, string, string) (net.Conn, error)) (dlqWriter, error) {
	fnv1a := func(b []byte) uint32 {
		h := fnv.New32a()
		h.Write(b)
		return h.Sum32()
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(r.cfg.Brokers...),
		kgo.ClientID(r.cfg.ClientID),
		kgo.Dialer(dial),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Not idempotent, as kafka-go's writer: an idempotent producer
		// cannot fail a record whose request is in flight, so the stop
		// could not abandon a publish the broker never answers.
		// Publishing is best effort; the state file keeps every dead
		// letter.
		kgo.DisableIdempotentWrite(),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(fnv1a))),
		kgo.RecordDeliveryTimeout(publishTimeout),
		kgo.ProducerLinger(0),
		kgo.DisableClientMetrics(),
		kgo.WithLogger(&franzLogger{r: r, log: r.log.With("client", string(ClientFranzGo)), ctx: context.Background()}),
	)
	if err != nil {
		return nil, fmt.Errorf("runtime: franz-go dead-letter writer: %w", err)
	}
	return &franzDLQ{cl: cl}, nil
}

func (f *franzDLQ) write(ctx context.Context, recs []deadRecord) []error {
	rs := make([]*kgo.Record, len(recs))
	for i, d := range recs {
		rec := &kgo.Record{Topic: d.topic, Key: d.key, Value: d.value, Timestamp: d.time}
		if d.time.IsZero() {
			rec.Timestamp = time.Now()
		}
		rec.Headers = make([]kgo.RecordHeader, len(d.headers))
		for j, h := range d.headers {
			rec.Headers[j] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
		rs[i] = rec
	}
	res := f.cl.ProduceSync(ctx, rs...)
	errs := make([]error, len(recs))
	for i := range res {
		errs[i] = res[i].Err
	}
	return errs
}

func (f *franzDLQ) close() error {
	f.cl.Close()
	return nil
}
