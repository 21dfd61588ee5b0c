package kclient

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime/internal/wait"
)

// The client on franz-go (github.com/twmb/franz-go/pkg/kgo), the default: one kgo
// client for the member's life, a cooperative-sticky member (with
// Config.Consumer, a member of the consumer group protocol, KIP-848, whose
// broker assigns), static when Config.Instance is set. It is one cooperative session whose partitions
// come and go with franz-go's assignment callbacks, applied by the
// session's keeper. One poll loop reads the fetches of every broker and
// hands each partition's records to that partition's queue, the Source
// its fetch loop reads; a queue that stays full (FetchQueue records, or
// its share of QueuesBytes) for pauseGrace pauses its partition's
// fetching until its fetch loop has handed on half of it, so a full pool
// or a suspended class stops only its own partitions. The topic check and the lag sampler go
// through a second kgo client, with no group.

// Fetch settings of the franz-go client: one fetch response per broker of
// at most franzFetchMaxBytes, at most FetchMaxBytes (1 MiB, Kafka's
// max.partition.fetch.bytes default) of it per partition. kgo buffers one
// response per broker until the poll loop takes it; franz-go's own
// default of 50 MiB made fetches of hundreds of partitions slower, not
// faster, on the embedded broker (see docs/bench-journal.md).
const franzFetchMaxBytes = 3 << 20

// franzGo is the franz-go client: the group member (cl, made by Join)
// and the metadata client (admin).
type franzGo struct {
	cfg   Config
	log   *slog.Logger // with client=franz-go
	admin *kgo.Client
	cl    *kgo.Client

	keeper Keeper        // the session's, set by Join before begun closes
	begun  chan struct{} // closed once keeper is set: the callbacks wait for it
	kept   chan struct{} // closed when the keeper's Keep returned
	poll   sync.WaitGroup

	// life ends the keeper once the member's client is closed.
	life    context.Context
	endLife context.CancelFunc

	mu sync.Mutex
	// queues is each owned partition's record queue; the poll loop drops
	// the records of a partition that has none (not, or no more, ours).
	queues map[Partition]*franzQueue
	// queueBytes is each queue's share of QueuesBytes (see
	// queueBytesFor), set with queues.
	queueBytes atomic.Int64
	// gone is, per topic, when its next UNKNOWN_TOPIC_ID check may begin
	// (topicGone), and goneSaid the topics whose absence the last check
	// logged; under mu.
	gone     map[string]time.Time
	goneSaid map[string]bool
	// leaving is set by the leave: its revocations are the leave's,
	// whose handover is told once the member left.
	leaving atomic.Bool
	// rejoined is the latest generation after which this member joined
	// the next rebalance by itself (a revocation's) or through Rejoin:
	// a handover of that generation needs no second join, which would
	// start a rebalance of its own after this one.
	rejoined atomic.Int32
	// joins sees the member's joins (a kgo hook): a handover that comes
	// while one is under way needs no other.
	joins joinWatch
}

// joinWatch is a kgo hook on the member's client that notes when it
// wrote its last JoinGroup request and read its last SyncGroup answer:
// between them the member is joining a rebalance. kgo does not say so
// otherwise, and a ForceRebalance then would be kept for after the join,
// and start a rebalance of its own.
type joinWatch struct {
	joined, synced atomic.Int64 // unix nanoseconds
}

func (w *joinWatch) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.JoinGroup) && err == nil {
		w.joined.Store(time.Now().UnixNano())
	}
}

func (w *joinWatch) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key == int16(kmsg.SyncGroup) {
		w.synced.Store(time.Now().UnixNano())
	}
}

// joining reports whether the member wrote a JoinGroup after the last
// SyncGroup answer, less than bound ago (a join that failed without a
// sync is over by then).
func (w *joinWatch) joining(bound time.Duration) bool {
	j := w.joined.Load()
	return j > w.synced.Load() && time.Since(time.Unix(0, j)) < bound
}

func newFranzGo(cfg Config) (*franzGo, error) {
	f := &franzGo{cfg: cfg, log: cfg.Log.With("client", FranzGo), queues: map[Partition]*franzQueue{},
		gone: map[string]time.Time{}, goneSaid: map[string]bool{}, begun: make(chan struct{}), kept: make(chan struct{})}
	f.rejoined.Store(-1)
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.DisableClientMetrics(),
	}
	if cfg.DialFunc != nil {
		opts = append(opts, kgo.Dialer(cfg.DialFunc))
	}
	admin, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("franz-go metadata client: %w", err)
	}
	f.admin = admin
	return f, nil
}

// Join creates the member's kgo client for topics and starts its poll
// loop and the session's keeper. The poll loop ends with ctx; the
// membership lasts until Close.
func (f *franzGo) Join(ctx context.Context, topics []string, begin BeginFunc) error {
	cfg := &f.cfg
	f.life, f.endLife = context.WithCancel(context.Background())
	opts := f.groupOpts(ctx, topics)
	if cfg.Consumer {
		// KIP-848: the broker assigns, with the assignor kgo names
		// after the first balancer (cooperative-sticky: "uniform").
		if err := f.checkConsumerProtocol(ctx); err != nil {
			f.endLife()
			return err
		}
		opts = append(opts, kgo.ServerSideBalancer())
	}
	if cfg.DialFunc != nil {
		// The runtime's own dial does TLS and SASL, so their failures are
		// typed, counted and logged as on kafka-go.
		opts = append(opts, kgo.Dialer(cfg.DialFunc))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		f.endLife()
		return fmt.Errorf("franz-go client: %w", err)
	}
	f.cl = cl
	f.keeper = begin(ctx, f)
	close(f.begun)
	go func() {
		defer close(f.kept)
		f.keeper.Keep(f.life)
	}()
	f.poll.Go(func() {
		f.pollLoop(ctx)
		f.keeper.Quiesce() // the stop's quiesce waits for the fetch loops
	})
	return nil
}

