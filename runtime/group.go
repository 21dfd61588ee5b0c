package runtime

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/runtime/internal/service"
)

// The consumer group: the partitions this instance owns, one generation
// after another, and how they end. The Kafka client (Config.Client) sits
// behind kclient.Client; each of its sessions is driven by a generation
// here. kafka-go's eager group makes one session per rebalance, assigned
// all at once and revoked all at once; franz-go's cooperative group keeps
// one for the client's life and adds and revokes partitions as they move.
// A generation's partitions are read by fetch.go and committed by
// commit.go.

// consumer is the runtime's side of the consumer group: the client, the
// current generation, and what generations are built from. It keeps no
// pointer to the Runtime: consumerConfig hands it what it uses.
type consumer struct {
	service.Base // the fetching: see Start and Stop
	cfg          consumerConfig
	// present is the topics the start's check found (checkTopics), which
	// Start joins.
	present []string
	// client is made by open at the start (when there are topics) and
	// closed by close at the stop's leave; nil otherwise.
	client kclient.Client
	// gen is the generation the stop commits through and the stats read.
	gen atomic.Pointer[generation]
	// revoked counts the messages given back at rebalances.
	revoked atomic.Int64
	// handover announces this member's handovers and watches the
	// others' (handover.go): started after the join, stopped with the
	// fetching.
	handover *handovers
}

// consumerConfig is what a consumer is built from.
type consumerConfig struct {
	log  *slog.Logger
	logs *logBackoff
	// conn is how connections to the brokers are made (connect.go): the
	// client's, the changelog's, the dead-letter publisher's and the
	// share classes'.
	conn    *connection
	metrics *metrics
	group   string
	// commitInterval is Config.CommitInterval, revokeTimeout
	// Config.RevokeTimeout; startLast is Config.StartOffset == StartLast.
	commitInterval, revokeTimeout time.Duration
	startLast                     bool
	// classes is Config.Classes, in order, and topics every class's
	// topics: the start's topic check (topics.go).
	classes []Class
	topics  []string
	// kafka is the client's configuration; newClientFunc makes the
	// client from it (kclient.New; a test's fake otherwise).
	kafka         kclient.Config
	newClientFunc func(kclient.Config) (kclient.Client, error)
	// feedFunc returns the fetch loop of a partition of topic (fetch.go),
	// nil for a topic no class consumes.
	feedFunc func(topic string) fetchFunc
	// byTopic is the class consuming each topic (classSet.byTopic): the
	// stats of a class sum its partitions.
	byTopic map[string]*class
	// giveBackFunc takes the unstarted and backing-off Kafka messages of
	// the trackers mine reports out of the pools and gives them back
	// (unsettled, counted abandoned); it returns how many.
	giveBackFunc func(mine func(*tracker) bool) int
	// epoch is the runtime's start (lifecycle.epoch): the trackers stamp
	// fetched offsets with the monotonic time since it (Runtime.mono).
	epoch time.Time
	// ready is the runtime's readiness: told when a generation arrived
	// (join), and of each partition in states.restore (beginRestore before
	// one starts, restored once it called restored or returned).
	ready *readiness
	// alive is the runtime's liveness (alive.go): each keeper beats in
	// it.
	alive *liveness
	// stuck learns the partitions' fetch loops beginning and ending
	// (stuck.go); the client tells it of each fetch (kclient.FetchFunc).
	stuck *stuckParts
	// states is the partitions' state (the restorer); nil (a test's)
	// restores and revokes none.
	states partitionStates
	// clog is the changelog, whose meta topic carries the handovers
	// (handover.go); nil (a test's) announces none.
	clog *stateLog
}

// partitionStates is what the consumer asks of the partitions' state
// at their assignment and revocation.
type partitionStates interface {
	// restore brings an assigned partition's state back before its
	// fetch loop starts; false when ctx ended first. It calls restored
	// once the state is in the file and the partition's records are
	// this instance's (readiness: the re-push that follows may wait for
	// room in the pools).
	restore(ctx context.Context, p kclient.Partition, restored func()) bool
	// revoked is told of each revoked partition once its fetch loop
	// ended.
	revoked(p kclient.Partition)
}

