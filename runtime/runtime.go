package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/pool"
	"github.com/handoff-go/handoff/runtime/internal/hold"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/snapshot"
)

// Runtime is the main loop of a Kafka-consuming service: it feeds each
// class's pool, commits what is safe, and on stop drains, snapshots and
// commits. Create it with [New], run it with [Runtime.Run]. Its methods
// are safe for concurrent use.
type Runtime struct {
	cfg     Config
	log     *slog.Logger
	classes classSet
	metrics *metrics

	life  lifecycle
	ready readiness // see Ready

	// The state file, open from the start of Run to the end of its stop.
	state   *stateFile
	deletes snapshot.DoneQueue // records of done messages, deleted in batches
	// clog is the state file's changelog (changelog.go); off with
	// LocalStateOnly or without topics. restore brings an assigned
	// partition's state back from it (restore.go); its resumes tie the
	// fetched copies of re-pushed saved Kafka messages to them
	// (progress.go).
	clog    *stateLog
	restore *restorer

	// Feeds of the pools besides fetching.
	sched    *scheduler
	releases releases  // key releases of ordered classes
	fail     *failures // dead letters, redeliveries, requeues, unsaved failures
	ops      *deadOps  // the group's dead-letter operations (deadops.go)
	handling *handling // every pool's handler wrapper, retry and result

	// Kafka: the consumer group and its client (group.go; how
	// connections to the brokers are made, connect.go, is its
	// cfg.conn) and the dead-letter publisher (nil without a
	// DeadLetterTopic).
	kafka *consumer
	dlq   *publisher

	alive liveness // the loops that beat; see alive.go
	tally *tally   // event counts

	// retain is the dead-letter retention (retention.go).
	retain *retention
}

// classSet is the configured classes, by name, in config order (for
// deterministic stops) and by topic, and every topic of them. Built by
// New, read-only after.
type classSet struct {
	byName  map[string]*class
	order   []*class
	byTopic map[string]*class
	topics  []string
}

// lifecycle is a Runtime's start and stop signalling.
type lifecycle struct {
	// epoch is when New ran; see Runtime.now.
	epoch    time.Time
	state    atomic.Int32
	stopOnce sync.Once
	stopCh   chan struct{} // closed when a stop is requested
	skipOnce sync.Once
	skipCh   chan struct{} // closed when the rest of the drain is to be skipped
	done     chan struct{} // closed when Run returns
	err      error         // what Run returned; set before done closes
	// accepting lets Submit and Requeue in, and Schedule hand a message
	// due now to its pool: from the start of Run to the start of its
	// stop.
	accepting atomic.Bool
	// stopping is set when the stop begins: from then on a handler's
	// ErrNotRunning is the stop's refusal (handling.stopRefused).
	stopping atomic.Bool
	// deadline is when the stop must be over, set as it begins.
	deadline stopDeadline
	// schedules admits Schedule: from the start of Run to the stop's
	// snapshot, which waits for the calls under way (a Schedule during
	// the stop saves its message for the next start).
	schedules admission
}

// admission admits the calls of an API from open to close, and lets
// close wait for those under way.
type admission struct {
	mu     sync.Mutex
	isOpen bool
	busy   sync.WaitGroup
}

// open admits calls.
func (a *admission) open() {
	a.mu.Lock()
	a.isOpen = true
	a.mu.Unlock()
}

// enter reports whether a call is admitted; an admitted call calls leave
// when it ends.
func (a *admission) enter() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.isOpen {
		return false
	}
	a.busy.Add(1)
	return true
}

// leave ends a call enter admitted.
func (a *admission) leave() { a.busy.Done() }

// close admits no more calls and waits for those admitted to leave.
func (a *admission) close() {
	a.mu.Lock()
	a.isOpen = false
	a.mu.Unlock()
	a.busy.Wait()
}

// readiness is what Ready reports: started (recovered, not stopping),
// joined (a generation received) and every topic present.
type readiness struct {
	started  atomic.Bool
	joined   atomic.Bool
	topicsOK atomic.Bool
	// restoring counts the assigned partitions whose state is being read
	// from the changelog into the state file: not ready until the first
	// assignment's are done (the re-push of their saved messages that
	// follows does not count). settled is set then: later rebalances'
	// restores do not take the readiness back.
	restoring atomic.Int64
	settled   atomic.Bool
	// stuck is the owned partitions whose fetch or restore fails
	// (stuck.go): not ready while one is stuck.
	stuck *stuckParts
}

// join marks the first generation arrived; the restores of its
// partitions, counted already, end the wait for them (restored).
func (rd *readiness) join() {
	rd.joined.Store(true)
	if rd.restoring.Load() == 0 {
		rd.settled.Store(true)
	}
}

