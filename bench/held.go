package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/handoff-go/handoff"
	hrt "github.com/handoff-go/handoff/runtime"
)

// heldFig is what one stack holds with its handler blocked.
type heldFig struct {
	bytes   uint64 // live heap after GC, over the heap before the consumer was made
	settled bool   // the heap stopped growing before the measure gave up
}

// heldSettle is how long the live heap must stay within 1 % (or 256 KiB)
// for the held measure to take it, sampled every heldEvery; heldLimit is
// when it gives up and takes the largest seen.
const (
	heldSettle = time.Second
	heldEvery  = 250 * time.Millisecond
	heldLimit  = 20 * time.Second
)

// liveHeap returns the live heap after two full GCs: what one GC frees
// stays counted after it in a sync.Pool's victim cache (the buffers that
// producing the records left in kafka-go's pools, 1.1 to 2.4 MB, were
// counted so in a queued-memory baseline) and in objects whose
// finalizers or cleanups it queued; the second GC frees them.
func liveHeap() uint64 {
	goruntime.GC()
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// settledHeap samples liveHeap every heldEvery until it has stayed within
// 1 % (or 256 KiB) for heldSettle, and returns it over before; after
// heldLimit it returns the largest sample, not settled.
func settledHeap(ctx context.Context, before uint64) (heldFig, error) {
	t := time.NewTicker(heldEvery)
	defer t.Stop()
	giveUp := time.Now().Add(heldLimit)
	// win is the samples of the last heldSettle: k of them, once full.
	k := int(heldSettle/heldEvery) + 1
	var win []uint64
	var top uint64
	for {
		h := liveHeap()
		top = max(top, h)
		win = append(win, h)
		if len(win) > k {
			win = win[len(win)-k:]
		}
		if lo, hi := slices.Min(win), slices.Max(win); len(win) == k && hi-lo <= max(hi/100, 256<<10) {
			return heldFig{bytes: sub(h, before), settled: true}, nil
		}
		if time.Now().After(giveUp) {
			return heldFig{bytes: sub(top, before)}, nil
		}
		select {
		case <-ctx.Done():
			return heldFig{}, ctx.Err()
		case <-t.C:
		}
	}
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// heldFunc consumes s's topics with its handler blocked from the first
// message on, calls measure once it has one, and stops.
type heldFunc func(ctx context.Context, s spec, measure func() error) error

// runHeld measures, for each stack, the memory it holds with s's topics
// full (all their messages produced) and its handler blocked on the first
// message: what the stack's buffers fill to when the handler cannot keep
// up. It is the live heap after GC once it stopped growing, over the heap
// before the consumer was made.
func runHeld(ctx context.Context, stacks []stack, s spec, log io.Writer) (map[string]heldFig, error) {
	out := map[string]heldFig{}
	for _, st := range stacks {
		groups++
		ss := s
		ss.group = fmt.Sprintf("bench-held-%d-%d", os.Getpid(), groups)
		ss.client = st.client
		before := liveHeap()
		var f heldFig
		err := st.held(ctx, ss, func() error {
			var err error
			f, err = settledHeap(ctx, before)
			return err
		})
		if err != nil {
			return out, fmt.Errorf("held memory, %s: %w", st.name, err)
		}
		out[st.key] = f
		fmt.Fprintf(log, "held memory: %s %.1f MiB (settled %v)\n", st.name, float64(f.bytes)/(1<<20), f.settled)
	}
	return out, nil
}

// heldRuntime runs the runtime as the sweep does (a class per topic,
// default workers and queues) with every handler blocked until the stop.
func heldRuntime(ctx context.Context, s spec, measure func() error) error {
	dir, err := os.MkdirTemp("", "handoff-bench-held-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	block := make(chan struct{})
	entered := make(chan struct{}, 1)
	h := func(ctx context.Context, _ *handoff.Message) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil
	}
	cfg := hrt.Config{Brokers: []string{s.br.addr}, Group: s.group, Client: s.client,
		StatePath: filepath.Join(dir, "state.db"), Logger: slog.New(warnHandler{})}
	for i, topics := range s.classes {
		cfg.Classes = append(cfg.Classes, hrt.Class{Name: fmt.Sprintf("class-%d", i), Topics: topics, Handler: h})
	}
	rt, err := hrt.New(cfg)
	if err != nil {
		return err
	}
	ran := runInBackground(rt)
	var merr error
	select {
	case <-entered:
		merr = measure()
	case <-ctx.Done():
		merr = ctx.Err()
	}
	close(block)
	// The stop snapshots what is queued; that is not measured.
	err = rt.Shutdown(ctx)
	if r := <-ran; err == nil {
		err = r.err
	}
	if merr != nil {
		return merr
	}
	return err
}

// heldRawFranz is raw franz-go (runRawFranz's client) that polls once and
// then keeps the fetches it got, unhandled, as a poll loop blocked in its
// first record's handler does.
func heldRawFranz(ctx context.Context, s spec, measure func() error) error {
	cl, err := kgo.NewClient(rawFranzOpts(s)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fs.NumRecords() > 0 {
			err := measure()
			goruntime.KeepAlive(fs)
			return err
		}
	}
}

// heldRawKafka is raw kafka-go's readers (rawkafka's settings, one
// kafka.Reader per partition, without the group, which holds no records):
// each reads one message and is then read no more, as a reader whose
// handler is blocked, so its queue fills.
func heldRawKafka(ctx context.Context, s spec, measure func() error) error {
	var rds []*kafka.Reader
	defer func() {
		var wg sync.WaitGroup
		for _, rd := range rds {
			wg.Go(func() { rd.Close() })
		}
		wg.Wait()
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for _, t := range s.topics() {
		for p := range s.br.partitions {
			rd := kafka.NewReader(kafka.ReaderConfig{
				Brokers: []string{s.br.addr}, Topic: t, Partition: p,
				MinBytes: 1, MaxBytes: 10 << 20, MaxWait: hrt.DefaultFetchMaxWait,
				QueueCapacity: s.readerQueue,
			})
			rds = append(rds, rd)
			wg.Go(func() {
				if _, err := rd.FetchMessage(ctx); err != nil {
					select {
					case errs <- fmt.Errorf("%s/%d: %w", t, p, err):
					default:
					}
				}
			})
		}
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	return measure()
}
