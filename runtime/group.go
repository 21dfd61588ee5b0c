package runtime

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
)

// The consumer group: the partitions this instance owns, one generation
// after another, and how they end. Both clients (Config.Client) drive the
// same generation type: kafka-go's eager group makes one generation per
// rebalance, assigned all at once and revoked all at once (consume,
// below); franz-go's cooperative group keeps one for the client's life
// and adds and revokes partitions as they move (franzgo.go). A
// generation's partitions are read by fetch.go and committed by
// commit.go.

// generation is the set of partitions the group gave this instance,
// their trackers, and the keeper goroutine that commits them.
type generation struct {
	r      *Runtime
	client Client
	// id is the group generation, for logs; franz-go's moves on at each
	// rebalance while its partitions stay.
	id atomic.Int32
	// commitOffsets commits offsets fenced by the membership (the
	// generation and member ID): kafka-go's generation, franz-go's
	// current one. Only the keeper calls it.
	commitOffsets func(offsets map[string]map[int]int64) error
	// source opens the record source of a partition added at offset start
	// (-1: where the client resumes it, its committed offset).
	source func(ctx context.Context, tr *tracker, start int64) partSource

	// trs is the owned partitions' trackers, replaced (never changed in
	// place) by the keeper when partitions come and go, read by anyone.
	trs atomic.Pointer[[]*tracker]
	// lagMu orders the lag sampler's series updates with the drop of a
	// removed partition's series (remove).
	lagMu sync.Mutex
	// parts is each owned partition's fetch loop; the keeper's only, once
	// it runs.
	parts map[*tracker]*fetchLoop
	// ctx bounds the fetch loops: it ends at the stop's quiesce.
	ctx context.Context
	// running counts the fetch loops; loopMu orders its Adds (none once
	// ctx ended) before the quiesce's Wait (see quiesce).
	loopMu  sync.Mutex
	running sync.WaitGroup

	// changes carries franz-go's assignments and revocations to the
	// keeper, which answers each once it is done.
	changes chan change
	// finalReq asks the keeper for the stop's final commit; it answers on
	// the channel it is sent, then holds the generation open until the
	// group is closed.
	finalReq chan chan error
	ended    chan struct{} // closed when the keeper returns
	// caughtUp is how a fetch loop tells the keeper its partition caught
	// up with the high watermark; see keep.
	caughtUp chan struct{}
	// final is set by the stop's final commit: the keeper commits nothing
	// else and applies no change after it.
	final atomic.Bool
	// fetching is true while the generation's partitions are fetched.
	fetching atomic.Bool
}

// fetchLoop is one owned partition's fetch loop.
type fetchLoop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// partStart is a partition the group assigned and the offset its reading
// starts at (-1: the client resumes it from the committed offset).
type partStart struct {
	topic     string
	partition int
	offset    int64
}

// change is an assignment (add) or a revocation (remove) the keeper
// applies; lost says the membership is gone, so nothing is committed.
type change struct {
	add    []partStart
	remove []tp
	lost   bool
	done   chan struct{}
}

// tp names a partition.
type tp struct {
	topic     string
	partition int
}

// String returns "topic/partition", as the logs name a partition.
func (p tp) String() string { return p.topic + "/" + strconv.Itoa(p.partition) }

func (r *Runtime) newGeneration(ctx context.Context, client Client, id int32,
	commit func(map[string]map[int]int64) error,
	source func(context.Context, *tracker, int64) partSource) *generation {
	g := &generation{r: r, client: client, commitOffsets: commit, source: source, ctx: ctx,
		parts:    map[*tracker]*fetchLoop{},
		changes:  make(chan change),
		finalReq: make(chan chan error), ended: make(chan struct{}), caughtUp: make(chan struct{}, 1)}
	g.id.Store(id)
	g.trs.Store(&[]*tracker{})
	return g
}

// trackers returns the owned partitions' trackers; the slice is not
// changed afterwards.
func (g *generation) trackers() []*tracker { return *g.trs.Load() }

// add starts fetching the partitions ps. Before the keeper runs, the
// goroutine that made the generation calls it; then only the keeper.
func (g *generation) add(ps []partStart) {
	if len(ps) == 0 {
		return
	}
	trs := slices.Clone(g.trackers())
	names := make([]string, 0, len(ps))
	for _, p := range ps {
		c := g.r.byTopic[p.topic]
		if c == nil {
			continue // not a configured topic: the group gave it to the wrong member
		}
		tr := newTracker(p.topic, p.partition, p.offset)
		ctx, cancel := context.WithCancel(g.ctx)
		fl := &fetchLoop{cancel: cancel, done: make(chan struct{})}
		src := g.source(ctx, tr, p.offset)
		g.loopMu.Lock()
		if g.ctx.Err() != nil { // the stop began: nothing is fetched any more
			close(fl.done)
		} else {
			g.running.Add(1)
			go func() {
				defer g.running.Done()
				defer close(fl.done)
				g.r.fetch(ctx, g, c, tr, src)
			}()
		}
		g.loopMu.Unlock()
		g.parts[tr] = fl
		trs = append(trs, tr)
		names = append(names, tp{p.topic, p.partition}.String())
	}
	g.trs.Store(&trs)
	g.r.log.Info("partitions assigned", "client", string(g.client), "generation", g.id.Load(), "partitions", partList(names))
}