// groupOpts returns the kgo options of the member's client for topics:
// the group's, the fetch's and the hooks'. Its logger logs under ctx.
func (f *franzGo) groupOpts(ctx context.Context, topics []string) []kgo.Opt {
	cfg := &f.cfg
	reset := kgo.NewOffset().AtStart()
	if cfg.StartLast {
		reset = kgo.NewOffset().AtEnd()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(topics...),
		// Cooperative-sticky, and range for a group that still has
		// kafka-go members (its default balancers are range and round
		// robin): a rolling move from kafka-go to franz-go runs eager
		// until the last kafka-go member is gone, then cooperative.
		kgo.Balancers(kgo.CooperativeStickyBalancer(), kgo.RangeBalancer()),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
		// Under the consumer protocol the broker's interval rules
		// (each heartbeat's answer sets the next).
		kgo.HeartbeatInterval(cfg.heartbeat()),
		kgo.ConsumeResetOffset(reset),
		kgo.DisableAutoCommit(),
		// Commit makes its OffsetCommit requests itself, by topic name:
		// version 9 at most (10 names topics by ID only).
		kgo.MaxVersions(commitVersions()),
		// A rebalance waits for the poll loop to hand out what it polled:
		// no record of a revoked partition reaches a queue after the
		// revocation.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(f.assigned),
		kgo.OnPartitionsRevoked(f.revoked),
		kgo.OnPartitionsLost(f.lost),
		kgo.WithHooks(&f.joins),
		kgo.FetchMaxWait(cfg.FetchMaxWait),
		kgo.FetchMaxBytes(franzFetchMaxBytes),
		kgo.FetchMaxPartitionBytes(FetchMaxBytes),
		kgo.WithLogger(&franzLogger{cfg: cfg, log: f.log, ctx: ctx, recreated: f.topicGone, outOfRange: f.outOfRange}),
		// The runtime's metrics are Prometheus'; no client telemetry
		// (KIP-714) to the brokers, whose final push would add a second
		// to a close against a broker that does not answer.
		kgo.DisableClientMetrics(),
		// Each batch's records are decoded into a slice that comes back
		// once Next has handed them all on (recordSlices).
		kgo.WithPools(&recordSlices{}),
		// A transaction's marker comes as a record, which the queue hands
		// on as a Marker: the commit goes past it, and a partition that
		// ends with one is caught up.
		kgo.KeepControlRecords(),
	}
	if cfg.ReadCommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	if cfg.Instance != "" {
		opts = append(opts, kgo.InstanceID(cfg.Instance))
	}
	return opts
}

func (f *franzGo) Wait() { f.poll.Wait() }

// checkConsumerProtocol asks the brokers whether they serve the consumer
// group protocol (ConsumerGroupHeartbeat version 1, Kafka 4.0 on), within
// CommitTimeout: kgo would join with the classic protocol without a word
// when they do not. A broker that does not answer is left to kgo, which
// asks again as it joins (and says so at Error, see franzLogger, if the
// protocol turns out to be off).
func (f *franzGo) checkConsumerProtocol(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, CommitTimeout)
	defer cancel()
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, f.admin)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			f.log.Warn("could not ask the brokers whether they serve the consumer group protocol (KIP-848); joining with it anyway",
				"group_protocol", "consumer", "err", err)
		}
		return nil
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey == int16(kmsg.ConsumerGroupHeartbeat) && k.MaxVersion >= 1 {
			return nil
		}
	}
	return fmt.Errorf("kclient: GroupProtocol consumer: the brokers do not serve the consumer group protocol (KIP-848's ConsumerGroupHeartbeat version 1: Kafka 4.0 or later, with group.coordinator.rebalance.protocols including consumer); use GroupProtocol classic with them")
}

// commitVersions is the member client's request versions: franz-go's
// own (kversion.Stable), with OffsetCommit at most version 9.
func commitVersions() *kversion.Versions {
	v := kversion.Stable()
	if top, ok := v.LookupMaxKeyVersion(int16(kmsg.OffsetCommit)); ok && top > 9 {
		v.SetMaxKeyVersion(int16(kmsg.OffsetCommit), 9)
	}
	return v
}

// The session: franz-go's membership for the client's life.

func (f *franzGo) Eager() bool          { return false }
func (f *franzGo) Generation() int32    { return -1 }
func (f *franzGo) Assigned() []Assigned { return nil }

// assigned is franz-go's OnPartitionsAssigned: the partitions start
// fetching where franz-go resumes them (the committed offset).
func (f *franzGo) assigned(_ context.Context, cl *kgo.Client, added map[string][]int32) {
	<-f.begun
	_, gen := cl.GroupMetadata()
	var ps []Assigned
	f.mu.Lock()
	for topic, parts := range added {
		for _, p := range parts {
			ps = append(ps, Assigned{Partition{topic, int(p)}, -1})
			f.queues[Partition{topic, int(p)}] = newFranzQueue(f, topic, p)
		}
	}
	f.queueBytes.Store(queueBytesFor(len(f.queues)))
	f.mu.Unlock()
	f.keeper.Assign(gen, ps)
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
	var ps []Partition
	for topic, parts := range gone {
		for _, p := range parts {
			ps = append(ps, Partition{topic, int(p)})
		}
	}
	if len(ps) == 0 {
		return
	}
	<-f.begun
	f.keeper.Revoke(ps, lost)
	f.mu.Lock()
	var paused map[string][]int32
	for _, k := range ps {
		if q := f.queues[k]; q != nil {
			if q.drop() {
				if paused == nil {
					paused = map[string][]int32{}
				}
				paused[k.Topic] = append(paused[k.Topic], int32(k.Partition))
			}
			delete(f.queues, k)
		}
	}
	f.queueBytes.Store(queueBytesFor(len(f.queues)))
	f.mu.Unlock()
	if paused != nil {
		// A pause outlives the assignment: a partition that comes back
		// must fetch.
		cl.ResumeFetchPartitions(paused)
	}
	if !lost && !f.leaving.Load() && f.cfg.Handovers != nil {
		// Committed: the partitions' next owners may start; this
		// member rejoins when the callback returns.
		if member, gen := cl.GroupMetadata(); member != "" {
			f.noteRejoin(gen)
			f.cfg.Handovers.HandedOver(member, gen)
		}
	}
}

