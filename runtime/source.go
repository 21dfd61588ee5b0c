package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
)

var errGenerationEnded = errors.New("runtime: consumer group generation ended before the final commit")

// generation is one kafka-go consumer group generation: the partitions it
// assigned us, their trackers, and the keeper goroutine that commits.
type generation struct {
	r        *Runtime
	kg       *kafka.Generation
	trackers []*tracker
	// finalReq asks the keeper for the stop's final commit; it answers on
	// the channel it is sent, then holds the generation open until the
	// group is closed.
	finalReq chan chan error
	ended    chan struct{} // closed when the keeper returns
	// caughtUp is how a fetch loop tells the keeper its partition caught
	// up with the high watermark; see keep.
	caughtUp chan struct{}
}

// consume joins generation after generation until fetchCtx ends.
func (r *Runtime) consume(fetchCtx context.Context, cg *kafka.ConsumerGroup) {
	for {
		kg, err := cg.Next(fetchCtx)
		if err != nil {
			if fetchCtx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			r.log.Warn("consumer group join failed; retrying", "group", r.cfg.Group, "err", err)
			continue
		}
		r.runGeneration(fetchCtx, kg)
		if fetchCtx.Err() != nil {
			return
		}
	}
}

// runGeneration fetches the generation's partitions until it ends or
// fetchCtx ends. In the second case the keeper stays, so the stop can
// commit through this generation.
func (r *Runtime) runGeneration(fetchCtx context.Context, kg *kafka.Generation) {
	g := &generation{r: r, kg: kg, finalReq: make(chan chan error), ended: make(chan struct{}),
		caughtUp: make(chan struct{}, 1)}
	gctx, cancel := context.WithCancel(fetchCtx)
	defer cancel()
	var fetchers sync.WaitGroup
	n := 0
	for topic, parts := range kg.Assignments {
		c := r.byTopic[topic]
		for _, pa := range parts {
			tr := newTracker(topic, pa.ID, pa.Offset)
			g.trackers = append(g.trackers, tr)
			fetchers.Go(func() { r.fetch(gctx, g, c, tr, pa.Offset) })
			n++
		}
	}
	r.genMu.Lock()
	r.gen = g
	r.genMu.Unlock()
	r.log.Info("joined group generation", "group", r.cfg.Group, "generation", kg.ID, "partitions", n)
	kg.Start(func(kctx context.Context) { g.keep(kctx, cancel, &fetchers) })
	<-gctx.Done()
	fetchers.Wait()
}

// keep commits every CommitInterval, and sooner once the flow stops:
// when a partition has caught up with its high watermark and everything
// fetched from the caught-up partitions is settled, it commits at once
// (within the commitBudget: 10 such commits a second), so after a burst
// the commit follows the last message within milliseconds rather than up
// to a CommitInterval later. Until then it looks again after 1 ms, then
// 2, 4, … up to maxIdlePoll.
//
// When kafka-go ends the generation (rebalance, lost session) it stops
// this generation's fetchers and commits what is settled before
// returning, since kafka-go waits for it to move on. A late result of
// this generation then only marks trackers nobody commits any more.
func (g *generation) keep(kctx context.Context, stopFetch context.CancelFunc, fetchers *sync.WaitGroup) {
	defer close(g.ended)
	interval := g.r.cfg.CommitInterval
	t := time.NewTicker(interval)
	defer t.Stop()
	soon := time.NewTimer(0)
	soon.Stop()
	defer soon.Stop()
	var wait time.Duration // until soon looks again; 0 while not armed
	budget := newCommitBudget(len(g.trackers), minCommitGap(interval), time.Now())
	commit := func(when string) {
		if err := g.commit(); err != nil {
			g.r.log.Warn("commit failed; retrying at the next interval", "generation", g.kg.ID, "when", when, "err", err)
		}
	}
	for {
		select {
		case <-t.C:
			commit("interval")
		case <-g.caughtUp:
			if wait == 0 {
				wait = time.Millisecond
				soon.Reset(wait)
			}
		case <-soon.C:
			switch idle, some := g.idle(); {
			case idle:
				if later := budget.take(time.Now()); later > 0 {
					soon.Reset(later)
					break
				}
				commit("caught up")
				wait = 0
			case !some: // traffic resumed: the ticker commits
				wait = 0
			default:
				wait = min(2*wait, maxIdlePoll, interval)
				soon.Reset(wait)
			}
		case reply := <-g.finalReq:
			reply <- g.commit()
			<-kctx.Done() // held open until the group closes
			return
		case <-kctx.Done():
			stopFetch()
			fetchers.Wait()
			given, left := g.revoke()
			if err := g.commit(); err != nil {
				g.r.log.Warn("commit at generation end failed", "generation", g.kg.ID, "err", err)
			}
			g.r.log.Info("group generation ended", "generation", g.kg.ID, "given_back", given, "still_running", left)
			return
		}
	}
}

