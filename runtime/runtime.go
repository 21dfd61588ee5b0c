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
	"github.com/handoff-go/handoff/snapshot"
)

// Runtime is the main loop of a Kafka-consuming service: it feeds each
// class's pool, commits what is safe, and on stop drains, snapshots and
// commits. Create it with [New], run it with [Runtime.Run]. Its methods
// are safe for concurrent use.
type Runtime struct {
	cfg     Config
	log     *slog.Logger
	classes map[string]*class
	order   []*class // config order, for deterministic stops
	byTopic map[string]*class
	topics  []string
	metrics *metrics
	// epoch is when New ran; see now.
	epoch time.Time

	life      lifecycle
	accepting atomic.Bool // Submit, Schedule and Requeue are let in
	// Readiness (see Ready): started (recovered, not stopping), joined (a
	// generation received) and every topic present.
	ready    atomic.Bool
	joined   atomic.Bool
	topicsOK atomic.Bool

	// The state file, open from the start of Run to the end of its stop.
	store     *snapshot.Store
	storeOpen atomic.Bool // the admin API may use it
	deletes   deletes     // records of done messages, deleted in batches

	// Feeds of the pools besides fetching.
	sched    *scheduler
	releases releases // key releases of ordered classes
	requeues requeues // dead letters requeued and not finished
	held     held     // submitted messages whose save failed

	// Kafka: the consumer group and its client (group.go), the
	// dead-letter publisher (nil without a DeadLetterTopic) and how
	// connections to the brokers are made (connect.go).
	kafka *consumer
	dlq   *publisher
	conn  *connection

	orphans orphans  // saved messages of unknown classes, logged as one line; see rename.go
	alive   liveness // the loops that beat; see alive.go

	stats counters    // outcomes of no configured class; see total
	logs  *logBackoff // repeated failures' lines
	// items recycles the items of fetched Kafka messages: one allocation
	// less per message on the hot path. A handler never sees an item,
	// only a copy of its message (see handler).
	items sync.Pool

	// beforeSnapshot, when set by a test, runs just before the stop's
	// snapshot transaction.
	beforeSnapshot func(*snapshot.Store)
	// beforeWrite, when set by a test, runs in the transaction of a move
	// (see Runtime.move) or of the delete of a done parked message before
	// it writes, with the operation's name; an error it returns fails
	// the transaction.
	beforeWrite func(op string, it *item) error
	// testHookDiverted, when set by a test, runs in the handler wrapper
	// after it saved a message elsewhere, before it returns.
	testHookDiverted func(ctx context.Context)
}

// lifecycle is a Runtime's start and stop signalling.
type lifecycle struct {
	state    atomic.Int32
	stopOnce sync.Once
	stopCh   chan struct{} // closed when a stop is requested
	skipOnce sync.Once
	skipCh   chan struct{} // closed when the rest of the drain is to be skipped
	done     chan struct{} // closed when Run returns
	err      error         // what Run returned; set before done closes
}

const (
	stateNew int32 = iota
	stateRunning
	stateDone
)

func (l *lifecycle) requestStop() { l.stopOnce.Do(func() { close(l.stopCh) }) }
func (l *lifecycle) skipDrain()   { l.skipOnce.Do(func() { close(l.skipCh) }) }

type class struct {
	cfg Class
	// handle is cfg.Handler in the middleware chain (attempt.go); hooked
	// says there is middleware, and so an attempt context per attempt.
	handle  handoff.HandlerFunc
	hooked  bool
	pool    *pool.Pool[*item]
	parking *parking // ordered classes only
	stats   counters
	svc     serviceTime
	index   int      // in Runtime.order
	batch   *batcher // batch classes only
	// susp is the class's outage suspension and pause (suspend.go).
	susp suspension
	// diverted counts the results of messages the handler wrapper saved
	// elsewhere (parked, deferred) instead of running: the pool counts
	// them failed.
	diverted atomic.Uint64
}