// Rejoin joins the group's next rebalance now (kgo's ForceRebalance;
// under the consumer protocol a heartbeat now) when another member
// gave partitions away in this member's generation or a later one and
// this member is not joining already; see [Rejoiner].
func (f *franzGo) Rejoin(member string, gen int32) bool {
	if f.cl == nil || f.leaving.Load() {
		return false
	}
	own, cur := f.cl.GroupMetadata()
	if own == "" || own == member {
		return false
	}
	// Generations order the classic protocol's rebalances; under the
	// consumer protocol they are each member's own epochs, and a
	// heartbeat costs no rebalance.
	if !f.cfg.Consumer && (cur > gen || f.joins.joining(f.cfg.RebalanceTimeout) || !f.noteRejoin(gen)) {
		return false
	}
	f.cl.ForceRebalance()
	return true
}

// noteRejoin records that this member joins the rebalance after
// generation gen; false when it already did.
func (f *franzGo) noteRejoin(gen int32) bool {
	for {
		old := f.rejoined.Load()
		if gen <= old {
			return false
		}
		if f.rejoined.CompareAndSwap(old, gen) {
			return true
		}
	}
}

// Source is the partition's queue.
func (f *franzGo) Source(_ context.Context, a Assigned) Source {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queues[a.Partition]
	if q == nil { // revoked before it started
		q = newFranzQueue(f, a.Topic, int32(a.Partition.Partition))
		q.drop()
	}
	return q
}

// pollLoop reads fetches until ctx ends and hands each partition's
// records to its queue. It never blocks on a queue: a full one pauses its
// partition.
func (f *franzGo) pollLoop(ctx context.Context) {
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
			f.cfg.FetchErrorFunc(topic)
			f.cfg.FetchFunc(Partition{topic, int(p)}, err)
			f.mu.Lock()
			if q := f.queues[Partition{topic, int(p)}]; q != nil {
				q.backOff()
			}
			f.mu.Unlock()
			f.cfg.WarnFunc(f.cfg.Log, "fetch failed", "fetch failed; franz-go retries", "topic", topic, "partition", p, "err", err)
			if errors.Is(err, kerr.UnknownTopicID) {
				f.topicGone(ctx, topic)
			}
		})
		var full []*franzQueue
		f.mu.Lock()
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			f.cfg.FetchFunc(Partition{p.Topic, int(p.Partition)}, nil)
			end := p.HighWatermark
			if f.cfg.ReadCommitted {
				end = p.LastStableOffset
			}
			if q := f.queues[Partition{p.Topic, int(p.Partition)}]; q != nil && q.put(p.Records, end) {
				full = append(full, q)
			}
		})
		f.mu.Unlock()
		pauseFull(full)
		f.cl.AllowRebalance()
	}
}

// The least time between two checks of a topic whose fetches fail with
// UNKNOWN_TOPIC_ID (topicGone), and between a purge of it and the next
// check: a purge is a rebalance of the topic.
const (
	goneCheckEvery = 5 * time.Second
	goneAfterPurge = 30 * time.Second
)

// topicGone is called when a fetch of topic failed with
// UNKNOWN_TOPIC_ID: the brokers no longer know the topic ID the member
// fetches (franz-go has retried it already); or when franz-go logged
// that its metadata has a new ID for the topic. A topic deleted and created
// again under its name has a new ID, which franz-go's fetch cursors never
// take up: they fail for good. So the brokers are asked, at most every
// goneCheckEvery and in the background, whether the name exists. If it
// does, the topic was recreated: it is purged from the member and added
// back, which revokes its partitions (their offsets of the old topic are
// not committed: franz-go refuses them) and assigns them again, to start
// from the group's committed offset of the new topic or, without one,
// from the start offset; one that is past the new log's end is reset the
// same way. If it does not, an ERROR says so; the partitions' fetches
// keep failing (and the runtime's stuck signal shows them) until the
// topic is created again.
func (f *franzGo) topicGone(ctx context.Context, topic string) {
	if ctx.Err() != nil { // the poll loop ends: Wait may be under way
		return
	}
	f.mu.Lock()
	if next, ok := f.gone[topic]; ok && time.Now().Before(next) {
		f.mu.Unlock()
		return
	}
	f.gone[topic] = time.Now().Add(goneCheckEvery)
	f.mu.Unlock()
	f.poll.Go(func() { f.checkGone(ctx, topic) })
}