// remove ends the owned partitions in ps (all of them when ps is nil):
// it stops their fetch loops, gives back their messages (revoke), commits
// what is settled unless lost, and drops them. Only the keeper calls it.
func (g *generation) remove(ps []tp, lost bool) {
	var gone []*tracker
	var names []string
	keep := g.trackers()[:0:0]
	for _, tr := range g.trackers() {
		if ps != nil && !slices.Contains(ps, tp{tr.topic, tr.partition}) {
			keep = append(keep, tr)
			continue
		}
		gone = append(gone, tr)
		names = append(names, tp{tr.topic, tr.partition}.String())
	}
	for _, tr := range gone {
		g.parts[tr].cancel()
	}
	for _, tr := range gone {
		<-g.parts[tr].done
		delete(g.parts, tr)
	}
	given, left := g.revoke(gone)
	if !lost {
		if err := g.commit(); err != nil {
			g.r.metrics.commitFailed()
			g.r.log.Warn("commit of revoked partitions failed", "generation", g.id.Load(), "err", err)
		}
	}
	g.lagMu.Lock() // a sample in flight sets no series of a gone partition
	g.trs.Store(&keep)
	for _, tr := range gone {
		g.r.metrics.dropLag(tr.topic, tr.partition)
	}
	g.lagMu.Unlock()
	if len(gone) > 0 || ps == nil {
		g.r.log.Info("partitions revoked", "client", string(g.client), "generation", g.id.Load(), "partitions", partList(names),
			"given_back", given, "still_running", left, "lost", lost)
	}
}

// quiesce waits for every fetch loop to end, once ctx has ended (the stop
// began, or kafka-go ended the generation). It does not go through the
// keeper, which may be busy in a commit.
func (g *generation) quiesce() {
	g.loopMu.Lock()
	g.loopMu.Unlock() //nolint:staticcheck // an add in progress has done its Add
	g.running.Wait()
}

// partList is the "partitions" attribute of the assignment lines: sorted
// topic/partition names, comma-separated.
func partList(names []string) string {
	slices.Sort(names)
	return strings.Join(names, ",")
}

// setGen makes g the generation the stop commits through and the stats
// read.
func (r *Runtime) setGen(g *generation) { r.gen.Store(g) }

// fetchingGen returns the current generation while its partitions are
// fetched, or nil.
func (r *Runtime) fetchingGen() *generation {
	if g := r.gen.Load(); g != nil && g.fetching.Load() {
		return g
	}
	return nil
}

// consume joins kafka-go generation after generation until fetchCtx ends.
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

// runGeneration fetches a kafka-go generation's partitions until it ends
// or fetchCtx ends. In the second case the keeper stays, so the stop can
// commit through this generation.
func (r *Runtime) runGeneration(fetchCtx context.Context, kg *kafka.Generation) {
	gctx, cancel := context.WithCancel(fetchCtx)
	defer cancel()
	kc := &kafkaGoCommits{r: r, kg: kg}
	g := r.newGeneration(gctx, ClientKafkaGo, kg.ID, kc.commit, r.kafkaGoSource)
	var ps []partStart
	for topic, parts := range kg.Assignments {
		for _, pa := range parts {
			ps = append(ps, partStart{topic: topic, partition: pa.ID, offset: pa.Offset})
		}
	}
	g.add(ps)
	g.fetching.Store(true)
	r.setGen(g)
	r.ready.joined.Store(true)
	r.log.Info("joined group generation", "group", r.cfg.Group, "generation", kg.ID, "partitions", len(g.trackers()))
	lag := g.startLag(gctx)
	kg.Start(func(kctx context.Context) {
		g.keep(kctx)
		cancel() // the generation ended: so does runGeneration
	})
	<-gctx.Done()
	// The keeper's end stopped the fetch loops; at the stop they end with
	// fetchCtx, and the keeper stays for the final commit.
	g.quiesce()
	g.fetching.Store(false)
	lag.stop()
}

// revoke is the end of partitions trs at a rebalance: it takes their
// unstarted and backing-off Kafka messages out of the pools and gives
// them back (unsettled: the commit stops before them and the partition's
// next owner reads them again), then waits up to RevokeTimeout for the
// running ones to settle. It returns how many were given back and how
// many still run; those finish but only mark these trackers, which
// nobody commits any more.
func (g *generation) revoke(trs []*tracker) (given, left int) {
	if len(trs) == 0 {
		return 0, 0
	}
	mine := make(map[*tracker]bool, len(trs))
	for _, tr := range trs {
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
		for _, tr := range trs {
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
			"generation", g.id.Load(), "running", left, "waited", g.r.cfg.RevokeTimeout)
	}
	return given, left
}