// New validates cfg and returns a Runtime ready to [Runtime.Run]. Every
// problem is reported at once, each wrapping [ErrConfig].
func New(cfg Config) (*Runtime, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Runtime{
		epoch:   time.Now(),
		cfg:     cfg,
		log:     cfg.Logger.With("component", "runtime"),
		classes: map[string]*class{},
		byTopic: map[string]*class{},
		life:    lifecycle{stopCh: make(chan struct{}), skipCh: make(chan struct{}), done: make(chan struct{})},
	}
	r.logs = newLogBackoff()
	r.sched = newScheduler(r)
	r.held.added = make(chan struct{}, 1)
	r.items.New = func() any { return new(item) }
	var errs []error
	for _, cc := range cfg.Classes {
		c := &class{cfg: cc, index: len(r.order)}
		c.susp.init()
		workers := cc.Workers
		if cc.BatchHandler != nil {
			c.batch = newBatcher(r, c)
			workers = batchPoolWorkers(cc)
		}
		var keyFunc func(*item) string
		if cc.Ordered {
			keyFunc = itemKey
			c.parking = &parking{keys: map[string]*keyState{}}
		}
		p, err := pool.New(pool.Config[*item]{
			Name:       cc.Name,
			Workers:    workers,
			QueueSize:  cc.QueueSize,
			Ordered:    cc.Ordered,
			KeyFunc:    keyFunc,
			Handler:    r.handler(c),
			RetryFunc:  r.retry(c),
			ResultFunc: r.result(c),
			Logger:     cfg.Logger,
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrConfig, err))
			continue
		}
		c.pool = p
		if c.handle, c.hooked, err = chain(&cfg, &cc); err != nil {
			errs = append(errs, err)
			continue
		}
		r.classes[cc.Name] = c
		r.order = append(r.order, c)
		for _, t := range cc.Topics {
			r.byTopic[t] = c
			r.topics = append(r.topics, t)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer, r)
	if err != nil {
		return nil, fmt.Errorf("runtime: register metrics: %w", err)
	}
	r.metrics = m
	r.conn = newConnection(&cfg, r.log)
	r.kafka = r.newConsumer()
	return r, nil
}

// now is time.Now from one clock read instead of two: epoch plus the
// monotonic time since it (time.Now reads the wall clock as well). It is
// what the fetch loop stamps FirstSeen with, once per message. Unlike
// time.Now its wall reading does not follow a step of the system clock
// after New; the monotonic reading is the same.
func (r *Runtime) now() time.Time { return r.epoch.Add(time.Since(r.epoch)) }

// mono is the monotonic time since New, in nanoseconds: the clock the
// trackers stamp fetched offsets with.
func (r *Runtime) mono() int64 { return int64(time.Since(r.epoch)) }

// Ready reports whether the runtime has recovered its state file, found
// every configured topic on the brokers, received its first consumer
// group generation (it stays ready through later rebalances) and is not
// stopping: false the moment a stop begins, so a load balancer can stop
// sending work. Without topics, recovered and not stopping is enough.
func (r *Runtime) Ready() bool {
	return r.ready.Load() && (len(r.topics) == 0 || r.joined.Load() && r.topicsOK.Load())
}

// Group returns the consumer group ID, Config.Group.
func (r *Runtime) Group() string { return r.cfg.Group }

// Instance returns the instance's name, Config.Instance with its default
// (the hostname) applied.
func (r *Runtime) Instance() string { return r.cfg.Instance }

// Started returns when [New] made the runtime: the counters of [Stats]
// and of the metrics count since then (they start at zero in each
// process).
func (r *Runtime) Started() time.Time { return r.epoch }

// DrainTimeout returns the configured drain bound, defaults applied.
func (r *Runtime) DrainTimeout() time.Duration { return r.cfg.DrainTimeout }

// Submit hands a message that did not come from Kafka to class's pool.
// It blocks while the pool is full, until ctx ends. m.ID is required and
// should be stable (the state file keeps it across restarts); m.Class is
// set to class. The message is handled, or saved to the state file at the
// stop and handled after the restart. Submit returns [ErrNotRunning]
// before Run has started and once the stop has begun.
func (r *Runtime) Submit(ctx context.Context, class string, m *handoff.Message) error {
	c, msg, err := r.accept("submit", class, m)
	if err != nil {
		return err
	}
	if err := c.pool.Submit(ctx, &item{msg: msg, src: fromSubmit}); err != nil {
		if errors.Is(err, pool.ErrStopped) {
			return ErrNotRunning
		}
		return fmt.Errorf("runtime: submit to class %q: %w", class, err)
	}
	return nil
}

// accept checks a message handed in by Submit or Schedule and returns its
// class and a copy with Class and FirstSeen set.
func (r *Runtime) accept(verb, class string, m *handoff.Message) (*class, handoff.Message, error) {
	if !r.accepting.Load() {
		return nil, handoff.Message{}, ErrNotRunning
	}
	c := r.classes[class]
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

// openStore returns the open state file, or ErrNotRunning.
func (r *Runtime) openStore() (*snapshot.Store, error) {
	if !r.storeOpen.Load() {
		return nil, ErrNotRunning
	}
	return r.store, nil
}