// checkGone is topicGone's check of topic, bounded by CommitTimeout.
func (f *franzGo) checkGone(ctx context.Context, topic string) {
	select {
	case <-f.begun: // f.cl is set
	case <-ctx.Done():
		return
	}
	mctx, cancel := context.WithTimeout(ctx, CommitTimeout)
	resp, err := f.metadata(mctx, []string{topic})
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		f.cfg.WarnFunc(f.log, "recreated check", "fetches fail with UNKNOWN_TOPIC_ID and the brokers did not answer whether the topic exists; asking again at the next failure",
			"topic", topic, "err", err)
		return
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if t.ErrorCode == 0 && len(t.Partitions) > 0 {
			f.log.Warn("topic deleted and created again on the brokers (its name has a new topic ID, which franz-go does not take up: fetches of the old one fail with UNKNOWN_TOPIC_ID): its partitions are revoked and assigned again, starting from the group's committed offsets of the new topic or, without them, from the start offset; the old topic's uncommitted offsets are not committed",
				"topic", topic, "topic_id", fmt.Sprintf("%x", t.TopicID), "partitions", len(t.Partitions))
			f.mu.Lock()
			f.gone[topic] = time.Now().Add(goneAfterPurge)
			delete(f.goneSaid, topic)
			f.mu.Unlock()
			f.cl.PurgeTopicsFromClient(topic)
			f.cl.AddConsumeTopics(topic)
			return
		}
		f.saidGone(topic, "the metadata answers "+kerr.ErrorForCode(t.ErrorCode).Error())
		return
	}
	f.saidGone(topic, "the metadata does not list it")
}

// saidGone logs at ERROR, once until the topic is back, that topic no
// longer exists, as the metadata said (why).
func (f *franzGo) saidGone(topic, why string) {
	f.mu.Lock()
	said := f.goneSaid[topic]
	f.goneSaid[topic] = true
	f.mu.Unlock()
	if !said {
		f.log.Error("topic no longer exists on the brokers (fetches fail with UNKNOWN_TOPIC_ID, "+why+"): its partitions are not fetched until it is created again",
			"topic", topic)
	}
}

// outOfRange logs at Warn that p's fetch at offset was answered
// OFFSET_OUT_OF_RANGE, which franz-go resets per ConsumeResetOffset (the
// start offset), with p's log range as the brokers tell it now, asked in
// the background (franz-go calls its logger on its own goroutines).
func (f *franzGo) outOfRange(ctx context.Context, p Partition, offset int64) {
	to := "the log's start (StartOffset first)"
	if f.cfg.StartLast {
		to = "the log's end (StartOffset last)"
	}
	f.poll.Go(func() {
		args := []any{"topic", p.Topic, "partition", p.Partition, "offset", offset, "reset_to", to}
		octx, cancel := context.WithTimeout(ctx, CommitTimeout)
		rs, err := f.Offsets(octx, []Partition{p})
		cancel()
		if r, ok := rs[p]; ok && err == nil {
			args = append(args, "log_start", r.First, "log_end", r.Last)
		} else if err != nil {
			args = append(args, "log_range_err", err)
		}
		f.log.Warn("fetch offset out of range (the log was deleted past it, truncated, or the topic was created again); resetting", args...)
	})
}

// pauseFull pauses the partitions of the queues in full that are still
// full after pauseGrace. Meanwhile franz-go's next fetch may be on its
// way, for these partitions too: memory per partition is FetchQueue
// records or its share of QueuesBytes, and up to two partition fetches
// (1 MiB each).
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

// Commit commits offsets in the member's current generation: it sends
// the member ID and generation franz-go holds (GroupMetadata), and the
// broker refuses a member that lost them. It makes the OffsetCommit
// itself rather than through kgo's CommitOffsetsSync, which holds every
// commit until a join and sync in progress are done: a join lasts until
// every member has rejoined (each notices the rebalance at its next
// heartbeat, up to HeartbeatInterval later, or once its revoke's
// handlers returned), can last longer than CommitTimeout, so the commits of a member
// that keeps its partitions through a cooperative rebalance, and a
// stop's final commit, failed for its whole length although the broker
// accepts a commit in the current generation until the join is answered
// (PreparingRebalance). A commit that meets the short moment between the
// join's answer and the sync (REBALANCE_IN_PROGRESS), or that the join's
// new generation overtook (ILLEGAL_GENERATION: franz-go holds the new
// generation by then, or within staleTries retries), is sent again in the
// generation franz-go holds then, every commitRetry. Under the consumer
// group protocol the generation franz-go holds is the member epoch, which
// the broker checks instead; its STALE_MEMBER_EPOCH is sent again as
// ILLEGAL_GENERATION is. Bounded by
// CommitTimeout. Only the keeper commits, one commit at a time, so
// commits stay in order.
func (f *franzGo) Commit(offsets map[string]map[int]int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), CommitTimeout)
	defer cancel()
	var retry *time.Timer
	stale := 0 // ILLEGAL_GENERATION refusals in a row with no newer generation
	for {
		member, gen := f.cl.GroupMetadata()
		if member == "" {
			return errors.New("kclient: commit: not a member of the group yet")
		}
		refused, err := f.commitIn(ctx, member, gen, offsets)
		switch refused {
		case refusedRebalance:
			stale = 0
		case refusedGeneration:
			if _, now := f.cl.GroupMetadata(); now != gen {
				stale = 0
				break
			}
			if stale++; stale > staleTries {
				return err // the member lost its generation
			}
		default:
			return err
		}
		if retry == nil {
			retry = time.NewTimer(commitRetry)
			defer retry.Stop()
		} else {
			retry.Reset(commitRetry)
		}
		select {
		case <-retry.C:
		case <-ctx.Done():
			return fmt.Errorf("%w (sent again for %s)", err, CommitTimeout)
		}
	}
}

// commitRetry is how long Commit waits before it sends again a commit
// refused during a rebalance; staleTries is how many times it sends again
// one refused ILLEGAL_GENERATION while franz-go still holds that
// generation (the join's answer may be on its way).
const (
	commitRetry = 50 * time.Millisecond
	staleTries  = 3
)

// A commit refusal that Commit may answer by sending the commit again.
const (
	refusedNot        = iota // accepted, or refused for good
	refusedRebalance         // REBALANCE_IN_PROGRESS: between the join's answer and the sync
	refusedGeneration        // ILLEGAL_GENERATION: a newer generation, or the member fenced
)

