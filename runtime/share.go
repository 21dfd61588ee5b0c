package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/runtime/internal/service"
	"github.com/handoff-go/handoff/snapshot"
)

// HeaderDeliveryCount is set on the dead letter of a share class's record
// (see Class.ShareGroup), in the state file and on DeadLetterTopic: the
// broker's delivery count of the record when it became a dead letter, in
// decimal. It counts the deliveries to any member, stops included (a
// stop releases what it holds), not the handler's attempts, which
// HeaderAttempts counts.
const HeaderDeliveryCount = "handoff-delivery-count"

// The acknowledgements of a share record.
const (
	shareAccept  = kclient.AckAccept
	shareRelease = kclient.AckRelease
	shareReject  = kclient.AckReject
)

// checkShare reports the problems of the share classes (Class.ShareGroup)
// with bad and moves each one's Topics to its shareTopics, so that the
// consumer group, the changelog and the topic check see a class without
// topics.
func (cfg *Config) checkShare(bad func(string, ...any)) {
	groups := map[string]string{}
	for i := range cfg.Classes {
		c := &cfg.Classes[i]
		if c.ShareGroup == "" {
			continue
		}
		if len(c.Topics) == 0 {
			bad("class %q: ShareGroup %q needs Topics", c.Name, c.ShareGroup)
		}
		if cfg.Client == ClientKafkaGo {
			bad("class %q: ShareGroup needs Client %q (kafka-go has no share groups)", c.Name, ClientFranzGo)
		}
		if c.Ordered {
			bad("class %q: ShareGroup and Ordered do not go together: a share group hands a key's records to any member, in no order", c.Name)
		}
		if c.Retry.Redeliveries > 0 {
			bad("class %q: ShareGroup does not support Retry.Redeliveries: a share record handed back is redelivered by the broker at once, with no delay (retry in place with MaxAttempts instead)", c.Name)
		}
		if c.ShareGroup == cfg.Group {
			bad("class %q: ShareGroup %q is the consumer group's ID (Group); a share group needs an ID of its own", c.Name, c.ShareGroup)
		}
		if other, ok := groups[c.ShareGroup]; ok {
			bad("classes %q and %q have the same ShareGroup %q", other, c.Name, c.ShareGroup)
		}
		groups[c.ShareGroup] = c.Name
		c.shareTopics, c.Topics = c.Topics, nil
	}
}

// topicsOf returns the class's topics, a share class's included.
func (c *Class) topicsOf() []string {
	if c.ShareGroup != "" {
		return c.shareTopics
	}
	return c.Topics
}

// shareFeed is a share class's member of its share group: the poll loop
// that feeds the class's pool one poll at a time, the renewal of the
// locks of the records it holds, and their acknowledgements.
//
// One poll at a time: a poll auto-accepts the records of the previous one
// that are not acknowledged yet, and records fetched while a handler
// blocks would wait under a lock that nothing renews. So the loop polls
// only once every record of its last poll is settled (acknowledged), and
// a poll acquires at most max records per broker (strict), the pool's
// room when it is empty; every record it holds, queued, running or
// waiting out a backoff, has its lock renewed before it ends.
type shareFeed struct {
	c   *class
	cfg kclient.ShareConfig
	// client is the member, nil while a pause keeps the class out of the
	// group (see pauseLeave).
	client atomic.Pointer[kclient.Share]
	log    *slog.Logger
	// limit is the group's delivery limit (Prepare).
	limit atomic.Int64
	// fail saves a record the member hands back at its delivery limit
	// as a dead letter; handling ends an item's ties to the pool it was
	// taken out of (handling.outOfPool).
	fail     *failures
	handling *handling

	mu sync.Mutex
	// held is the last poll's records; left counts those not acked.
	held []*shareAcquired
	left int
	// settled is signalled when left reaches zero.
	settled chan struct{}

	// Base runs the poll loop (Start): it ends with the fetching, at the
	// stop's quiesce. renewWG joins the renewals (they end at close, by
	// stopRenew).
	service.Base
	renewWG   sync.WaitGroup
	stopRenew context.CancelFunc
	// unsubmitted counts the records the poll loop released at its end.
	unsubmitted atomic.Int64
	accepted    atomic.Uint64
	released    atomic.Uint64
	rejected    atomic.Uint64
	renewed     atomic.Uint64
	ackErrors   atomic.Uint64
}

