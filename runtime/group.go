package runtime

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
)

// The consumer group: joining, one generation after another, and the end
// of a generation at a rebalance. A generation's partitions are read by
// fetch.go and committed by commit.go.

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
	// fetching is true while the generation's partitions are fetched.
	fetching atomic.Bool
	// connLost is set, by the keeper, once a commit through the
	// generation's connection failed; see commitOffsets.
	connLost bool
}

// consume joins generation after generation until fetchCtx ends.
func (r *Runtime) consume(fetchCtx context.Context, cg *kafka.ConsumerGroup) {
	for {
		kg, err := cg.Next(fetchCtx)
		if err != nil {
			if fetchCtx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			// kafka-go's error logger has said so already, with backoff.
			r.log.Debug("consumer group join failed; retrying", "group", r.cfg.Group, "err", err)
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
	g.fetching.Store(true)
	r.genMu.Lock()
	r.gen = g
	r.genMu.Unlock()
	r.joined.Store(true)
	r.log.Info("joined group generation", "group", r.cfg.Group, "generation", kg.ID, "partitions", n)
	lag := g.startLag(gctx)
	kg.Start(func(kctx context.Context) { g.keep(kctx, cancel, &fetchers) })
	<-gctx.Done()
	fetchers.Wait()
	g.fetching.Store(false)
	lag.stop()
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
	match := func(it *item) bool { return it.isKafka() && mine[it.tr] }
	take := func() {
		for _, c := range g.r.order {
			if len(c.cfg.Topics) == 0 {
				continue
			}
			for _, it := range c.pool.Remove(match) {
				g.r.abandon(it)
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