// refusalOf returns which refusal a partition's commit error is. Under the
// consumer group protocol (KIP-848) the generation is the member epoch,
// and STALE_MEMBER_EPOCH is its ILLEGAL_GENERATION: the heartbeat that
// moved the epoch on was answered after the commit was sent, and the
// answer's epoch is franz-go's a moment later.
func refusalOf(err error) int {
	switch {
	case errors.Is(err, kerr.RebalanceInProgress):
		return refusedRebalance
	case errors.Is(err, kerr.IllegalGeneration), errors.Is(err, kerr.StaleMemberEpoch):
		return refusedGeneration
	}
	return refusedNot
}

// commitIn sends one OffsetCommit of offsets as member in generation gen
// and returns its error, and which refusal it was (see Commit).
func (f *franzGo) commitIn(ctx context.Context, member string, gen int32, offsets map[string]map[int]int64) (refused int, err error) {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = f.cfg.Group
	req.MemberID = member
	req.Generation = gen
	if f.cfg.Instance != "" {
		req.InstanceID = kmsg.StringPtr(f.cfg.Instance)
	}
	for topic, parts := range offsets {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = topic
		for p, off := range parts {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition = int32(p)
			rp.Offset = off
			rp.LeaderEpoch = -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, f.cl)
	if err != nil {
		return refusedNot, err
	}
	var errs []error
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			perr := kerr.ErrorForCode(p.ErrorCode)
			if perr == nil {
				continue
			}
			// A refusal of the group's is the same for every
			// partition: a mix, like any other error, is not sent
			// again.
			r := refusalOf(perr)
			if len(errs) > 0 && r != refused {
				r = refusedNot
			}
			refused = r
			errs = append(errs, fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, perr))
		}
	}
	if len(errs) == 0 {
		return refusedNot, nil
	}
	return refused, fmt.Errorf("generation %d: %w", gen, errors.Join(errs...))
}

// Close ends the membership within leaveWait, then closes the clients
// and ends the keeper. A static member does not leave the group (its
// restart within SessionTimeout takes its partitions back without a
// rebalance; under the consumer protocol kgo's leave is the heartbeat of
// epoch -2, which keeps them for it until the broker's session timeout);
// a dynamic one sends LeaveGroup (epoch -1 under the consumer protocol),
// after a join in flight if there is one. kgo's Close waits for the leave without a bound, so the
// leave is made first with the wait as its deadline, after which Close is
// immediate.
func (f *franzGo) Close(deadline time.Time) {
	if f.cl != nil {
		f.leave(f.cfg.leaveWait(deadline))
	}
	f.admin.Close()
}

func (f *franzGo) leave(bound time.Duration) {
	// The close gets a second of bound (kgo ends its fetch sessions
	// within one), the leave the rest.
	closeWait := min(LeaveTimeout, bound/2)
	ctx, cancel := context.WithTimeout(context.Background(), bound-closeWait)
	member, gen := f.cl.GroupMetadata()
	f.leaving.Store(true)
	err := f.cl.LeaveGroupContext(ctx)
	cancel()
	switch {
	case err != nil:
		f.cfg.Log.Warn("leaving the group did not finish within the stop's budget (a join may be in flight, or the broker does not answer); the broker will give this member partitions until its session expires",
			"phase", "leave", "waited", bound, "session_timeout", f.cfg.SessionTimeout, "err", err)
	case f.cfg.Instance == "" && member != "" && f.cfg.Handovers != nil:
		// A dynamic member left: the group rebalances without it. (A
		// static one keeps its partitions for its restart.)
		f.cfg.Handovers.HandedOver(member, gen)
	}
	if !wait.Within(closeWait, f.cl.Close) {
		f.cfg.Log.Warn("closing the franz-go client did not finish in time; left closing", "phase", "leave", "waited", closeWait)
	}
	f.endLife()
	wait.ClosedWithin(f.kept, closeWait) // a commit in flight ends within CommitTimeout
}

// metadata asks the brokers for topics' metadata, never creating a
// topic: what Missing and Partitions read.
func (f *franzGo) metadata(ctx context.Context, topics []string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	return req.RequestWith(ctx, f.admin)
}

// Missing asks the brokers for topics' metadata, never creating a topic.
func (f *franzGo) Missing(ctx context.Context, topics []string) (map[string]bool, error) {
	resp, err := f.metadata(ctx, topics)
	if err != nil {
		return nil, err
	}
	answers := make([]topicAnswer, 0, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic != nil {
			answers = append(answers, topicAnswer{name: *t.Topic, err: kerr.ErrorForCode(t.ErrorCode), partitions: len(t.Partitions)})
		}
	}
	return missingOf(topics, answers, kerr.UnknownTopicOrPartition)
}

// Partitions asks the brokers for topics' metadata, never creating a
// topic.
func (f *franzGo) Partitions(ctx context.Context, topics []string) ([]Partition, error) {
	resp, err := f.metadata(ctx, topics)
	if err != nil {
		return nil, err
	}
	var ps []Partition
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		for _, p := range t.Partitions {
			ps = append(ps, Partition{*t.Topic, int(p.Partition)})
		}
	}
	return ps, nil
}

// Offsets asks the partitions' leaders for their first offsets and their
// ends (two ListOffsets, each sent to the leaders by kgo).
func (f *franzGo) Offsets(ctx context.Context, ps []Partition) (map[Partition]Range, error) {
	first, err := f.listOffsets(ctx, ps, -2)
	if err != nil {
		return nil, err
	}
	last, err := f.listOffsets(ctx, ps, -1)
	if err != nil {
		return nil, err
	}
	offs := make(map[Partition]Range, len(last))
	for p, l := range last {
		if fo, ok := first[p]; ok {
			offs[p] = Range{First: fo, Last: l}
		}
	}
	return offs, nil
}