// shareAcquired is one record a share class holds: its acknowledgement (once)
// and its lock's deadline as the member knows it.
type shareAcquired struct {
	rec  *kclient.ShareRecord
	feed *shareFeed
	// lock is the record's lock duration (from its first deadline);
	// deadline is when it ends, in Unix nanoseconds, moved by renewals.
	lock     time.Duration
	deadline atomic.Int64
	acked    atomic.Bool
	// onSave is the acknowledgement once the record is saved elsewhere:
	// accept (a delayed delivery) unless it is a dead letter (reject).
	onSave atomic.Int32
}

// newShareFeed returns the feed of share class c; its client is made by
// start.
func newShareFeed(c *class, cfg kclient.ShareConfig, log *slog.Logger) *shareFeed {
	return &shareFeed{c: c, cfg: cfg, log: log.With("class", c.cfg.Name, "share_group", cfg.Group),
		settled: make(chan struct{}, 1)}
}

// shareFeedOf returns the feed of share class c, built from the
// runtime's config: connections made by conn, repeated warnings through
// logs.
func (r *Runtime) shareFeedOf(c *class, conn *connection, logs *logBackoff) *shareFeed {
	cfg := &r.cfg
	var f *shareFeed
	f = newShareFeed(c, kclient.ShareConfig{
		Brokers: cfg.Brokers, ClientID: cfg.ClientID, Group: c.cfg.ShareGroup, Topics: c.cfg.shareTopics,
		MaxRecords: int32(c.cfg.QueueSize + c.cfg.Workers), StartFirst: cfg.StartOffset == StartFirst,
		DialFunc: conn.clientDial(), Log: r.log, WarnFunc: logs.warn,
		AckErrFunc: func(topic string, partition int32, err error) {
			f.ackErrors.Add(1)
			logs.warn(f.log, "share-ack "+topic, "share record acknowledgements refused; the broker delivers them again after their locks",
				"topic", topic, "partition", partition, "err", err)
		},
	}, r.log)
	f.fail, f.handling = r.fail, r.handling
	return f
}

// ack acknowledges the record with st, once: a later ack is ignored. It
// does not block.
func (sh *shareAcquired) ack(st kclient.AckStatus) {
	if sh == nil || !sh.acked.CompareAndSwap(false, true) {
		return
	}
	f := sh.feed
	f.client.Load().Ack(sh.rec, st)
	switch st {
	case shareAccept:
		f.accepted.Add(1)
	case shareRelease:
		f.released.Add(1)
	case shareReject:
		f.rejected.Add(1)
	}
	f.mu.Lock()
	f.left--
	done := f.left == 0
	f.mu.Unlock()
	if done {
		select {
		case f.settled <- struct{}{}:
		default:
		}
	}
}

// saved acknowledges a record saved elsewhere in the state file: a dead
// letter is rejected, a delayed delivery accepted. Nil does nothing.
func (sh *shareAcquired) saved() {
	if sh == nil {
		return
	}
	st := shareAccept
	if sh.onSave.Load() == int32(shareReject) {
		st = shareReject
	}
	sh.ack(st)
}

// unsaved releases a record whose dead letter could not be saved: the
// broker delivers it again, or, at the delivery limit, archives it, which
// is logged at Error since nothing keeps it then.
func (sh *shareAcquired) unsaved(log *slog.Logger) {
	if sh.atLimit() {
		log.Error("share record released at its delivery limit after its dead letter could not be saved; the broker archives it",
			"class", sh.feed.c.cfg.Name, "topic", sh.rec.Topic, "partition", sh.rec.Partition, "offset", sh.rec.Offset,
			"delivery_count", sh.rec.DeliveryCount)
	}
	sh.ack(shareRelease)
}

