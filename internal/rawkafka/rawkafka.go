// Package rawkafka is the baseline handoff's benchmarks measure against:
// a consumer written directly on kafka-go the way a careful service would,
// with a consumer group, one kafka.Reader per assigned partition and ONE
// committer goroutine for all partitions. Handling is a no-op counter, or,
// with Work, a sleep on a pond pool with commits that follow each
// partition's contiguous done prefix.
package rawkafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alitto/pond/v2"
	"github.com/segmentio/kafka-go"
)

// Config describes one run. Topics must start empty: offsets below N are
// tracked in arrays.
type Config struct {
	Brokers []string
	Group   string
	Topics  []string
	// Partitions is the partition count of each topic; the run checks it
	// was assigned all of them.
	Partitions int
	// N is how many messages the topics hold.
	N int
	// Work, when set, is each message's handling time on a pond pool of
	// Workers workers and a queue of QueueSize.
	Work      time.Duration
	Workers   int
	QueueSize int
	// CommitInterval is the committer's tick; it also commits once all N
	// are handled.
	CommitInterval time.Duration
	// Reader settings, as the runtime uses them.
	SessionTimeout time.Duration
	FetchMaxWait   time.Duration
	// QueueCapacity is each reader's; zero is kafka-go's default (100).
	QueueCapacity int
	// Check, when set, is each message's work without Work: called with
	// its value in the partition's fetch loop (the check a service's
	// handler makes, so that a comparison counts the same work on both
	// sides).
	Check func(value []byte) bool
	// Logf, if set, is told about commit failures (the committer retries).
	Logf func(format string, args ...any)
	// Started, if set, is called with each message's value as its
	// handling starts (on the pool's worker with Work, in the fetch loop
	// without): the benchmark's latency measure.
	Started func(value []byte)
}

// Consumer is a running baseline consumer.
type Consumer struct {
	cfg       Config
	cg        *kafka.ConsumerGroup
	workers   pond.Pool
	stopFetch context.CancelFunc
	readers   sync.WaitGroup
	fetchErr  atomic.Pointer[error]
	all       chan struct{}
	final     chan error
	handled   atomic.Int64
	first     atomic.Pointer[time.Time]
	slept     atomic.Int64 // ns the Work sleeps took, in all

	// Began is when the generation was joined; FirstAt when the first
	// message was handled and HandledAt the last (valid once Handled
	// returned nil).
	Began, FirstAt, HandledAt time.Time
}

type part struct {
	topic     string
	id        int
	start     int64
	next      atomic.Int64  // no-op handling: offset after the last handled
	done      []atomic.Bool // pooled handling: done flag per offset
	cursor    int64         // pooled handling: first offset not done (committer only)
	committed int64         // committer only
}

// watermark returns the offset after the contiguous handled prefix.
func (p *part) watermark() int64 {
	if p.done == nil {
		return p.next.Load()
	}
	for p.cursor < int64(len(p.done)) && p.done[p.cursor].Load() {
		p.cursor++
	}
	return p.cursor
}

// Start joins the group and starts fetching. ctx bounds the join and the
// fetching; Close stops both.
func Start(ctx context.Context, cfg Config) (*Consumer, error) {
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                cfg.Group,
		Brokers:           cfg.Brokers,
		Topics:            cfg.Topics,
		StartOffset:       kafka.FirstOffset,
		SessionTimeout:    cfg.SessionTimeout,
		HeartbeatInterval: cfg.SessionTimeout / 3,
		JoinGroupBackoff:  time.Second,
		Timeout:           5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("rawkafka: consumer group: %w", err)
	}
	gen, err := cg.Next(ctx)
	if err != nil {
		cg.Close()
		return nil, fmt.Errorf("rawkafka: join: %w", err)
	}
	c := &Consumer{cfg: cfg, cg: cg, all: make(chan struct{}), final: make(chan error, 1), Began: time.Now()}
	if cfg.Work > 0 {
		c.workers = pond.NewPool(cfg.Workers, pond.WithQueueSize(cfg.QueueSize))
	}
	var parts []*part
	for topic, pas := range gen.Assignments {
		for _, pa := range pas {
			p := &part{topic: topic, id: pa.ID, start: pa.Offset}
			if cfg.Work > 0 {
				p.done = make([]atomic.Bool, cfg.N)
			}
			parts = append(parts, p)
		}
	}
	if want := len(cfg.Topics) * cfg.Partitions; len(parts) != want {
		c.Close()
		return nil, fmt.Errorf("rawkafka: assigned %d partitions, want %d", len(parts), want)
	}
	var fetchCtx context.Context
	fetchCtx, c.stopFetch = context.WithCancel(ctx)
	for _, p := range parts {
		c.readers.Go(func() { c.fetch(fetchCtx, p) })
	}
	gen.Start(func(gctx context.Context) { c.commitLoop(gctx, gen, parts) })
	return c, nil
}