// beginRestore counts an assigned partition's restore; restored ends it.
func (rd *readiness) beginRestore() { rd.restoring.Add(1) }

// restored ends a restore counted by beginRestore.
func (rd *readiness) restored() {
	if rd.restoring.Add(-1) == 0 && rd.joined.Load() {
		rd.settled.Store(true)
	}
}

const (
	stateNew int32 = iota
	stateRunning
	stateDone
)

func (l *lifecycle) requestStop() { l.stopOnce.Do(func() { close(l.stopCh) }) }

// stopContext returns a context that ends when a stop is requested, or
// with cancel.
func (l *lifecycle) stopContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-l.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// stopDeadline is when the stop must be over: set once as the stop
// begins, read by the services whose Stop works within what is left of
// it (the dead-letter publisher). Safe for concurrent use.
type stopDeadline struct{ t atomic.Pointer[time.Time] }

// set records the stop's deadline.
func (d *stopDeadline) set(t time.Time) { d.t.Store(&t) }

// at returns the stop's deadline, or now when no stop has begun.
func (d *stopDeadline) at() time.Time {
	if t := d.t.Load(); t != nil {
		return *t
	}
	return time.Now()
}
func (l *lifecycle) skipDrain() { l.skipOnce.Do(func() { close(l.skipCh) }) }

type class struct {
	cfg Class
	// handle is cfg.Handler in the middleware chain (attempt.go); hooked
	// says there is middleware, and so an attempt context per attempt.
	handle handoff.HandlerFunc
	hooked bool
	pool   *pool.Pool[*item]
	keys   *orderedKeys // ordered classes only
	stats  counters
	svc    serviceTime
	index  int      // in Runtime.classes.order
	batch  *batcher // batch classes only
	// hold is the class's outage suspension and pause.
	hold *hold.Hold[*item]
	// diverted counts the results of messages the handler wrapper saved
	// elsewhere (parked, deferred) instead of running: the pool counts
	// them failed.
	diverted atomic.Uint64
	// slabs is the class's free list of recycled slabs when it recycles
	// its messages (Class.RecycleMessages); nil otherwise.
	slabs *freeSlabs
	// share is a share class's member of its share group (share.go);
	// nil for another class.
	share *shareFeed
}

// New validates cfg and returns a Runtime ready to [Runtime.Run]. Every
// problem is reported at once, each wrapping [ErrConfig].
func New(cfg Config) (*Runtime, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Runtime{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "runtime"),
		classes: classSet{byName: map[string]*class{}, byTopic: map[string]*class{}},
		life: lifecycle{epoch: time.Now(), stopCh: make(chan struct{}), skipCh: make(chan struct{}),
			done: make(chan struct{})},
	}
	logs := newLogBackoff()
	r.buildState(logs)
	if err := r.buildClasses(); err != nil {
		return nil, err
	}
	r.ready.stuck = newStuckParts(cfg.StuckAfter, r.log)
	r.retain = newRetention(r)
	if r.metrics, err = newMetrics(cfg.Registerer, r); err != nil {
		return nil, fmt.Errorf("runtime: register metrics: %w", err)
	}
	r.handling.metrics = r.metrics
	for _, c := range r.classes.order {
		if c.batch != nil {
			c.batch.metrics = r.metrics
		}
	}
	conn := newConnection(&cfg, r.log)
	for _, c := range r.classes.order {
		if c.cfg.ShareGroup != "" {
			c.share = r.shareFeedOf(c, conn, logs)
		}
	}
	if cfg.Registerer != nil && r.hasShare() {
		if err := cfg.Registerer.Register(newShareCollector(r)); err != nil {
			return nil, fmt.Errorf("runtime: register metrics: %w", err)
		}
	}
	resumes := &resumes{state: r.state, log: r.log,
		clientFunc: func() kclient.Client { return r.kafka.client },
		byTopic:    r.classes.byTopic}
	r.restore = &restorer{clog: r.clog, state: r.state, classes: r.classes.byName, order: r.classes.order,
		fail: r.fail, sched: r.sched, handling: r.handling, log: r.log, warn: newLogBackoff(),
		resumes: resumes, stuck: r.ready.stuck, revokeWait: cfg.RevokeTimeout / 2, deletes: &r.deletes}
	r.kafka = newConsumer(r.consumerConfig(conn, logs))
	return r, nil
}

