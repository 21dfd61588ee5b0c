package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/pool"
	"github.com/handoff-go/handoff/snapshot"
)

var (
	// ErrNotRunning is returned by [Runtime.Submit] before [Runtime.Run]
	// has started and once the stop has begun.
	ErrNotRunning = errors.New("runtime: not running")
	// ErrRunTwice is returned by a second call of [Runtime.Run]: a stopped
	// runtime is not reused.
	ErrRunTwice = errors.New("runtime: Run called twice")
	// ErrUnknownClass is returned by [Runtime.Submit] for a class that is
	// not configured.
	ErrUnknownClass = errors.New("runtime: unknown class")
	// ErrCommit is wrapped by the error [Runtime.Run] returns when the
	// stop's final offset commit failed. Nothing is lost: Kafka delivers
	// the uncommitted messages again, some of which were already handled
	// or saved.
	ErrCommit = errors.New("runtime: final commit failed")
	// ErrOtherGroup is returned by [Runtime.Run] when the state file was
	// written by an instance of another consumer group: its saved
	// messages belong to that group's partitions. The error names the
	// file and both groups.
	ErrOtherGroup = errors.New("runtime: state file belongs to another consumer group")
	// ErrStopping is the cause of the handler contexts cancelled by the
	// hard stop: context.Cause(ctx) returns it.
	ErrStopping = errors.New("runtime: stopping")
)

const (
	stateNew int32 = iota
	stateRunning
	stateDone
)

// How long the final commit and the group leave may take at most; with
// the reader closes they make the fixed margin of a stop.
const (
	commitTimeout = 2 * time.Second
	leaveTimeout  = time.Second
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

	state     atomic.Int32
	storeOpen atomic.Bool // store is set and open: the admin API may use it
	accepting atomic.Bool
	ready     atomic.Bool

	stopOnce sync.Once
	stopCh   chan struct{} // closed when a stop is requested
	skipOnce sync.Once
	skipCh   chan struct{} // closed when the rest of the drain is to be skipped
	runDone  chan struct{} // closed when Run returns

	store   *snapshot.Store
	sched   *scheduler
	dlq     *kafka.Writer // dead-letter topics, when a class has one
	stats   counters      // outcomes of no configured class; see total
	metrics *metrics
	// items recycles the items of fetched Kafka messages: one allocation
	// less per message on the hot path.
	items sync.Pool
	// epoch is when New ran; see now.
	epoch time.Time
	// closing counts the partition readers still being closed.
	closing sync.WaitGroup

	delMu   sync.Mutex
	delDone doneRecords // records whose messages are done, deleted in batches

	genMu   sync.Mutex
	gen     *generation
	revoked atomic.Int64 // messages given back at rebalances

	// Key releases of ordered classes; relCtx ends at the stop.
	relMu    sync.Mutex
	relCtx   context.Context
	releases sync.WaitGroup

	reqMu     sync.Mutex
	requeuing map[uint64]bool // dead letters requeued and not finished

	// beforeSnapshot, when set by a test, runs just before the stop's
	// snapshot transaction.
	beforeSnapshot func(*snapshot.Store)
}

// outcome names a counted result of handling; see [Report].
type outcome int

const (
	outSucceeded outcome = iota
	outRetried
	outDeadLettered
	outRedelivered
	outParked
	outReleased
	outDeferred
	outScheduled
	outDelivered
	outRequeued
	outRequeuedDone
	outDiscarded
	outPublished
	numOutcomes
)

// outcomeNames are the outcome label values of handoff_messages_total.
var outcomeNames = [numOutcomes]string{"succeeded", "retried", "dead_lettered", "redelivered", "parked", "released",
	"deferred", "scheduled", "delivered", "requeued", "requeued_done", "discarded", "published"}

// counters are outcome counts, runtime-wide and per class.
type counters [numOutcomes]atomic.Uint64

// inc counts one o for class c (nil when the class is not configured).
// Each count lands in one place, the class's counters or, without a
// class, the runtime's own: one atomic add per outcome on the hot path.
func (r *Runtime) inc(c *class, o outcome) {
	if c != nil {
		c.stats[o].Add(1)
	} else {
		r.stats[o].Add(1)
	}
}

// now is time.Now from one clock read instead of two: epoch plus the
// monotonic time since it (time.Now reads the wall clock as well). It is
// what the fetch loop stamps FirstSeen with, once per message. Unlike
// time.Now its wall reading does not follow a step of the system clock
// after New; the monotonic reading is the same.
func (r *Runtime) now() time.Time { return r.epoch.Add(time.Since(r.epoch)) }