// Committed asks the group's coordinator for the committed offsets of ps
// (an OffsetFetch through the metadata client, which kgo sends to the
// coordinator). A group the broker does not know has none.
func (f *franzGo) Committed(ctx context.Context, ps []Partition) (map[Partition]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = f.cfg.Group
	topics, parts := groupByTopic(ps)
	for i, t := range topics {
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic = t
		rt.Partitions = parts[i]
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, f.admin)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[Partition]int64{}, nil
	}
	if err != nil {
		return nil, err
	}
	offs := map[Partition]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 && p.Offset >= 0 {
				offs[Partition{t.Topic, int(p.Partition)}] = p.Offset
			}
		}
	}
	return offs, nil
}

// groupByTopic groups ps by topic, topics in the order they first
// appear and each topic's partitions in the order given: the shape of
// the OffsetFetch and ListOffsets requests.
func groupByTopic(ps []Partition) (topics []string, parts [][]int32) {
	index := map[string]int{}
	for _, p := range ps {
		i, ok := index[p.Topic]
		if !ok {
			i = len(topics)
			index[p.Topic] = i
			topics = append(topics, p.Topic)
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], int32(p.Partition))
	}
	return topics, parts
}

// listOffsets returns the offset at timestamp (-2: the first, -1: the
// end, see Range) of each of ps that answered without an error. It fails
// only when no leader answered.
func (f *franzGo) listOffsets(ctx context.Context, ps []Partition, timestamp int64) (map[Partition]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	if f.cfg.ReadCommitted {
		req.IsolationLevel = 1 // -1 answers the last stable offset
	}
	topics, parts := groupByTopic(ps)
	for i, t := range topics {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = t
		for _, n := range parts[i] {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = n
			rp.Timestamp = timestamp
			rp.CurrentLeaderEpoch = -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	offs := map[Partition]int64{}
	var errs []error
	answered := false
	for _, shard := range f.admin.RequestSharded(ctx, req) {
		if shard.Err != nil {
			errs = append(errs, shard.Err)
			continue
		}
		answered = true
		resp := shard.Resp.(*kmsg.ListOffsetsResponse)
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode == 0 {
					offs[Partition{t.Topic, int(p.Partition)}] = p.Offset
				}
			}
		}
	}
	if !answered && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return offs, nil
}

// pauseGrace is how long the poll loop waits for a partition's fetch loop
// to take records from a full queue before it pauses the partition: a
// queue that is only full because one fetch brought more than FetchQueue
// records drains within it, and is never paused. A pause costs more than
// the wait: a partition resumed has to wait for the next fetch to its
// broker, which waits up to FetchMaxWait when the broker's other
// partitions have nothing new.
const pauseGrace = 20 * time.Millisecond

// QueueBytes caps the key and value bytes a franz-go partition queue
// holds, whatever FetchQueue: a partition fetch's worth (1 MiB), so that
// large records do not multiply FetchQueue's memory.
const QueueBytes = FetchMaxBytes

// QueuesBytes is what the partition queues of one franz-go member hold in
// all, in key and value bytes: each queue holds its share of it, at most
// QueueBytes and at least MinQueueBytes. Up to 16 partitions, each has
// QueueBytes; beyond, the records fetched ahead stay about this much
// however many partitions the member owns, not 1 MiB more per partition
// (a consumer slower than its fetches fills every queue to its bound).
// A fetch response of franzFetchMaxBytes spreads over many partitions'
// queues and stays in memory while any of its records is queued or in
// the runtime's hands: this bounds the record bytes the queues hold, not
// the responses behind them (see docs/bench-journal.md on the 300-partition
// sweep).
const QueuesBytes = 16 << 20

// MinQueueBytes is the least a franz-go partition queue holds before it
// pauses its partition, whatever the number of partitions: a few of a
// fetch's shares of franzFetchMaxBytes at a thousand partitions.
const MinQueueBytes = 64 << 10

// queueBytesFor returns the key and value bytes each of n partition
// queues holds (see QueuesBytes).
func queueBytesFor(n int) int64 {
	if n <= 0 {
		return QueueBytes
	}
	return min(QueueBytes, max(MinQueueBytes, QueuesBytes/int64(n)))
}

// franzQueue is one partition's records between the poll loop (put) and
// the partition's fetch loop (next): the Source of franz-go. It holds
// about FetchQueue records or its share of QueuesBytes of keys and
// values, whichever comes first: one that stays full for pauseGrace
// pauses its partition's fetching, and the fetch loop resumes it once
// half of both are handed on.
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
	end     int64       // the partition's end (Record.End) in the last fetch put
	paused  atomic.Bool // set and cleared under mu, with the pause or resume
	dropped bool        // the partition is gone: next ends
	// backingOff says the partition is paused after a failed fetch
	// until retry fires (backOff); wait is the current wait, 0 after
	// a fetch that brought records.
	backingOff bool
	wait       time.Duration
	retry      *time.Timer
	wake       chan struct{} // signalled by put and drop

	// The fetch loop's own: the records it took and not yet returned, and
	// the records and bytes Next handed on that buffered and bytes do not
	// count off yet (see handOn).
	taken        []*kgo.Record
	takenEnd     int64
	pendN, pendB int64
}

// handOnEvery is the most records Next hands on before it counts them
// off the queue's buffered and bytes: two atomic additions every so many
// records, not each record, shared with the poll loop's put. The queue
// looks fuller than it is by at most that many records; Next counts off
// whatever is pending before it waits.
const handOnEvery = 16