func (c *Consumer) count() {
	if c.first.Load() == nil {
		now := time.Now()
		c.first.CompareAndSwap(nil, &now)
	}
	if c.handled.Add(1) == int64(c.cfg.N) {
		c.FirstAt = *c.first.Load()
		c.HandledAt = time.Now()
		close(c.all)
	}
}

func (c *Consumer) fetch(ctx context.Context, p *part) {
	rd := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   c.cfg.Brokers,
		Topic:     p.topic,
		Partition: p.id,
		MinBytes:  1,
		MaxBytes:  10 << 20,
		MaxWait:   c.cfg.FetchMaxWait,

		QueueCapacity: c.cfg.QueueCapacity,
	})
	defer rd.Close()
	if err := rd.SetOffset(p.start); err != nil {
		c.fetchErr.CompareAndSwap(nil, &err)
		return
	}
	for {
		m, err := rd.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("rawkafka: fetch %s/%d: %w", p.topic, p.id, err)
				c.fetchErr.CompareAndSwap(nil, &err)
			}
			return
		}
		if c.workers == nil {
			if c.cfg.Started != nil {
				c.cfg.Started(m.Value)
			}
			if c.cfg.Check != nil {
				c.cfg.Check(m.Value)
			}
			p.next.Store(m.Offset + 1)
			c.count()
			continue
		}
		off, value := m.Offset, m.Value
		if err := c.workers.Go(func() {
			if c.cfg.Started != nil {
				c.cfg.Started(value)
			}
			began := time.Now()
			time.Sleep(c.cfg.Work)
			c.slept.Add(int64(time.Since(began)))
			p.done[off].Store(true)
			c.count()
		}); err != nil {
			return
		}
	}
}

// commitLoop is the one committer: every CommitInterval, and once all N
// are handled.
func (c *Consumer) commitLoop(gctx context.Context, gen *kafka.Generation, parts []*part) {
	commit := func() error {
		offsets := map[string]map[int]int64{}
		var moved []*part
		var points []int64
		for _, p := range parts {
			if wm := p.watermark(); wm > p.committed {
				if offsets[p.topic] == nil {
					offsets[p.topic] = map[int]int64{}
				}
				offsets[p.topic][p.id] = wm
				moved = append(moved, p)
				points = append(points, wm)
			}
		}
		if err := gen.CommitOffsets(offsets); err != nil {
			return err
		}
		for i, p := range moved {
			p.committed = points[i]
		}
		return nil
	}
	t := time.NewTicker(c.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := commit(); err != nil && c.cfg.Logf != nil {
				c.cfg.Logf("rawkafka: commit: %v", err)
			}
		case <-c.all:
			c.final <- commit()
			return
		case <-gctx.Done():
			c.final <- errors.New("rawkafka: generation ended early")
			return
		}
	}
}

// Handled waits until all N messages are handled, or ctx ends.
func (c *Consumer) Handled(ctx context.Context) error {
	select {
	case <-c.all:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("rawkafka: handled %d of %d: %w", c.handled.Load(), c.cfg.N, ctx.Err())
	}
}

// Slept returns how long the Work sleeps took in all so far.
func (c *Consumer) Slept() time.Duration { return time.Duration(c.slept.Load()) }

// FinalCommit waits for the commit made once all N were handled.
func (c *Consumer) FinalCommit() error {
	if err := <-c.final; err != nil {
		return fmt.Errorf("rawkafka: final commit: %w", err)
	}
	return nil
}

// Close stops fetching, waits for the readers and the pool, and leaves the
// group. It returns the first fetch error, if any.
func (c *Consumer) Close() error {
	if c.stopFetch != nil {
		c.stopFetch()
	}
	c.readers.Wait()
	if c.workers != nil {
		c.workers.StopAndWait()
	}
	err := c.cg.Close()
	if p := c.fetchErr.Load(); p != nil {
		return *p
	}
	if err != nil {
		return fmt.Errorf("rawkafka: close: %w", err)
	}
	return nil
}