// fetchFunc is one partition's fetch loop: it reads src and hands the
// records to the partition's class until ctx ends, and signals caughtUp
// (without blocking) when the partition caught up with its high
// watermark. It closes src when it returns.
type fetchFunc func(ctx context.Context, tr *tracker, src kclient.Source, caughtUp chan<- struct{})

// newConsumer returns a consumer of cfg; a nil newClientFunc means
// kclient.New. It makes no connection: open makes the client.
func newConsumer(cfg consumerConfig) *consumer {
	if cfg.newClientFunc == nil {
		cfg.newClientFunc = kclient.New
	}
	return &consumer{cfg: cfg, handover: &handovers{log: cfg.log, clog: cfg.clog}}
}

// open makes the client: the start's topic check, the join and the lag
// sampler go through it.
func (k *consumer) open() error {
	kcfg := k.cfg.kafka
	kcfg.Handovers = k.handover
	cl, err := k.cfg.newClientFunc(kcfg)
	if err != nil {
		return err
	}
	k.client = cl
	k.handover.member, _ = cl.(kclient.Rejoiner)
	return nil
}

// Start begins the fetching: with a client (see open) it joins the
// group for the topics checkTopics found present, and the fetch loops
// run under a context Stop ends (the share classes' poll loops run under
// it too, Context). It does not wait for the first generation.
func (k *consumer) Start(ctx context.Context) error {
	fetchCtx, ok := k.StartInit(ctx)
	if !ok || k.client == nil {
		return nil
	}
	if err := k.join(fetchCtx, k.present); err != nil {
		return err
	}
	return k.handover.Start(fetchCtx)
}

// join starts the membership for topics; its fetching ends with
// fetchCtx.
func (k *consumer) join(fetchCtx context.Context, topics []string) error {
	return k.client.Join(fetchCtx, topics, k.begin)
}

// wait blocks until the client's loops have ended and every generation's
// fetch loops are quiesced, once the join's fetchCtx ended.
func (k *consumer) wait() {
	if k.client != nil {
		k.client.Wait()
	}
}

// Stop ends the fetching and blocks until the client's loops have ended
// and every generation's fetch loops are quiesced (the partition readers
// close in the background; close joins them). It does not leave the
// group: close does, at the stop's leave.
func (k *consumer) Stop() {
	k.Base.Stop()
	k.handover.Stop()
	k.wait()
}

// closeGrace is what the leave gives the client's Close beyond the
// stop's deadline (a real client bounds itself within it: its reader
// closes, leave and close; see kclient.Client.Close) before it stops
// waiting for it and says so.
func (k *consumer) closeGrace() time.Duration {
	return kclient.LeaveTimeout + k.cfg.kafka.FetchMaxWait + time.Second
}

// close leaves the group, if joined, and closes the client's
// connections, by deadline (see closeGrace); then it waits for the
// leave's announcement to the others (handover.go), at most
// handoverWait.
func (k *consumer) close(deadline time.Time) {
	if k.client == nil {
		return
	}
	wait := max(leaveTimeout, time.Until(deadline)) + k.closeGrace()
	if !within(wait, func() { k.client.Close(deadline) }) {
		k.cfg.log.Warn("closing the Kafka client did not finish within the stop's budget; left closing",
			"phase", "leave", "waited", wait)
	}
	k.handover.wait() // the leave's announcement, before the changelog closes
}

// fetchingGen returns the current generation while its partitions are
// fetched, or nil.
func (k *consumer) fetchingGen() *generation {
	if g := k.gen.Load(); g != nil && g.fetching.Load() {
		return g
	}
	return nil
}