// revoke is the generation's end at a rebalance: it takes this
// generation's unstarted and backing-off Kafka messages out of the pools
// and gives them back (unsettled: the commit stops before them and the
// partition's next owner reads them again), then waits up to
// RevokeTimeout for the running ones to settle. It returns how many were
// given back and how many still run; those finish but only mark this
// generation's trackers, which nobody commits any more.
func (g *generation) revoke() (given, left int) {
	mine := make(map[*tracker]bool, len(g.trackers))
	for _, tr := range g.trackers {
		mine[tr] = true
	}
	match := func(it *item) bool { return it.src == fromKafka && mine[it.tr] }
	take := func() {
		for _, c := range g.r.order {
			if len(c.cfg.Topics) == 0 {
				continue
			}
			for _, it := range c.pool.Remove(match) {
				it.tr.abandoned.Add(1)
				g.r.leftPool(it)
				given++
			}
		}
	}
	inFlight := func() int {
		n := 0
		for _, tr := range g.trackers {
			n += tr.inFlight()
		}
		return n
	}
	take()
	deadline := time.Now().Add(g.r.cfg.RevokeTimeout)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for left = inFlight(); left > 0 && time.Now().Before(deadline); left = inFlight() {
		<-t.C
		take() // a handler that failed meanwhile waits out a backoff
	}
	g.r.revoked.Add(int64(given))
	if left > 0 {
		g.r.log.Warn("handlers of revoked partitions still running; their results will not be committed",
			"generation", g.kg.ID, "running", left, "waited", g.r.cfg.RevokeTimeout)
	}
	return given, left
}

// maxIdlePoll is the longest the keeper waits before it looks again
// whether caught-up partitions have all they fetched settled: what a
// commit may lag behind the end of a burst, beyond the commit itself.
const maxIdlePoll = 16 * time.Millisecond

// minCommitGap is the mean time between commits made because the flow
// stopped, over time: it bounds them to 10 a second under a trickle of
// messages that each catch a partition up.
func minCommitGap(interval time.Duration) time.Duration {
	return min(interval, 100*time.Millisecond)
}

// commitBudget is a token bucket for the commits made because the flow
// stopped: one token per gap, up to one per partition, so the partitions
// of a burst that end one after the other are each committed at once,
// while a steady trickle gets one commit per gap.
type commitBudget struct {
	tokens, max float64
	gap         time.Duration
	at          time.Time // of the last refill
}

func newCommitBudget(partitions int, gap time.Duration, now time.Time) *commitBudget {
	n := float64(max(partitions, 1))
	return &commitBudget{tokens: n, max: n, gap: gap, at: now}
}

// take spends a token and returns 0, or returns how long until one is
// there.
func (b *commitBudget) take(now time.Time) time.Duration {
	b.tokens = min(b.max, b.tokens+float64(now.Sub(b.at))/float64(b.gap))
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(b.gap))
}

// idle reports whether some partition is caught up with its high
// watermark (some) and whether, in addition, every caught-up partition
// has all it fetched settled (idle): the moment to commit without waiting
// for the interval.
func (g *generation) idle() (idle, some bool) {
	idle = true
	for _, tr := range g.trackers {
		if !tr.caughtUp.Load() {
			continue
		}
		some = true
		if !tr.allSettled() {
			idle = false
		}
	}
	return idle && some, some
}

// commit commits every partition whose commit point moved.
func (g *generation) commit() error {
	offsets := map[string]map[int]int64{}
	var moved []*tracker
	var points []int64
	for _, tr := range g.trackers {
		cp, ok := tr.commitPoint()
		if !ok {
			continue
		}
		if offsets[tr.topic] == nil {
			offsets[tr.topic] = map[int]int64{}
		}
		offsets[tr.topic][tr.partition] = cp
		moved = append(moved, tr)
		points = append(points, cp)
	}
	if len(moved) == 0 {
		return nil
	}
	if err := g.kg.CommitOffsets(offsets); err != nil {
		return fmt.Errorf("runtime: commit offsets of %d partitions in generation %d: %w", len(moved), g.kg.ID, err)
	}
	for i, tr := range moved {
		tr.committedTo(points[i])
		g.r.metrics.setLag(tr.topic, tr.partition, tr.lag())
	}
	return nil
}

// finalCommit commits through the current generation, bounded by
// commitTimeout.
func (r *Runtime) finalCommit() error {
	r.genMu.Lock()
	g := r.gen
	r.genMu.Unlock()
	if g == nil {
		return nil
	}
	timer := time.NewTimer(commitTimeout)
	defer timer.Stop()
	reply := make(chan error, 1)
	select {
	case g.finalReq <- reply:
	case <-g.ended:
		return errGenerationEnded
	case <-timer.C:
		return fmt.Errorf("runtime: final commit: keeper busy for %s", commitTimeout)
	}
	select {
	case err := <-reply:
		return err
	case <-timer.C:
		return fmt.Errorf("runtime: final commit did not finish in %s", commitTimeout)
	}
}

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
		Logger:        kafkaLogger(log, false),
		ErrorLogger:   kafkaLogger(log, true),
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
	for {
		m, err := rd.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("fetch failed; retrying", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		it := r.items.Get().(*item) // zero: result clears an item before it returns it
		it.msg.ID = ids.id(m.Offset)
		it.msg.Class = c.cfg.Name
		it.msg.Key, it.msg.Value = m.Key, m.Value
		it.msg.Origin = handoff.Origin{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}
		it.msg.FirstSeen = r.now()
		it.src, it.tr = fromKafka, tr
		if len(m.Headers) > 0 {
			it.msg.Headers = make([]handoff.Header, len(m.Headers))
			for i, h := range m.Headers {
				it.msg.Headers[i] = handoff.Header{Key: h.Key, Value: h.Value}
			}
		}
		it.slot = tr.add(m.Offset)
		tr.hwm.Store(m.HighWaterMark)
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

// kafkaLogger adapts kafka-go's Printf logging to slog: debug for its
// chatter, warn for its errors.
func kafkaLogger(log *slog.Logger, isErr bool) kafka.LoggerFunc {
	if isErr {
		return func(format string, args ...any) {
			log.Warn("kafka-go", "msg", fmt.Sprintf(format, args...))
		}
	}
	return func(format string, args ...any) {
		if log.Enabled(context.Background(), slog.LevelDebug) {
			log.Debug("kafka-go", "msg", fmt.Sprintf(format, args...))
		}
	}
}