func newFranzQueue(f *franzGo, topic string, p int32) *franzQueue {
	high := int64(f.cfg.FetchQueue)
	return &franzQueue{f: f, topic: topic, partition: p, high: high, low: high / 2,
		wake: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// put appends a fetch's records, end the partition's end (Record.End)
// in it, and reports whether the queue is full.
func (q *franzQueue) put(recs []*kgo.Record, end int64) (full bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dropped {
		return false
	}
	q.recs = append(q.recs, recs...)
	q.end = end
	q.wait = 0
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

// full reports whether the queue holds high records, or its share of
// QueuesBytes, or more.
func (q *franzQueue) full() bool {
	return q.buffered.Load() >= q.high || q.bytes.Load() >= q.f.queueBytes.Load()
}

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

// resume resumes the partition's fetching if it is paused, unless it
// backs off after a failed fetch (its retry resumes it).
func (q *franzQueue) resume() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dropped || !q.paused.Load() {
		return
	}
	q.paused.Store(false)
	if !q.backingOff {
		q.f.cl.ResumeFetchPartitions(map[string][]int32{q.topic: {q.partition}})
	}
}

// backOff pauses the partition's fetching after a failed fetch, for a
// wait that doubles from fetchBackoffMin to fetchBackoffMax while its
// fetches fail (as kafka-go's partition readers wait): franz-go fetches
// a partition again as soon as the poll loop took the error, so a broker
// that answers a partition's fetch with an error at once (an unknown
// topic ID, a storage error) had it fetched thousands of times a second.
// A backoff under way is left as it is.
func (q *franzQueue) backOff() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dropped || q.backingOff {
		return
	}
	q.wait = min(max(2*q.wait, fetchBackoffMin), fetchBackoffMax)
	q.backingOff = true
	if !q.paused.Load() {
		q.f.cl.PauseFetchPartitions(map[string][]int32{q.topic: {q.partition}})
	}
	q.retry = time.AfterFunc(q.wait, q.endBackOff)
}

// endBackOff ends backOff's wait: the partition fetches again, unless
// its queue is full (paused; its fetch loop resumes it).
func (q *franzQueue) endBackOff() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dropped || !q.backingOff {
		return
	}
	q.backingOff = false
	if !q.paused.Load() {
		q.f.cl.ResumeFetchPartitions(map[string][]int32{q.topic: {q.partition}})
	}
}

// drop ends the queue and reports whether its partition was paused
// (queue full, or backing off).
func (q *franzQueue) drop() (paused bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dropped, q.recs = true, nil
	paused = q.paused.Swap(false) || q.backingOff
	if q.retry != nil {
		q.retry.Stop()
	}
	q.backingOff = false
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return paused
}

func (q *franzQueue) Ready() int { return len(q.taken) }

func (q *franzQueue) Next(ctx context.Context) (Record, bool) {
	for len(q.taken) == 0 {
		q.mu.Lock()
		if q.dropped {
			q.mu.Unlock()
			return Record{}, false
		}
		q.taken, q.recs, q.takenEnd = q.recs, nil, q.end
		q.mu.Unlock()
		if len(q.taken) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return Record{}, false
		case <-q.wake:
		}
	}
	if ctx.Err() != nil {
		return Record{}, false
	}
	rec := q.taken[0]
	q.taken[0] = nil
	q.taken = q.taken[1:]
	q.pendN++
	q.pendB += int64(len(rec.Key) + len(rec.Value))
	if q.pendN == handOnEvery || len(q.taken) == 0 {
		q.handOn()
	}
	if rec.Attrs.IsControl() {
		fr := Record{Offset: rec.Offset, End: q.takenEnd, Marker: true}
		rec.Recycle() // clears rec
		return fr, true
	}
	fr := Record{Offset: rec.Offset, End: q.takenEnd, Time: recordTime(rec.Timestamp), Key: rec.Key, Value: rec.Value}
	if len(rec.Headers) > 0 {
		fr.Headers = make([]handoff.Header, len(rec.Headers))
		for i, h := range rec.Headers {
			fr.Headers[i] = handoff.Header{Key: h.Key, Value: h.Value}
		}
	}
	// Nothing of rec is used after this: its key, value and headers'
	// bytes are the fetch response's, not the pooled slice's
	// (recordSlices).
	rec.Recycle()
	return fr, true
}

// handOn counts the records Next handed on since the last call off the
// queue: it resumes a paused partition once both counts are at half their
// bounds or below, and tells a poll loop waiting for room (pauseFull)
// once either falls below its bound.
func (q *franzQueue) handOn() {
	k, size := q.pendN, q.pendB
	q.pendN, q.pendB = 0, 0
	n, b := q.buffered.Add(-k), q.bytes.Add(-size)
	share := q.f.queueBytes.Load()
	switch {
	case q.paused.Load():
		if n <= q.low && b <= share/2 {
			q.resume()
		}
	case n < q.high && n+k >= q.high || b < share && b+size >= share:
		select { // below a bound: the poll loop may wait for room (pauseFull)
		case q.room <- struct{}{}:
		default:
		}
	}
}

// Close counts off what Next handed on (the fetch loop calls it as it
// ends); the queue has nothing to join: the poll loop drops what comes
// for a partition once end removed its queue.
func (q *franzQueue) Close() {
	if q.pendN > 0 {
		q.handOn()
	}
}

// franzLogger writes franz-go's log lines to the runtime's logger: its
// errors and warnings at Warn (a run of the same line with backoff, by
// WarnFunc), its info at Debug, as kafka-go's are.
type franzLogger struct {
	cfg *Config
	log *slog.Logger
	ctx context.Context // the fetching's: once it ended, errors are routine
	// recreated, when set, is told of a topic franz-go found deleted and
	// created again (a new topic ID under its name): franzGo.topicGone.
	recreated func(ctx context.Context, topic string)
	// outOfRange, when set, is told of a partition whose fetch offset
	// was out of range, which franz-go resets (franzGo.outOfRange).
	outOfRange func(ctx context.Context, p Partition, offset int64)
}