// buildState makes what the runtime's state goes through: the state
// file and its changelog, the failures, the dead-letter operations, the
// scheduler and the handler wrapper.
func (r *Runtime) buildState(logs *logBackoff) {
	cfg := &r.cfg
	r.tally = &tally{}
	r.state = &stateFile{log: r.log}
	r.clog = &stateLog{log: r.log, state: r.state, timeout: cfg.ChangelogTimeout, renames: cfg.ClassRenames}
	r.fail = newFailures(failuresConfig{state: r.state, tally: r.tally, classes: r.classes.byName, accepting: &r.life.accepting,
		publish: func(c *class, rec snapshot.Record) { r.dlq.publish(c, rec) }, log: r.log, clog: r.clog})
	r.ops = newDeadOps(r, logs)
	r.clog.ops = r.ops
	r.sched = newScheduler(schedulerConfig{state: r.state, tally: r.tally, classes: r.classes.byName, fail: r.fail, log: r.log,
		clog: r.clog})
	r.state.sched, r.clog.sched = r.sched, r.sched
	r.handling = &handling{cfg: handlingConfig{state: r.state, deletes: &r.deletes, tally: r.tally, fail: r.fail,
		sched: r.sched, clog: r.clog, stopping: &r.life.stopping, log: r.log}}
	r.fail.cfg.sched = r.sched
}

