package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/runtime/internal/service"
	"github.com/handoff-go/handoff/snapshot"
)

const (
	// publishTimeout bounds one write of dead letters to their topics.
	publishTimeout = kclient.PublishTimeout
	// publishQueue is how many dead letters may wait for their publish;
	// more are not published (the state file has them all).
	publishQueue = 1024
	// publishBatch is how many dead letters one write sends at most.
	publishBatch = 100
)

// errAbandoned is what the dead-letter writer's dial returns once the
// stop has abandoned the publishes.
var errAbandoned = errors.New("runtime: dead-letter publishing abandoned by the stop")

// publisher sends dead letters to their classes' DeadLetterTopic from one
// goroutine, so that a slow or unreachable broker holds no worker: a
// worker only queues the dead letter, which the state file already
// keeps, so publishing is best effort. A full queue drops the publish;
// published counts the writes the broker acknowledged within
// publishTimeout, unpublished the rest. The stop lets the publisher finish what is queued within
// what is left of the stop's budget, then abandons the rest.
type publisher struct {
	service.Base // run, from Start to Stop
	stopOnce     sync.Once
	cfg          publisherConfig
	w            kclient.Writer
	conns        *dlqConns // the writer's connections; nil for a writer of no connections
	queue        chan deadPublish
	finish       chan struct{} // closed by the stop: return once the queue is empty
	cancel       context.CancelFunc
	wg           sync.WaitGroup
	// dropping is set from a dropped publish to the next one queued, so
	// that a run of drops is warned about once.
	dropping atomic.Bool
	// abandoned is how many the stop abandoned; read after wg.Wait.
	abandoned int
}

// publisherConfig is what a publisher is built from.
type publisherConfig struct {
	log     *slog.Logger
	metrics *metrics
	// headersFunc is Config.PublishHeadersFunc.
	headersFunc func(m *handoff.Message, headers []handoff.Header) []handoff.Header
	// tally counts the dead letters published and unpublished.
	tally *tally
	// deadline is the stop's: Stop publishes what is queued until it.
	deadline *stopDeadline
}

// newPublisher returns a publisher writing with w; Start starts it.
func newPublisher(cfg publisherConfig, w kclient.Writer) *publisher {
	return &publisher{cfg: cfg, w: w, queue: make(chan deadPublish, publishQueue), finish: make(chan struct{})}
}

// Start starts the publisher's goroutine (run); Stop ends it. See
// service.Service.
func (p *publisher) Start(ctx context.Context) error {
	if ctx, ok := p.StartInit(ctx); ok {
		p.start(ctx)
	}
	return nil
}

// Stop is close by the stop's deadline (publisherConfig.deadline; now
// when no stop has begun). It blocks until the publisher's goroutine
// and its writer are done.
func (p *publisher) Stop() {
	p.stopOnce.Do(func() { p.close(p.cfg.deadline.at()) })
	p.Base.Stop()
}

// start starts the publisher's goroutine under ctx, ended by close.
func (p *publisher) start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	p.wg.Go(func() { p.run(ctx) })
}

// deadPublish is one queued dead letter.
type deadPublish struct {
	c   *class
	rec snapshot.Record
	// done, when set (a dead letter the retention drops, publishNow),
	// gets the write's result instead of it being counted.
	done chan error
}

// newDLQ returns the dead-letter publisher when a class has a
// DeadLetterTopic, nil otherwise (or when its writer could not be made,
// which it logs). Its writer has its own transport, closed with it.
func (r *Runtime) newDLQ() *publisher {
	for _, c := range r.classes.order {
		if c.cfg.DeadLetterTopic == "" {
			continue
		}
		conns := &dlqConns{base: r.kafka.cfg.conn.baseDial()}
		w, err := kclient.NewWriter(r.kafka.cfg.kafka, conns.dial)
		if err != nil {
			r.log.Error("dead-letter writer not created; dead letters stay in the state file only", "err", fmt.Errorf("runtime: %w", err))
			return nil
		}
		p := newPublisher(r.publisherConfig(), w)
		p.conns = conns
		return p
	}
	return nil
}

// publisherConfig is the runtime's publisherConfig.
func (r *Runtime) publisherConfig() publisherConfig {
	return publisherConfig{log: r.log, metrics: r.metrics, headersFunc: r.cfg.PublishHeadersFunc, tally: r.tally,
		deadline: &r.life.deadline}
}