// Level is Info, for franz-go's out-of-range resets (logged at Info on a
// partition's first fetch); its other Info lines go to Debug.
func (l *franzLogger) Level() kgo.LogLevel {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelInfo
}

func (l *franzLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if l.outOfRange != nil && level <= kgo.LogLevelInfo && l.ctx.Err() == nil && strings.Contains(msg, "OFFSET_OUT_OF_RANGE") {
		var p Partition
		offset := int64(-1)
		for i := 0; i+1 < len(keyvals); i += 2 {
			switch k, _ := keyvals[i].(string); k {
			case "topic":
				p.Topic, _ = keyvals[i+1].(string)
			case "partition":
				v, _ := keyvals[i+1].(int32)
				p.Partition = int(v)
			case "prior_offset":
				offset, _ = keyvals[i+1].(int64)
			}
		}
		l.log.Debug("franz-go: "+msg, keyvals...)
		l.outOfRange(l.ctx, p, offset)
		return
	}
	if l.cfg.Consumer && strings.HasPrefix(msg, "falling back to standard consumer group management") {
		l.log.Error("GroupProtocol consumer: the brokers refused the consumer group protocol (KIP-848) although they list it (is it enabled: group.coordinator.rebalance.protocols?); this member joined with the classic protocol",
			append([]any{"group_protocol", "consumer"}, keyvals...)...)
		return
	}
	if level > kgo.LogLevelWarn || l.ctx.Err() != nil {
		l.log.Debug("franz-go: "+msg, keyvals...)
		return
	}
	l.cfg.WarnFunc(l.log, "franz-go: "+msg, "franz-go: "+msg, keyvals...)
	if l.recreated != nil && strings.Contains(msg, "deleted and recreated") {
		for i := 0; i+1 < len(keyvals); i += 2 {
			if k, _ := keyvals[i].(string); k == "topic" {
				if topic, ok := keyvals[i+1].(string); ok {
					l.recreated(l.ctx, topic)
				}
			}
		}
	}
}

// franzWriter is the dead-letter writer on franz-go: a producer client of
// its own (the group member's closes at the leave, before the publisher
// has finished), acks from all in-sync replicas, records placed as
// kafka-go's Hash balancer places them (kgo's Sarama-compatible hasher
// over FNV-1a). A write is bounded by its context alone: kgo's
// RecordDeliveryTimeout counts from a record's Timestamp, which is the
// original record's, so it would fail at once every dead letter of a
// record older than the timeout.
type franzWriter struct{ cl *kgo.Client }

func newFranzWriter(cfg Config, dial func(context.Context, string, string) (net.Conn, error)) (*franzWriter, error) {
	fnv1a := func(b []byte) uint32 {
		h := fnv.New32a()
		h.Write(b)
		return h.Sum32()
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.Dialer(dial),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Not idempotent, as kafka-go's writer: an idempotent producer
		// cannot fail a record whose request is in flight, so the stop
		// could not abandon a publish the broker never answers.
		// Publishing is best effort; the state file keeps every dead
		// letter.
		kgo.DisableIdempotentWrite(),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(fnv1a))),
		// No RecordDeliveryTimeout: Write's context bounds the write
		// (non-idempotent, a request in flight ends with it too).
		kgo.ProducerLinger(0),
		kgo.DisableClientMetrics(),
		kgo.WithLogger(&franzLogger{cfg: &cfg, log: cfg.Log.With("client", FranzGo), ctx: context.Background()}),
	)
	if err != nil {
		return nil, fmt.Errorf("franz-go dead-letter writer: %w", err)
	}
	return &franzWriter{cl: cl}, nil
}

func (f *franzWriter) Write(ctx context.Context, recs []OutRecord) []error {
	rs := make([]*kgo.Record, len(recs))
	for i, d := range recs {
		rec := &kgo.Record{Topic: d.Topic, Key: d.Key, Value: d.Value, Timestamp: d.Time}
		if d.Time.IsZero() {
			rec.Timestamp = time.Now()
		}
		rec.Headers = make([]kgo.RecordHeader, len(d.Headers))
		for j, h := range d.Headers {
			rec.Headers[j] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
		rs[i] = rec
	}
	// ProduceSync's results come in the order the records ended, not in
	// the order given.
	at := make(map[*kgo.Record]int, len(rs))
	for i, r := range rs {
		at[r] = i
	}
	errs := make([]error, len(recs))
	for _, r := range f.cl.ProduceSync(ctx, rs...) {
		errs[at[r.Record]] = r.Err
	}
	return errs
}

func (f *franzWriter) Close() error {
	f.cl.Close()
	return nil
}

// PausedPartitions returns the partitions whose fetching a franz-go
// client paused because their queues were full, or while they back off
// after a failed fetch, by topic; nil for
// another client or before Join. For diagnostics and tests.
func PausedPartitions(c Client) map[string][]int32 {
	f, ok := c.(*franzGo)
	if !ok || f.cl == nil {
		return nil
	}
	return f.cl.PauseFetchPartitions(nil)
}

// QueueFill returns how many records, and how many bytes of keys and
// values, each owned partition's queue of a franz-go client holds; nil
// for another client. For diagnostics and tests.
func QueueFill(c Client) map[Partition][2]int64 {
	f, ok := c.(*franzGo)
	if !ok {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fill := make(map[Partition][2]int64, len(f.queues))
	for p, q := range f.queues {
		fill[p] = [2]int64{q.buffered.Load(), q.bytes.Load()}
	}
	return fill
}

// RefreshPartitions makes the group's client read its topics' metadata
// now, so that the group's leader sees a topic that gained partitions
// and rebalances them in (kgo otherwise looks every metadata max age, 5
// minutes). A no-op before Join made the client.
func (f *franzGo) RefreshPartitions() {
	select {
	case <-f.begun:
		f.cl.ForceMetadataRefresh()
	default:
	}
}
