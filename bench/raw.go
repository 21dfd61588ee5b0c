package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alitto/pond/v2"
	"github.com/segmentio/kafka-go"

	hrt "github.com/handoff-go/handoff/runtime"
)

// spec is one side of one comparison: which topics, how many messages,
// what the handler does and with how many workers.
type spec struct {
	br      *broker
	group   string
	classes [][]string // topics of each runtime class; raw reads them all
	n       int        // messages over all topics, all produced before
	work    time.Duration
	// workers per class: the runtime's Class.Workers (zero: its default);
	// with work, raw kafka-go gets one pond pool of workers × classes.
	workers        int
	commitInterval time.Duration
}

func (s spec) topics() []string {
	var out []string
	for _, c := range s.classes {
		out = append(out, c...)
	}
	return out
}

// timing is what one side measured: the generation join, the last
// message handled, the first poll that saw the commit cover all n, and
// how long the stop took after that.
type timing struct {
	began, handled, committed time.Time
	stop                      time.Duration
}

// rawPart is one assigned partition of the raw kafka-go consumer.
type rawPart struct {
	topic     string
	id        int
	start     int64
	next      atomic.Int64  // no-op handling: offset after the last handled
	done      []atomic.Bool // pooled handling: done flag per offset
	cursor    int64         // pooled handling: first offset not done (committer only)
	committed int64         // committer only
}

// watermark returns the offset after the contiguous handled prefix.
func (p *rawPart) watermark() int64 {
	if p.done == nil {
		return p.next.Load()
	}
	for p.cursor < int64(len(p.done)) && p.done[p.cursor].Load() {
		p.cursor++
	}
	return p.cursor
}

// runRaw consumes s's topics the way a service written directly on
// kafka-go would: a consumer group, one kafka.Reader per assigned
// partition, and ONE committer goroutine for all partitions, committing
// every commitInterval and once all n are handled. With s.work, handling
// goes to a pond pool and commits follow the contiguous done prefix. It
// calls m.end once the group's commit covers all n, then stops.
func runRaw(ctx context.Context, s spec, m *meter) (timing, error) {
	var tm timing
	topics := s.topics()
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                s.group,
		Brokers:           []string{s.br.addr},
		Topics:            topics,
		StartOffset:       kafka.FirstOffset,
		SessionTimeout:    hrt.DefaultSessionTimeout,
		HeartbeatInterval: hrt.DefaultSessionTimeout / 3,
		JoinGroupBackoff:  time.Second,
		Timeout:           5 * time.Second,
	})
	if err != nil {
		return tm, fmt.Errorf("raw: consumer group: %w", err)
	}
	defer cg.Close()
	gen, err := cg.Next(ctx)
	if err != nil {
		return tm, fmt.Errorf("raw: join: %w", err)
	}
	tm.began = time.Now()

	var workers pond.Pool
	if s.work > 0 {
		total := s.workers * len(s.classes)
		workers = pond.NewPool(total, pond.WithQueueSize(hrt.DefaultQueueFactor*total))
		defer workers.StopAndWait()
	}
	var handled atomic.Int64
	var handledAt time.Time
	all := make(chan struct{})
	count := func() {
		if handled.Add(1) == int64(s.n) {
			handledAt = time.Now()
			close(all)
		}
	}

	var parts []*rawPart
	for topic, pas := range gen.Assignments {
		for _, pa := range pas {
			p := &rawPart{topic: topic, id: pa.ID, start: pa.Offset}
			if s.work > 0 {
				p.done = make([]atomic.Bool, s.n) // topics start empty: offsets < n
			}
			parts = append(parts, p)
		}
	}
	if want := len(topics) * s.br.partitions; len(parts) != want {
		return tm, fmt.Errorf("raw: assigned %d partitions, want %d", len(parts), want)
	}

	fetchCtx, stopFetch := context.WithCancel(ctx)
	defer stopFetch()
	var fetchErr atomic.Pointer[error]
	var readers sync.WaitGroup
	for _, p := range parts {
		readers.Go(func() {
			rd := kafka.NewReader(kafka.ReaderConfig{
				Brokers:   []string{s.br.addr},
				Topic:     p.topic,
				Partition: p.id,
				MinBytes:  1,
				MaxBytes:  10 << 20,
				MaxWait:   hrt.DefaultFetchMaxWait,
			})
			defer rd.Close()
			if err := rd.SetOffset(p.start); err != nil {
				fetchErr.CompareAndSwap(nil, &err)
				return
			}
			for {
				msg, err := rd.FetchMessage(fetchCtx)
				if err != nil {
					if fetchCtx.Err() == nil {
						err = fmt.Errorf("raw: fetch %s/%d: %w", p.topic, p.id, err)
						fetchErr.CompareAndSwap(nil, &err)
					}
					return
				}
				if workers == nil {
					p.next.Store(msg.Offset + 1)
					count()
					continue
				}
				off := msg.Offset
				if err := workers.Go(func() {
					time.Sleep(s.work)
					p.done[off].Store(true)
					count()
				}); err != nil {
					return
				}
			}
		})
	}

	// One committer for all partitions: every commitInterval, and once
	// all are handled.
	final := make(chan error, 1)
	gen.Start(func(gctx context.Context) {
		commit := func() error {
			offsets := map[string]map[int]int64{}
			var moved []*rawPart
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
		t := time.NewTicker(s.commitInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if err := commit(); err != nil {
					fmt.Fprintf(os.Stderr, "raw: commit: %v\n", err)
				}
			case <-all:
				final <- commit()
				return
			case <-gctx.Done():
				final <- errors.New("raw: generation ended early")
				return
			}
		}
	})

	select {
	case <-all:
	case <-ctx.Done():
		return tm, fmt.Errorf("raw: handled %d of %d: %w", handled.Load(), s.n, ctx.Err())
	}
	m.handled()
	tm.handled = handledAt
	if err := <-final; err != nil {
		return tm, fmt.Errorf("raw: final commit: %w", err)
	}
	if tm.committed, err = s.br.waitCommitted(ctx, s.group, topics, s.n); err != nil {
		return tm, err
	}
	m.end()

	stopAt := time.Now()
	stopFetch()
	readers.Wait()
	if workers != nil {
		workers.StopAndWait()
	}
	if err := cg.Close(); err != nil {
		return tm, fmt.Errorf("raw: close: %w", err)
	}
	tm.stop = time.Since(stopAt)
	if p := fetchErr.Load(); p != nil {
		return tm, *p
	}
	return tm, nil
}