// deadLettering marks the record to be rejected once its dead letter rec
// is saved, and sets rec's HeaderDeliveryCount.
func (sh *shareAcquired) deadLettering(rec *snapshot.Record) {
	sh.onSave.Store(int32(shareReject))
	m := &rec.Message
	hs := slices.DeleteFunc(slices.Clone(m.Headers), func(h handoff.Header) bool { return h.Key == HeaderDeliveryCount })
	m.Headers = append(hs, handoff.Header{Key: HeaderDeliveryCount, Value: []byte(strconv.Itoa(sh.rec.DeliveryCount))})
}

// atLimit reports whether the broker would archive the record if it were
// released: its delivery count reached the group's limit.
func (sh *shareAcquired) atLimit() bool { return int64(sh.rec.DeliveryCount) >= sh.feed.limit.Load() }

// prepare makes the member's client and checks its topics and the
// group's configs (Prepare) under runCtx; Start follows it.
func (f *shareFeed) prepare(runCtx context.Context) error {
	cl, err := kclient.NewShare(f.cfg)
	if err != nil {
		return fmt.Errorf("runtime: class %q: %w", f.c.cfg.Name, err)
	}
	f.client.Store(cl)
	missing, limit, err := cl.Prepare(runCtx)
	if err != nil {
		return fmt.Errorf("runtime: class %q: %w", f.c.cfg.Name, err)
	}
	if len(missing) > 0 {
		if !f.c.cfg.WaitForTopics {
			return &TopicError{Class: f.c.cfg.Name, Topics: missing}
		}
		f.log.Warn("share class waits for its topics", "missing", missing)
	}
	f.limit.Store(int64(limit))
	f.log.Info("share class joined its share group", "topics", f.cfg.Topics, "delivery_limit", limit, "max_records", f.cfg.MaxRecords)
	return nil
}

// Start starts the poll loop under ctx (the fetching's, ended at the
// stop's quiesce; Stop ends it too and waits for it) and the renewals,
// which end at close. It runs after prepare; see [service.Service].
func (f *shareFeed) Start(ctx context.Context) error {
	if _, ok := f.StartInit(ctx); !ok {
		return nil
	}
	renewCtx, stop := context.WithCancel(context.Background())
	f.stopRenew = stop
	f.renewWG.Go(func() { f.renew(renewCtx) })
	f.Go(f.run)
	return nil
}

// run is the poll loop: it polls once the class may fetch (not
// suspended nor paused) and the last poll's records are all settled, and
// hands the records to the class's pool, waiting while it is full. It
// ends with ctx (the stop's quiesce); records it could not hand to the
// pool are released.
func (f *shareFeed) run(ctx context.Context) {
	c := f.c
	for {
		if _, paused := c.hold.Paused(); paused {
			if !f.pauseLeave(ctx) {
				return
			}
			continue
		}
		if !c.hold.MayFetch(ctx) {
			return
		}
		if !f.waitSettled(ctx) {
			return
		}
		recs, err := f.client.Load().Poll(ctx)
		if ctx.Err() != nil {
			f.releaseUnsubmitted(f.acquire(recs)) // none reached the pool
			return
		}
		if err != nil && f.cfg.WarnFunc != nil {
			f.cfg.WarnFunc(f.log, "share fetch "+f.cfg.Group, "share fetch failed", "err", err)
		}
		if len(recs) == 0 {
			continue
		}
		its := f.acquire(recs)
		n, err := c.pool.SubmitBatch(ctx, its)
		if err != nil {
			f.releaseUnsubmitted(its[n:])
			return
		}
	}
}