// total returns the runtime-wide count of o: every class's and those
// without a class.
func (r *Runtime) total(o outcome) uint64 {
	n := r.stats[o].Load()
	for _, c := range r.order {
		n += c.count(o)
	}
	return n
}

// count returns the class's count of o. Successes are the pool's count:
// every handler that returned nil is one (the result callback settles it),
// and the pool counts them under the lock it takes anyway, so the hot
// path has no counter of its own to write.
func (c *class) count(o outcome) uint64 {
	if o == outSucceeded {
		return c.pool.Stats().Succeeded
	}
	return c.stats[o].Load()
}

type class struct {
	cfg     Class
	pool    *pool.Pool[*item]
	parking *parking // ordered classes only
	stats   counters
	svc     serviceTime
	index   int // in Runtime.order
}

// New validates cfg and returns a Runtime ready to [Runtime.Run]. Every
// problem is reported at once, each wrapping [ErrConfig].
func New(cfg Config) (*Runtime, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Runtime{
		epoch:     time.Now(),
		cfg:       cfg,
		log:       cfg.Logger.With("component", "runtime"),
		classes:   map[string]*class{},
		byTopic:   map[string]*class{},
		stopCh:    make(chan struct{}),
		skipCh:    make(chan struct{}),
		runDone:   make(chan struct{}),
		requeuing: map[uint64]bool{},
	}
	r.sched = newScheduler(r)
	r.items.New = func() any { return new(item) }
	var errs []error
	for _, cc := range cfg.Classes {
		c := &class{cfg: cc, index: len(r.order)}
		var keyFunc func(*item) string
		if cc.Ordered {
			keyFunc = itemKey
			c.parking = &parking{keys: map[string]*keyState{}}
		}
		p, err := pool.New(pool.Config[*item]{
			Name:       cc.Name,
			Workers:    cc.Workers,
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
	return r, nil
}

// Ready reports whether the runtime has recovered its state file, joined
// the consumer group's start and is not stopping: false the moment a stop
// begins, so a load balancer can stop sending work.
func (r *Runtime) Ready() bool { return r.ready.Load() }

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
	if r.state.Load() != stateRunning {
		return nil
	}
	r.requestStop()
	select {
	case <-r.runDone:
		return nil
	case <-ctx.Done():
		r.skipDrain()
		return ctx.Err()
	}
}

// Close is the hard stop: it skips the drain (handlers still get
// HardStopGrace to return after their context is cancelled), saves what
// is unprocessed, commits and waits for [Runtime.Run] to return. Before Run
// and after it returned, Close does nothing and returns nil.
func (r *Runtime) Close() error {
	if r.state.Load() != stateRunning {
		return nil
	}
	r.requestStop()
	r.skipDrain()
	<-r.runDone
	return nil
}

func (r *Runtime) requestStop() { r.stopOnce.Do(func() { close(r.stopCh) }) }
func (r *Runtime) skipDrain()   { r.skipOnce.Do(func() { close(r.skipCh) }) }

// doneRecords are the pending and delayed records whose messages are
// done, waiting to be deleted in one transaction.
type doneRecords struct {
	pending []uint64
	delayed []snapshot.DelayedKey
}

func (d doneRecords) empty() bool { return len(d.pending)+len(d.delayed) == 0 }

// delete deletes them inside tx.
func (d doneRecords) delete(tx *snapshot.Tx) error {
	if err := tx.DeletePending(d.pending...); err != nil {
		return err
	}
	return tx.DeleteDelayed(d.delayed...)
}

// takeDone returns and forgets the records of done messages.
func (r *Runtime) takeDone() doneRecords {
	r.delMu.Lock()
	defer r.delMu.Unlock()
	d := r.delDone
	r.delDone = doneRecords{}
	return d
}

// deleteLoop removes the records of done re-pushed and delayed messages
// in batches, one transaction every 200ms. A crash before a batch is
// written leaves the records there: they run again (at-least-once).
func (r *Runtime) deleteLoop(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d := r.takeDone()
		if d.empty() {
			continue
		}
		if err := r.store.Update(d.delete); err != nil {
			r.log.Error("records of done messages not deleted; they will run again", "pending", len(d.pending),
				"delayed", len(d.delayed), "err", err)
			r.delMu.Lock()
			r.delDone.pending = append(d.pending, r.delDone.pending...)
			r.delDone.delayed = append(d.delayed, r.delDone.delayed...)
			r.delMu.Unlock()
		}
	}
}