// buildClasses makes every configured class: its handler chain, pool,
// ordered keys and hold. It reports every class's problem at once.
func (r *Runtime) buildClasses() error {
	var errs []error
	for _, cc := range r.cfg.Classes {
		c, err := r.newClass(cc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.classes.byName[cc.Name] = c
		r.classes.order = append(r.classes.order, c)
		r.tally.classes = r.classes.order
		for _, t := range cc.Topics {
			r.classes.byTopic[t] = c
			r.classes.topics = append(r.classes.topics, t)
		}
	}
	return errors.Join(errs...)
}

// newClass makes class cc, the next in the order: its handler chain, its
// pool (built for batches when it has a BatchHandler), its ordered keys
// and its hold.
func (r *Runtime) newClass(cc Class) (*class, error) {
	cfg := &r.cfg
	c := &class{cfg: cc, index: len(r.classes.order)}
	if cc.RecycleMessages {
		c.slabs = newFreeSlabs(cc.QueueSize, cc.Workers)
	}
	// The chain first: whether a batch class has middleware decides its
	// pool's shape. Its error is reported after the pool's.
	var chainErr error
	c.handle, c.hooked, chainErr = chain(cfg, &cc)
	var keyFunc func(*item) string
	if cc.Ordered {
		keyFunc = itemKey
	}
	pc := pool.Config[*item]{
		Name:       cc.Name,
		Workers:    cc.Workers,
		QueueSize:  cc.QueueSize,
		Ordered:    cc.Ordered,
		KeyFunc:    keyFunc,
		Handler:    r.handling.handler(c),
		RetryFunc:  r.handling.retry(c),
		ResultFunc: r.handling.result(c),
		Rate:       cc.RateLimit.PerSecond, // zero: none
		Burst:      cc.RateLimit.Burst,
		Logger:     cfg.Logger,
	}
	if cc.BatchHandler != nil {
		c.batch = newBatcher(c, r.log)
		if c.hooked {
			pc.Workers = batchPoolWorkers(cc) // a worker per message in a batch (batch.go)
		} else {
			pc.Handler, pc.BatchHandler = nil, r.handling.batchHandler(c)
			pc.MaxBatch, pc.MaxWait = cc.MaxBatch, cc.MaxWait
		}
	}
	p, err := pool.New(pc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if chainErr != nil {
		return nil, chainErr
	}
	c.pool = p
	if cc.Ordered {
		c.keys = newOrderedKeys(keysConfig{class: cc.Name, pool: p, state: r.state, deletes: &r.deletes,
			releases: &r.releases, counts: &c.stats, clog: r.clog, log: r.log})
	}
	c.hold = hold.New(hold.Config[*item]{Class: cc.Name, Policy: hold.Policy(cc.Suspend), Permanent: cc.Retry.PermanentFunc,
		Pool: p, Log: r.log, Stopping: r.life.stopCh, Rewind: r.sched.wake, Backoff: probeBackoff})
	return c, nil
}

// now is time.Now from one clock read instead of two: epoch plus the
// monotonic time since it (time.Now reads the wall clock as well). It is
// what the fetch loop stamps FirstSeen with, once per message. Unlike
// time.Now its wall reading does not follow a step of the system clock
// after New; the monotonic reading is the same.
func (r *Runtime) now() time.Time { return r.life.epoch.Add(time.Since(r.life.epoch)) }

// mono is the monotonic time since New, in nanoseconds: the clock the
// trackers stamp fetched offsets with.
func (r *Runtime) mono() int64 { return int64(time.Since(r.life.epoch)) }

// Ready reports whether the runtime has recovered its state file, found
// every configured topic on the brokers, received its first consumer
// group generation and read the state of its partitions from the
// changelog (it stays ready through later rebalances and their restores),
// has no stuck partition (one it owns whose fetch, or restore before its
// first fetch, has failed for longer than Config.StuckAfter with no
// success since) and is not stopping: false the moment a stop begins, so
// a load balancer can stop sending work. Without topics, recovered and
// not stopping is enough.
func (r *Runtime) Ready() bool {
	return r.ready.started.Load() && !r.state.replaced.Load() && (len(r.classes.topics) == 0 ||
		r.ready.joined.Load() && r.ready.topicsOK.Load() && r.ready.settled.Load() && !r.ready.stuck.any())
}

// Group returns the consumer group ID, Config.Group.
func (r *Runtime) Group() string { return r.cfg.Group }

// Instance returns the instance's name, Config.Instance with its default
// (the hostname) applied.
func (r *Runtime) Instance() string { return r.cfg.Instance }

// Started returns when [New] made the runtime: the counters of [Stats]
// and of the metrics count since then (they start at zero in each
// process).
func (r *Runtime) Started() time.Time { return r.life.epoch }

// DrainTimeout returns the configured drain bound, defaults applied.
func (r *Runtime) DrainTimeout() time.Duration { return r.cfg.DrainTimeout }

// Submit hands a message that did not come from Kafka to class's pool.
// It blocks while the pool is full, until ctx ends. m.ID is required and
// should be stable (the state file keeps it across restarts); m.Class is
// set to class. The message is handled, or saved to the state file at the
// stop and handled after the restart. Submit returns [ErrNotRunning]
// before Run has started and once the stop has begun: a handler whose
// follow-up work must survive the stop uses [Runtime.Schedule], which
// saves it during the stop.
func (r *Runtime) Submit(ctx context.Context, class string, m *handoff.Message) error {
	c, msg, err := r.accept("submit", class, m)
	if err != nil {
		return err
	}
	return r.submit(ctx, c, msg)
}

// submit hands msg, checked by accept, to c's pool; see [Runtime.Submit].
func (r *Runtime) submit(ctx context.Context, c *class, msg handoff.Message) error {
	if err := c.pool.Submit(ctx, &item{m: msg, src: fromSubmit}); err != nil {
		if errors.Is(err, pool.ErrStopped) {
			return ErrNotRunning
		}
		return fmt.Errorf("runtime: submit to class %q: %w", c.cfg.Name, err)
	}
	return nil
}

// accept checks a message handed in by Submit or Schedule while the
// runtime accepts them (from the start of Run to the start of its stop)
// and returns its class and a copy with Class and FirstSeen set.
func (r *Runtime) accept(verb, class string, m *handoff.Message) (*class, handoff.Message, error) {
	if !r.life.accepting.Load() {
		return nil, handoff.Message{}, ErrNotRunning
	}
	return r.check(verb, class, m)
}

// check is accept without the look at whether the runtime accepts.
func (r *Runtime) check(verb, class string, m *handoff.Message) (*class, handoff.Message, error) {
	c := r.classes.byName[class]
	if c == nil {
		return nil, handoff.Message{}, fmt.Errorf("%w: %q", ErrUnknownClass, class)
	}
	if m == nil || m.ID == "" {
		return nil, handoff.Message{}, fmt.Errorf("runtime: %s to class %q: message needs an ID", verb, class)
	}
	msg := *m
	msg.Class = class
	if msg.FirstSeen.IsZero() {
		msg.FirstSeen = time.Now()
	}
	return c, msg, nil
}

// Shutdown starts the graceful stop, if it has not started, and waits
// until [Runtime.Run] has returned or ctx ends. When ctx ends first the
// stop escalates: the rest of the drain is skipped, as a second signal
// does, and Shutdown returns ctx.Err() without waiting further. Before Run
// and after it returned, Shutdown does nothing and returns nil.
func (r *Runtime) Shutdown(ctx context.Context) error {
	if r.life.state.Load() != stateRunning {
		return nil
	}
	r.life.requestStop()
	select {
	case <-r.life.done:
		return nil
	case <-ctx.Done():
		r.life.skipDrain()
		return ctx.Err()
	}
}

// Close is the hard stop: it skips the drain (handlers still get
// HardStopGrace to return after their context is cancelled), saves what
// is unprocessed, commits, waits for [Runtime.Run] to return and returns
// the error Run returned (a failed snapshot or final commit). Before Run
// and after it returned, Close does nothing and returns nil.
func (r *Runtime) Close() error {
	if r.life.state.Load() != stateRunning {
		return nil
	}
	r.life.requestStop()
	r.life.skipDrain()
	<-r.life.done
	return r.life.err
}