// acquire makes the items of a poll's records and makes them the
// acquired records; it returns the items.
func (f *shareFeed) acquire(recs []*kclient.ShareRecord) []*item {
	now := time.Now()
	its := make([]*item, len(recs))
	held := make([]*shareAcquired, len(recs))
	for i, r := range recs {
		sh := &shareAcquired{rec: r, feed: f, lock: r.Deadline.Sub(now)}
		if r.Deadline.IsZero() || sh.lock <= 0 {
			sh.lock = defaultShareLock
			sh.deadline.Store(now.Add(sh.lock).UnixNano())
		} else {
			sh.deadline.Store(r.Deadline.UnixNano())
		}
		held[i] = sh
		it := &item{src: fromShare, x: &itemExt{share: sh}}
		m := &it.m
		m.ID = kafkaID(kafkaIDPrefix(r.Topic, r.Partition), r.Offset)
		m.Class = f.c.cfg.Name
		m.Key, m.Value, m.Headers = r.Key, r.Value, r.Headers
		m.Origin.Topic, m.Origin.Partition, m.Origin.Offset = r.Topic, r.Partition, r.Offset
		m.Timestamp, m.FirstSeen = r.Time, now
		its[i] = it
	}
	f.mu.Lock()
	f.held, f.left = held, len(held)
	f.mu.Unlock()
	return its
}

// pauseLeave takes a paused class out of its share group: once what it
// holds is settled (the unstarted records released, see renew; the
// running ones finished), the member leaves, releasing what its client
// fetched and nobody polled (a share group assigns its partitions to its
// members: a member that stays without polling starves them). At the
// resume it joins again with a new client. It returns false when ctx
// ended first (the stop), the member left or not.
func (f *shareFeed) pauseLeave(ctx context.Context) bool {
	f.releaseUnstarted(true)
	if !f.waitSettled(ctx) {
		return false
	}
	cl := f.client.Swap(nil)
	lctx, cancel := context.WithTimeout(ctx, shareLeaveTimeout)
	err := cl.Close(lctx)
	cancel()
	f.log.Info("share class paused: left its share group until the resume", "err", err)
	if !f.c.hold.MayFetch(ctx) {
		return false
	}
	cl, err = kclient.NewShare(f.cfg)
	if err != nil {
		f.log.Error("share class resumed but its member could not be made; it stays out of its share group", "err", err)
		<-ctx.Done()
		return false
	}
	f.client.Store(cl)
	f.log.Info("share class resumed: joined its share group again")
	return true
}

// shareLeaveTimeout bounds a paused share class's leave of its group.
const shareLeaveTimeout = 5 * time.Second

// releaseUnsubmitted releases records the pool never took, at the end of
// the poll loop, and counts them in unsubmitted.
func (f *shareFeed) releaseUnsubmitted(its []*item) {
	for _, it := range its {
		it.x.share.ack(shareRelease)
	}
	f.unsubmitted.Add(int64(len(its)))
}

// waitSettled waits until the last poll's records are all settled, or
// ctx ends (false).
func (f *shareFeed) waitSettled(ctx context.Context) bool {
	for {
		f.mu.Lock()
		left := f.left
		f.mu.Unlock()
		if left <= 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-f.settled:
		}
	}
}

// defaultShareLock is the lock assumed of a record whose deadline the
// client did not learn: Kafka's group.share.record.lock.duration.ms
// default.
const defaultShareLock = 30 * time.Second

// renewEvery bounds how often renew looks at the held records' locks.
const (
	renewEveryMin = 20 * time.Millisecond
	renewEveryMax = time.Second
)

// renewAfterMax bounds how long a held record goes without a renewal,
// whatever its lock: below franz-go's ConnIdleTimeout (30s), past which
// an idle connection closes and the broker releases what it holds.
const renewAfterMax = 10 * time.Second