// begin is the kclient.BeginFunc: a session began. An eager session's
// partitions start fetching at once; a cooperative one's come with
// Assign.
func (k *consumer) begin(ctx context.Context, s kclient.Session) kclient.Keeper {
	g := k.newGeneration(ctx, s)
	if s.Eager() {
		g.add(s.Assigned())
	}
	g.fetching.Store(true)
	k.gen.Store(g)
	if s.Eager() {
		k.cfg.ready.join()
		k.cfg.log.Info("joined group generation", "group", k.cfg.group, "generation", g.id.Load(), "partitions", len(g.trackers()))
	}
	g.lag = &lagSampler{g: g}
	_ = g.lag.Start(ctx) // a loop: it does not fail to start
	return g
}

// generation is one session of the client: the set of partitions the
// group gave this instance, their trackers, and the keeper goroutine
// that commits them. It is the session's kclient.Keeper.
type generation struct {
	k       *consumer
	cfg     *consumerConfig
	session kclient.Session
	// id is the group generation, for logs; franz-go's moves on at each
	// rebalance while its partitions stay.
	id atomic.Int32

	// trs is the owned partitions' trackers, replaced (never changed in
	// place) by the keeper when partitions come and go, read by anyone.
	trs atomic.Pointer[[]*tracker]
	// lagMu orders the lag sampler's series updates with the drop of a
	// removed partition's series (remove).
	lagMu sync.Mutex
	// lag is the generation's lag sampler, stopped by Quiesce.
	lag *lagSampler
	// parts is each owned partition's fetch loop; the keeper's only, once
	// it runs.
	parts map[*tracker]*fetchLoop
	// ctx bounds the fetch loops: it ends at the stop's quiesce.
	ctx context.Context
	// running counts the fetch loops; loopMu orders its Adds (none once
	// ctx ended) before the quiesce's Wait (see Quiesce).
	loopMu  sync.Mutex
	running sync.WaitGroup

	// changes carries a cooperative session's assignments and
	// revocations to the keeper, which answers each once it is done.
	changes chan change
	// finalReq asks the keeper for the stop's final commit; it answers on
	// the channel it is sent, then holds the generation open until the
	// group is closed.
	finalReq chan chan error
	ended    chan struct{} // closed when the keeper returns
	// caughtUp is how a fetch loop tells the keeper its partition caught
	// up with its end (kclient.Record.End); see Keep.
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

// change is an assignment (add) or a revocation (remove) the keeper
// applies; lost says the membership is gone, so nothing is committed.
type change struct {
	add    []kclient.Assigned
	remove []kclient.Partition
	lost   bool
	done   chan struct{}
}

func (k *consumer) newGeneration(ctx context.Context, s kclient.Session) *generation {
	g := &generation{k: k, cfg: &k.cfg, session: s, ctx: ctx,
		parts:    map[*tracker]*fetchLoop{},
		changes:  make(chan change),
		finalReq: make(chan chan error), ended: make(chan struct{}), caughtUp: make(chan struct{}, 1)}
	g.id.Store(s.Generation())
	g.trs.Store(&[]*tracker{})
	return g
}

// trackers returns the owned partitions' trackers; the slice is not
// changed afterwards.
func (g *generation) trackers() []*tracker { return *g.trs.Load() }

// clientName is the client's name, for the logs.
func (g *generation) clientName() string { return g.cfg.kafka.Client }

// add starts fetching the partitions ps. Before the keeper runs, the
// goroutine that made the generation calls it; then only the keeper.
func (g *generation) add(ps []kclient.Assigned) {
	if len(ps) == 0 {
		return
	}
	trs := slices.Clone(g.trackers())
	names := make([]string, 0, len(ps))
	for _, p := range ps {
		feed := g.cfg.feedFunc(p.Topic)
		if feed == nil {
			continue // not a configured topic: the group gave it to the wrong member
		}
		tr := newTracker(p.Topic, p.Partition.Partition, p.Offset)
		ctx, cancel := context.WithCancel(g.ctx)
		fl := &fetchLoop{cancel: cancel, done: make(chan struct{})}
		src := g.session.Source(ctx, p)
		g.loopMu.Lock()
		if g.ctx.Err() != nil { // the stop began: nothing is fetched any more
			close(fl.done)
			src.Close()
		} else {
			g.running.Add(1)
			states := g.cfg.states
			if states != nil {
				g.cfg.ready.beginRestore() // before the goroutine: no instant of readiness in between
			}
			g.cfg.stuck.own(p.Partition)
			go func() {
				defer g.running.Done()
				defer close(fl.done)
				defer g.cfg.stuck.disown(p.Partition)
				if states != nil {
					var once sync.Once
					restored := func() { once.Do(g.cfg.ready.restored) }
					ok := states.restore(ctx, p.Partition, restored)
					restored()
					if !ok {
						src.Close() // the partition went, or the stop came, before its state was back
						return
					}
				}
				feed(ctx, tr, src, g.caughtUp)
			}()
		}
		g.loopMu.Unlock()
		g.parts[tr] = fl
		trs = append(trs, tr)
		names = append(names, p.Partition.String())
	}
	g.trs.Store(&trs)
	g.cfg.log.Info("partitions assigned", "client", g.clientName(), "generation", g.id.Load(), "partitions", partList(names))
}

// remove ends the owned partitions in ps (all of them when ps is nil):
// it stops their fetch loops, gives back their messages (revoke), commits
// what is settled unless lost, and drops them. Only the keeper calls it.
func (g *generation) remove(ps []kclient.Partition, lost bool) {
	var gone []*tracker
	var names []string
	keep := g.trackers()[:0:0]
	for _, tr := range g.trackers() {
		if ps != nil && !slices.Contains(ps, tr.partitionName()) {
			keep = append(keep, tr)
			continue
		}
		gone = append(gone, tr)
		names = append(names, tr.partitionName().String())
	}
	for _, tr := range gone {
		g.parts[tr].cancel()
	}
	for _, tr := range gone {
		<-g.parts[tr].done
		delete(g.parts, tr)
	}
	// Their unstarted Kafka messages leave the pools before states.revoked
	// drops the keys their dead letters block: a queued message of such
	// a key that came up to run in between would find it unblocked and
	// run ahead of the key's parked messages.
	first := g.giveBack(gone)
	g.k.revoked.Add(int64(first))
	if g.cfg.states != nil {
		for _, tr := range gone {
			g.cfg.states.revoked(tr.partitionName())
		}
	}
	given, left := g.revoke(gone)
	given += first
	if !lost {
		if err := g.commit(); err != nil {
			g.cfg.metrics.commitFailed()
			g.cfg.log.Warn("commit of revoked partitions failed", "generation", g.id.Load(), "err", err)
		}
	}
	g.lagMu.Lock() // a sample in flight sets no series of a gone partition
	g.trs.Store(&keep)
	for _, tr := range gone {
		g.cfg.metrics.dropLag(tr.topic, tr.partition)
	}
	g.lagMu.Unlock()
	if len(gone) > 0 || ps == nil {
		g.cfg.log.Info("partitions revoked", "client", g.clientName(), "generation", g.id.Load(), "partitions", partList(names),
			"given_back", given, "still_running", left, "lost", lost)
	}
}

// Quiesce waits for every fetch loop to end, once ctx has ended (the
// stop began, or the session ended), and stops the lag sampler. It does
// not go through the keeper, which may be busy in a commit.
func (g *generation) Quiesce() {
	g.loopMu.Lock()
	g.loopMu.Unlock() //nolint:staticcheck // an add in progress has done its Add
	g.running.Wait()
	g.fetching.Store(false)
	g.lag.Stop()
}

// Assign is a cooperative session's assignment of ps, in group
// generation gen.
func (g *generation) Assign(gen int32, ps []kclient.Assigned) {
	g.id.Store(gen)
	g.request(change{add: ps})
	g.cfg.ready.join()
	// As an eager session logs each generation it joins: cooperative
	// generations keep their partitions, so the count is all it holds.
	g.cfg.log.Info("joined group generation", "group", g.cfg.group, "generation", gen, "partitions", len(g.trackers()))
}

// Revoke is a cooperative session's revocation (lost: loss) of ps.
func (g *generation) Revoke(ps []kclient.Partition, lost bool) {
	g.request(change{remove: ps, lost: lost})
}

// partList is the "partitions" attribute of the assignment lines: sorted
// topic/partition names, comma-separated.
func partList(names []string) string {
	slices.Sort(names)
	return strings.Join(names, ",")
}

// giveBack takes the unstarted and backing-off Kafka messages of trs
// out of the pools and gives them back; it returns how many.
func (g *generation) giveBack(trs []*tracker) int {
	if len(trs) == 0 {
		return 0
	}
	mine := make(map[*tracker]bool, len(trs))
	for _, tr := range trs {
		mine[tr] = true
	}
	return g.cfg.giveBackFunc(func(tr *tracker) bool { return mine[tr] })
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
	take := func() { given += g.giveBack(trs) }
	inFlight := func() int {
		n := 0
		for _, tr := range trs {
			n += tr.inFlight()
		}
		return n
	}
	take()
	deadline := time.Now().Add(g.cfg.revokeTimeout)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for left = inFlight(); left > 0 && time.Now().Before(deadline); left = inFlight() {
		<-t.C
		take() // a handler that failed meanwhile waits out a backoff
	}
	g.k.revoked.Add(int64(given))
	if left > 0 {
		g.cfg.log.Warn("handlers of revoked partitions still running; their results will not be committed",
			"generation", g.id.Load(), "running", left, "waited", g.cfg.revokeTimeout)
	}
	return given, left
}

// consumerConfig is the runtime's consumerConfig: connections made by
// conn, repeated warnings through logs.
func (r *Runtime) consumerConfig(conn *connection, logs *logBackoff) consumerConfig {
	cfg := &r.cfg
	f := &feeder{byTopic: r.classes.byTopic, epoch: r.life.epoch, resumes: r.restore.resumes}
	return consumerConfig{
		log: r.log, logs: logs, conn: conn, metrics: r.metrics, group: cfg.Group,
		commitInterval: cfg.CommitInterval, revokeTimeout: cfg.RevokeTimeout,
		startLast: cfg.StartOffset == StartLast,
		classes:   cfg.Classes, topics: r.classes.topics,
		kafka: kclient.Config{
			Client: string(cfg.Client), Brokers: cfg.Brokers, ClientID: cfg.ClientID, Group: cfg.Group,
			Instance: cfg.staticID, Consumer: cfg.GroupProtocol == GroupProtocolConsumer, SessionTimeout: cfg.SessionTimeout, RebalanceTimeout: cfg.RebalanceTimeout,
			HeartbeatInterval: cfg.HeartbeatInterval, FetchMaxWait: cfg.FetchMaxWait, FetchQueue: cfg.FetchQueue, StartLast: cfg.StartOffset == StartLast,
			ReadCommitted: cfg.IsolationLevel == ReadCommitted, DialFunc: conn.clientDial(),
			Log: r.log, WarnFunc: logs.warn, FetchErrorFunc: r.metrics.fetchError,
			FetchFunc: r.ready.stuck.fetched,
		},
		feedFunc:     f.feed,
		byTopic:      r.classes.byTopic,
		giveBackFunc: r.giveBack,
		epoch:        r.life.epoch,
		ready:        &r.ready,
		alive:        &r.alive,
		stuck:        r.ready.stuck,
		states:       r.restore,
		clog:         r.clog,
	}
}

// giveBack takes the unstarted and backing-off Kafka messages of the
// trackers mine reports out of the pools and gives them back (abandon):
// a revocation's. It returns how many.
func (r *Runtime) giveBack(mine func(*tracker) bool) int {
	match := func(it *item) bool { return it.isKafka() && mine(it.tracker()) }
	given := 0
	for _, c := range r.classes.order {
		if len(c.cfg.Topics) == 0 {
			continue
		}
		for _, it := range c.pool.Remove(match) {
			r.abandon(it)
			given++
		}
	}
	return given
}
