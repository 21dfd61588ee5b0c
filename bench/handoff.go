package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff"
	hrt "github.com/handoff-go/handoff/runtime"
)

// recycleMessages is -recycle-messages: every runtime class recycles its
// messages (Class.RecycleMessages). rental's classes do anyway.
var recycleMessages bool

// runHandoff consumes s's topics with the runtime, one class per entry
// of s.classes (with s.rental, examples/rental's classes instead), until the group's commit covers all n; it calls m.end
// then and shuts the runtime down.
func runHandoff(ctx context.Context, s spec, m *meter) (timing, error) {
	var tm timing
	dir, err := os.MkdirTemp("", "handoff-bench-")
	if err != nil {
		return tm, err
	}
	defer os.RemoveAll(dir)

	var handled atomic.Int64
	var firstAt, handledAt time.Time
	var first atomic.Pointer[time.Time]
	var slept atomic.Int64
	var calls atomic.Int64
	all := make(chan struct{})
	// done counts k messages handled by one call.
	done := func(k int) {
		calls.Add(1)
		if first.Load() == nil {
			now := time.Now()
			first.CompareAndSwap(nil, &now)
		}
		if handled.Add(int64(k)) == int64(s.n) {
			firstAt, handledAt = *first.Load(), time.Now()
			close(all)
		}
	}
	// cost sleeps what a call of k messages costs.
	cost := func(k int) {
		d := s.work
		if s.callCost > 0 || s.msgCost > 0 {
			d = s.callCost + time.Duration(k)*s.msgCost
		}
		if d > 0 {
			began := time.Now()
			time.Sleep(d)
			slept.Add(int64(time.Since(began)))
		}
	}
	h := func(_ context.Context, _ *handoff.Message) error {
		cost(1)
		done(1)
		return nil
	}
	bh := func(_ context.Context, ms []*handoff.Message) error {
		cost(len(ms))
		done(len(ms))
		return nil
	}
	cfg := hrt.Config{
		Brokers:        []string{s.br.addr},
		Group:          s.group,
		Client:         s.client,
		StatePath:      filepath.Join(dir, "state.db"),
		CommitInterval: s.commitInterval,
		LocalStateOnly: s.localStateOnly,
		Logger:         slog.New(warnHandler{}),
	}
	if s.rental {
		svc, classes, reg, err := rentalClasses(func() { done(1) })
		if err != nil {
			return tm, err
		}
		defer svc.Close()
		cfg.Classes, cfg.Registerer = classes, reg
	}
	for i, topics := range s.classes {
		if s.rental {
			break
		}
		c := hrt.Class{Name: fmt.Sprintf("class-%d", i), Topics: topics, Handler: h, Workers: s.workers}
		if s.maxBatch > 0 {
			c.Handler, c.BatchHandler, c.MaxBatch, c.MaxWait = nil, bh, s.maxBatch, batchWait
		}
		cfg.Classes = append(cfg.Classes, c)
	}
	for i := range cfg.Classes {
		cfg.Classes[i].RecycleMessages = cfg.Classes[i].RecycleMessages || recycleMessages
	}
	rt, err := hrt.New(cfg)
	if err != nil {
		return tm, err
	}
	// The join is when Ready turns true (polled every millisecond): the
	// same moment on both clients, kafka-go's generation join or
	// franz-go's first assignment (Run is ready before either).
	joined := make(chan time.Time, 1)
	pollCtx, stopPolling := context.WithCancel(ctx)
	var polling sync.WaitGroup
	polling.Go(func() {
		if waitFor(pollCtx, time.Millisecond, rt.Ready) == nil {
			joined <- time.Now()
		}
	})
	defer polling.Wait()
	defer stopPolling()
	ran := runInBackground(rt)
	fail := func(err error) (timing, error) {
		rt.Close()
		<-ran
		return tm, err
	}

	select {
	case <-all:
	case <-ctx.Done():
		return fail(fmt.Errorf("runtime: handled %d of %d: %w", handled.Load(), s.n, ctx.Err()))
	}
	m.handled()
	tm.first, tm.handled, tm.slept, tm.calls = firstAt, handledAt, time.Duration(slept.Load()), calls.Load()
	// Ready waits for every assigned partition's changelog restore; the
	// partitions restored first may be consumed before that (a short run
	// may be all handled first), as the raw clients consume at their
	// first assignment: the run begins at the earlier of the two.
	select {
	case tm.began = <-joined:
		if tm.first.Before(tm.began) {
			tm.began = tm.first
		}
	case <-time.After(readyAfterHandled):
		return fail(fmt.Errorf("runtime: all handled, but not Ready %s later", readyAfterHandled))
	}
	if tm.committed, err = s.br.waitCommitted(ctx, s.group, s.topics(), s.n); err != nil {
		return fail(err)
	}
	m.end()

	stopAt := time.Now()
	if err := rt.Shutdown(ctx); err != nil {
		return tm, fmt.Errorf("runtime: shutdown: %w", err)
	}
	r := <-ran
	tm.stop = time.Since(stopAt)
	if r.err != nil {
		return tm, fmt.Errorf("runtime: run: %w", r.err)
	}
	if r.rep.Succeeded != uint64(s.n) {
		return tm, fmt.Errorf("runtime: %d succeeded, want %d", r.rep.Succeeded, s.n)
	}
	return tm, nil
}

// runResult is what Run returned.
type runResult struct {
	rep *hrt.Report
	err error
}

// runInBackground runs rt and hands Run's result over on the channel.
func runInBackground(rt *hrt.Runtime) <-chan runResult {
	ran := make(chan runResult, 1)
	go func() {
		rep, err := rt.Run(context.Background())
		ran <- runResult{rep, err}
	}()
	return ran
}

// warnHandler writes warnings and errors to stderr and drops the rest.
// It is enabled from Info on, so the runtime builds its Info records as
// a service's would. It keeps no attributes of With.
type warnHandler struct{}

func (h warnHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h warnHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		msg := r.Message
		r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
		fmt.Fprintf(os.Stderr, "runtime: %s %s\n", r.Level, msg)
	}
	return nil
}

func (h warnHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h warnHandler) WithGroup(string) slog.Handler      { return h }

// readyAfterHandled bounds how long after its last message a runtime may
// turn Ready (its last partition's changelog restore).
const readyAfterHandled = 10 * time.Second