// renew renews, until ctx ends, the lock of every held record not acked
// whose lock is past its first half (or 10s old), and waits for the brokers' answers
// (acks are otherwise sent within a second) before it counts the lock
// renewed from when it asked.
func (f *shareFeed) renew(ctx context.Context) {
	every := renewEveryMax
	t := time.NewTimer(renewEveryMin)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, paused := f.c.hold.Paused(); paused {
			// A pause may last: what has not started goes to the
			// other members (a poll under way when it began brought
			// records too), and the poll loop leaves the group.
			if n := f.releaseUnstarted(true); n > 0 {
				f.log.Info("share class paused; its unstarted records released to the group", "released", n)
			}
		}
		now := time.Now()
		var due []*shareAcquired
		f.mu.Lock()
		for _, sh := range f.held {
			if sh.acked.Load() {
				continue
			}
			every = min(every, max(renewEveryMin, sh.lock/8))
			if now.UnixNano() >= sh.deadline.Load()-int64(sh.lock)+int64(min(sh.lock/2, renewAfterMax)) {
				due = append(due, sh)
			}
		}
		f.mu.Unlock()
		if cl := f.client.Load(); len(due) > 0 && cl != nil {
			for _, sh := range due {
				cl.Ack(sh.rec, kclient.AckRenew)
			}
			fctx, cancel := context.WithTimeout(ctx, due[0].lock/4)
			err := cl.Flush(fctx)
			cancel()
			if err == nil {
				for _, sh := range due {
					sh.deadline.Store(now.Add(sh.lock).UnixNano())
				}
				f.renewed.Add(uint64(len(due)))
			} else if ctx.Err() == nil {
				f.log.Warn("share record locks not renewed in time; the broker may deliver them again", "records", len(due), "err", err)
			}
		}
		t.Reset(every)
	}
}

// giveBack hands back a record the stop takes out of the pool: released
// for another member, or, at the group's delivery limit, where a release
// would archive it unseen, saved as a dead letter (then rejected); it
// returns whether it released it.
func (f *shareFeed) giveBack(it *item) bool {
	sh := it.x.share
	if sh.acked.Load() {
		return false
	}
	if sh.atLimit() {
		err := fmt.Errorf("runtime: share record at its group's delivery limit (%d deliveries) not finished by the stop; a release would archive it", sh.rec.DeliveryCount)
		it.verdict = deadLetter
		if f.fail.save(f.c, it, err) {
			return false
		}
	}
	sh.ack(shareRelease)
	return true
}

// close ends the renewals, sends the acknowledgements not sent and
// leaves the share group (what the last poll left unacknowledged is
// released) within ctx.
func (f *shareFeed) close(ctx context.Context) error {
	cl := f.client.Load()
	if cl == nil {
		return nil
	}
	if f.stopRenew != nil { // nil when the start failed before the renewals
		f.stopRenew()
	}
	f.renewWG.Wait()
	ferr := cl.Flush(ctx)
	cerr := cl.Close(ctx)
	if errors.Is(cerr, context.DeadlineExceeded) || errors.Is(cerr, context.Canceled) {
		cerr = fmt.Errorf("leave share group %s: %w", f.cfg.Group, cerr)
	}
	return errors.Join(ferr, cerr)
}

// startShares prepares the share classes' members under runCtx and
// launches each (shareFeed.Start) under the fetching's context, to end
// at the quiesce.
func (s *runState) startShares(runCtx context.Context) error {
	for _, c := range s.r.classes.order {
		if c.share == nil {
			continue
		}
		if err := c.share.prepare(runCtx); err != nil {
			return err
		}
		_ = s.launch(s.r.kafka.Context(), phaseQuiesce, c.share)
	}
	return nil
}

// shareQuiesce, once the quiesce stopped the share classes' poll loops
// (which release the records the pool had not taken), releases the records the pools hold that have not started (never
// failed here: those waiting out a backoff stay for the drain). It
// returns how many were released.
func (r *Runtime) shareQuiesce() int {
	n := 0
	for _, c := range r.classes.order {
		if c.share == nil {
			continue
		}
		n += int(c.share.unsubmitted.Load())
		if c.pool == nil {
			continue
		}
		n += c.share.releaseUnstarted(false)
	}
	return n
}

// releaseUnstarted takes the class's share records that have not
// started out of its pool and hands them back (giveBack): with all, every
// one; without, those that never failed here (one waiting out a backoff
// stays). It returns how many it released.
func (f *shareFeed) releaseUnstarted(all bool) int {
	n := 0
	for _, it := range f.c.pool.Remove(func(it *item) bool { return it.src == fromShare && (all || it.env().Attempt == 0) }) {
		f.c.hold.Uncount(it)
		f.handling.outOfPool(it)
		if f.giveBack(it) {
			n++
		}
	}
	return n
}

