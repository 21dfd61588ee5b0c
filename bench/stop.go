package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"log/slog"

	"github.com/handoff-go/handoff"
	hrt "github.com/handoff-go/handoff/runtime"
)

// fullStop is what the full-pools stop measure found.
type fullStop struct {
	drainTimeout, grace time.Duration
	took                time.Duration // Shutdown called → Run returned
	rep                 *hrt.Report
}

// rest is the stop beyond its two bounded waits and the snapshot: what
// issue 6 bounds to 1 s.
func (f fullStop) rest() time.Duration {
	return f.took - f.drainTimeout - f.grace - f.rep.Snapshot
}

// stopFullPools measures a stop with full pools against the broker
// process: one class per topic of topics, workers handlers each that
// ignore their context (the worst case: they use all of HardStopGrace
// and are left behind as stragglers) and a full queue behind them. It
// stops once every pool is full and returns how long the stop took.
func stopFullPools(ctx context.Context, br *broker, topics []string, workers int) (fullStop, error) {
	f := fullStop{drainTimeout: time.Second, grace: time.Second}
	dir, err := os.MkdirTemp("", "handoff-bench-stop-")
	if err != nil {
		return f, err
	}
	defer os.RemoveAll(dir)
	release := make(chan struct{})
	defer close(release) // the stragglers return once measured
	cfg := hrt.Config{
		Brokers:       []string{br.addr},
		Group:         fmt.Sprintf("bench-stop-%d", os.Getpid()),
		StatePath:     filepath.Join(dir, "state.db"),
		DrainTimeout:  f.drainTimeout,
		HardStopGrace: f.grace,
		Logger:        slog.New(slog.DiscardHandler), // it warns of the stragglers it is made to have
	}
	for _, t := range topics {
		cfg.Classes = append(cfg.Classes, hrt.Class{Name: t, Topics: []string{t}, Workers: workers,
			Handler: func(context.Context, *handoff.Message) error {
				<-release
				return nil
			}})
	}
	rt, err := hrt.New(cfg)
	if err != nil {
		return f, err
	}
	ran := runInBackground(rt)
	full := func() bool {
		for _, s := range rt.Stats() {
			if s.Running < s.Workers || s.Queued < s.QueueSize {
				return false
			}
		}
		return true
	}
	if err := waitFor(ctx, 5*time.Millisecond, full); err != nil {
		rt.Close()
		<-ran
		return f, fmt.Errorf("full-pools stop: pools did not fill: %w", err)
	}
	begin := time.Now()
	if err := rt.Shutdown(ctx); err != nil {
		return f, fmt.Errorf("full-pools stop: %w", err)
	}
	r := <-ran
	f.took, f.rep = time.Since(begin), r.rep
	if r.err != nil {
		return f, fmt.Errorf("full-pools stop: run: %w", r.err)
	}
	return f, nil
}