// publish queues a dead letter for its class's DeadLetterTopic, if any.
// It never blocks: when the queue is full the publish is dropped. A nil
// publisher (no DeadLetterTopic) publishes nothing.
func (p *publisher) publish(c *class, rec snapshot.Record) {
	if c.cfg.DeadLetterTopic == "" || p == nil {
		return
	}
	select {
	case p.queue <- deadPublish{c: c, rec: rec}:
		p.dropping.Store(false)
	default:
		p.cfg.tally.inc(c, evUnpublished)
		if !p.dropping.Swap(true) {
			p.cfg.log.Warn("dead-letter publish queue full; dead letters are not published until it empties, they stay in the state file",
				"class", c.cfg.Name, "id", rec.Message.ID, "topic", c.cfg.DeadLetterTopic, "queue", publishQueue)
		}
	}
}

// publishNow publishes a dead letter of class c that the retention
// drops for reason, with the header [HeaderDropped], and returns the
// write's result (nil once the broker acknowledged it). It blocks while
// the queue is full and for the write, until ctx ends. A nil publisher
// (its writer could not be made) publishes nothing and returns an
// error.
func (p *publisher) publishNow(ctx context.Context, c *class, rec snapshot.Record, reason string) error {
	if p == nil {
		return errors.New("runtime: no dead-letter writer (see the start's log)")
	}
	done := make(chan error, 1)
	rec.Message.Headers = append(slices.Clip(rec.Message.Headers), handoff.Header{Key: HeaderDropped, Value: []byte(reason)})
	select {
	case p.queue <- deadPublish{c: c, rec: rec, done: done}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run publishes the queued dead letters, up to publishBatch in one write,
// until the stop's finish finds the queue empty or its abandon ends ctx.
func (p *publisher) run(ctx context.Context) {
	batch := make([]deadPublish, 0, publishBatch)
	for {
		batch = batch[:0]
		select {
		case d := <-p.queue:
			batch = append(batch, d)
		case <-p.finish:
			select {
			case d := <-p.queue:
				batch = append(batch, d)
			default:
				return
			}
		case <-ctx.Done():
		}
	fill:
		for len(batch) < publishBatch {
			select {
			case d := <-p.queue:
				batch = append(batch, d)
			default:
				break fill
			}
		}
		if ctx.Err() != nil {
			p.abandon(batch)
			return
		}
		p.write(ctx, batch)
	}
}

// write publishes batch in one write and counts each dead letter
// published or not.
func (p *publisher) write(ctx context.Context, batch []deadPublish) {
	recs := make([]kclient.OutRecord, len(batch))
	for i, d := range batch {
		recs[i] = deadLetterRecord(d.c, d.rec)
		if f := p.cfg.headersFunc; f != nil {
			recs[i].Headers = p.headers(f, d, recs[i].Headers)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, publishTimeout)
	errs := p.w.Write(wctx, recs)
	cancel()
	for i, d := range batch {
		e := errs[i]
		if d.done != nil {
			if e != nil && ctx.Err() == nil {
				p.cfg.metrics.publishFailed(d.c.index)
			}
			d.done <- e
			continue
		}
		if e == nil {
			p.cfg.tally.inc(d.c, evPublished)
			continue
		}
		if ctx.Err() != nil {
			p.abandoned++
		} else {
			p.cfg.metrics.publishFailed(d.c.index)
			p.cfg.log.Error("dead letter not published; it stays in the state file", "class", d.c.cfg.Name, "id", d.rec.Message.ID,
				"topic", d.c.cfg.DeadLetterTopic, "err", e)
		}
		p.cfg.tally.inc(d.c, evUnpublished)
	}
}

// headers returns what f, Config.PublishHeadersFunc, makes of d's
// headers as made; those as made when f panics, with the panic logged: a
// panic on the publisher's goroutine would end the process, and the dead
// letter is worth publishing without what f would have added.
func (p *publisher) headers(f func(*handoff.Message, []handoff.Header) []handoff.Header, d deadPublish, made []handoff.Header) (hs []handoff.Header) {
	defer func() {
		if v := recover(); v != nil {
			hs = made
			p.cfg.log.Error("PublishHeadersFunc panicked; the dead letter is published with the headers the runtime made",
				"class", d.c.cfg.Name, "id", d.rec.Message.ID, "panic", v, "stack", string(debug.Stack()))
		}
	}()
	// f gets a copy: what it wrote before it panicked stays out.
	return f(&d.rec.Message, slices.Clone(made))
}

// abandon counts batch and what is still queued as unpublished.
func (p *publisher) abandon(batch []deadPublish) {
	for {
		for _, d := range batch {
			if d.done != nil {
				d.done <- errAbandoned
				continue
			}
			p.cfg.tally.inc(d.c, evUnpublished)
			p.abandoned++
		}
		batch = batch[:0]
		select {
		case d := <-p.queue:
			batch = append(batch, d)
		default:
			return
		}
	}
}

// close ends the publisher at the stop, when no dead letter comes any
// more: it lets it publish what is queued until deadline, then abandons
// the rest (ending the write in flight by closing the writer's
// connections: kafka-go's produce has no context, and Writer.Close waits
// for it) and closes the writer.
func (p *publisher) close(deadline time.Time) {
	if p == nil {
		return
	}
	close(p.finish)
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	if !closedWithin(done, time.Until(deadline)) {
		p.cancel()
		if p.conns != nil {
			p.conns.closeAll()
		}
		<-done
	}
	p.cancel()
	// A write that gave up may still be in flight on a broker that does
	// not answer, and the writer's Close waits for it: past the deadline
	// its connections are closed under it.
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		if err := p.w.Close(); err != nil {
			p.cfg.log.Warn("dead-letter writer close failed", "err", err)
		}
	}()
	if !closedWithin(closed, time.Until(deadline)) {
		if p.conns != nil {
			p.conns.closeAll()
		}
		<-closed
	}
	if p.abandoned > 0 {
		p.cfg.log.Warn("dead letters not published within the stop's budget; they stay in the state file",
			"phase", "leave", "unpublished", p.abandoned)
	}
}

// deadLetterRecord is the Kafka record that publishes a dead letter of
// class c: the message's key, value and headers (nil and empty kept
// apart), the original record's timestamp (the publish time for a
// message that has none), and the handoff headers.
func deadLetterRecord(c *class, rec snapshot.Record) kclient.OutRecord {
	m := rec.Message
	headers := []handoff.Header{
		{Key: HeaderClass, Value: []byte(c.cfg.Name)},
		{Key: HeaderID, Value: []byte(m.ID)},
		{Key: HeaderAttempts, Value: strconv.AppendInt(nil, int64(m.Attempt), 10)},
		{Key: HeaderError, Value: []byte(rec.Err)},
	}
	if m.Origin.IsKafka() {
		headers = append(headers,
			handoff.Header{Key: HeaderOriginTopic, Value: []byte(m.Origin.Topic)},
			handoff.Header{Key: HeaderOriginPartition, Value: strconv.AppendInt(nil, int64(m.Origin.Partition), 10)},
			handoff.Header{Key: HeaderOriginOffset, Value: strconv.AppendInt(nil, m.Origin.Offset, 10)})
	}
	headers = append(headers, m.Headers...)
	return kclient.OutRecord{Topic: c.cfg.DeadLetterTopic, Key: m.Key, Value: m.Value, Headers: headers, Time: m.Timestamp}
}

// dlqConns are the dead-letter writer's connections. Abandoning the
// publishes closes them, which ends a write the broker never answers,
// and refuses new ones, so that the writer's retries end too.
type dlqConns struct {
	base   func(ctx context.Context, network, addr string) (net.Conn, error) // the runtime's dial
	mu     sync.Mutex
	open   map[*dlqConn]struct{}
	closed bool
}

// dlqConn is a connection that dlqConns forgets when it is closed.
type dlqConn struct {
	net.Conn
	cs *dlqConns
}

func (c *dlqConn) Close() error {
	c.cs.mu.Lock()
	delete(c.cs.open, c)
	c.cs.mu.Unlock()
	return c.Conn.Close()
}

// dial is the writer transport's Dial.
func (cs *dlqConns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	nc, err := cs.base(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		nc.Close()
		return nil, errAbandoned
	}
	c := &dlqConn{nc, cs}
	if cs.open == nil {
		cs.open = map[*dlqConn]struct{}{}
	}
	cs.open[c] = struct{}{}
	return c, nil
}

// closeAll closes the open connections and refuses new ones.
func (cs *dlqConns) closeAll() {
	cs.mu.Lock()
	cs.closed = true
	open := cs.open
	cs.open = nil
	cs.mu.Unlock()
	for c := range open {
		c.Conn.Close()
	}
}