// shareClose closes every share class's member by deadline (at least
// leaveTimeout). What did not finish is logged: the broker delivers the
// records whose acknowledgement it did not get again after their locks
// (duplicates, never a loss).
func (r *Runtime) shareClose(deadline time.Time) {
	for _, c := range r.classes.order {
		if c.share == nil || c.share.client.Load() == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(leaveTimeout, time.Until(deadline)))
		if err := c.share.close(ctx); err != nil {
			r.log.Warn("share class's acknowledgements or leave did not finish; the broker delivers its records again after their locks", "class", c.cfg.Name, "err", err)
		}
		cancel()
	}
}

// hasShare reports whether a class is a share class.
func (r *Runtime) hasShare() bool {
	for _, c := range r.classes.order {
		if c.share != nil {
			return true
		}
	}
	return false
}

// isShare reports whether the message is a share class's record.
func (it *item) isShare() bool { return it.src == fromShare }

// ShareStats counts a share class's acknowledgements since
// [Runtime.Started] (see Class.ShareGroup).
type ShareStats struct {
	// Group is the class's share group.
	Group string
	// DeliveryLimit is the group's delivery limit, as the start read it.
	DeliveryLimit int
	// Accepted counts records done (or saved for a delayed delivery),
	// Rejected records saved as dead letters, Released records handed
	// back to the group (at the stop, or when their save failed).
	Accepted, Rejected, Released uint64
	// Renewed counts lock renewals the brokers confirmed, AckErrors
	// partitions' acknowledgements the brokers refused or that could not
	// be sent (their records are delivered again after their locks).
	Renewed, AckErrors uint64
}

// stats returns the feed's counts; zero for nil.
func (f *shareFeed) stats() ShareStats {
	if f == nil {
		return ShareStats{}
	}
	return ShareStats{Group: f.cfg.Group, DeliveryLimit: int(f.limit.Load()), Accepted: f.accepted.Load(), Rejected: f.rejected.Load(),
		Released: f.released.Load(), Renewed: f.renewed.Load(), AckErrors: f.ackErrors.Load()}
}

// shareCollector exports the share classes' acknowledgements
// (ShareStats) as Prometheus counters.
type shareCollector struct {
	r                    *Runtime
	acks, renews, ackErr *prometheus.Desc
}

func newShareCollector(r *Runtime) *shareCollector {
	return &shareCollector{r: r,
		acks: prometheus.NewDesc("handoff_share_acks_total",
			"Records of a share class acknowledged to its share group, by acknowledgement: accepted (done, or saved for a delayed delivery), rejected (saved as dead letters), released (handed back: at the stop, or when their save failed).",
			[]string{"class", "ack"}, nil),
		renews: prometheus.NewDesc("handoff_share_renewals_total",
			"Lock renewals of a share class's records that the brokers confirmed.", []string{"class"}, nil),
		ackErr: prometheus.NewDesc("handoff_share_ack_errors_total",
			"Partitions' acknowledgements of a share class that the brokers refused or that could not be sent; their records are delivered again after their locks.",
			[]string{"class"}, nil),
	}
}

func (sc *shareCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sc.acks
	ch <- sc.renews
	ch <- sc.ackErr
}

func (sc *shareCollector) Collect(ch chan<- prometheus.Metric) {
	for _, c := range sc.r.classes.order {
		if c.share == nil {
			continue
		}
		st := c.share.stats()
		name := c.cfg.Name
		ch <- prometheus.MustNewConstMetric(sc.acks, prometheus.CounterValue, float64(st.Accepted), name, "accepted")
		ch <- prometheus.MustNewConstMetric(sc.acks, prometheus.CounterValue, float64(st.Rejected), name, "rejected")
		ch <- prometheus.MustNewConstMetric(sc.acks, prometheus.CounterValue, float64(st.Released), name, "released")
		ch <- prometheus.MustNewConstMetric(sc.renews, prometheus.CounterValue, float64(st.Renewed), name)
		ch <- prometheus.MustNewConstMetric(sc.ackErr, prometheus.CounterValue, float64(st.AckErrors), name)
	}
}
