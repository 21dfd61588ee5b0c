// Package service gives the runtime's background components one
// lifecycle, after river's startstop: Start(ctx) starts a component's
// loops and returns at once, Stop ends them and waits for them, and the
// Started and Stopped signals say where it is. A component embeds
// [Base] and writes its Start with [Base.StartInit] and [Base.Go]; a
// loop of a type that has no lifecycle of its own is made a service by
// [Loop].
//
// # Lifecycle
//
// A service starts once and stops once: a second Start, or a Start after
// Stop, does nothing and returns nil; Stop before Start marks the
// service stopped, so that a later Start does nothing either. Stop
// blocks until every goroutine the service started has returned.
package service

import (
	"context"
	"sync"
)

// Service is a background component with one lifecycle.
type Service interface {
	// Start starts the service's loops under a context derived from ctx
	// (its values; it ends with ctx or with Stop) and returns without
	// waiting for them. It returns an error when the service could not
	// start; then nothing of it runs.
	Start(ctx context.Context) error
	// Stop ends the service's context and blocks until its loops have
	// returned. It is safe to call more than once and before Start.
	Stop()
}

const (
	stateNew = iota
	stateRunning
	stateStopped
)

// Base is the lifecycle a service embeds: the context its loops run
// under, their join, and the Started and Stopped signals. The zero value
// is ready. Its methods are safe for concurrent use.
type Base struct {
	mu      sync.Mutex
	state   int
	cancel  context.CancelFunc
	ctx     context.Context
	wg      sync.WaitGroup
	started chan struct{}
	stopped chan struct{}
}

// StartInit begins a Start: it returns the context the service's loops
// run under (derived from ctx, ended by Stop) and true, or false when the
// service was started or stopped before. The started signal fires when
// StartInit returns true.
func (b *Base) StartInit(ctx context.Context) (context.Context, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initLocked()
	if b.state != stateNew {
		return nil, false
	}
	b.state = stateRunning
	b.ctx, b.cancel = context.WithCancel(ctx)
	close(b.started)
	return b.ctx, true
}

// Go runs fn in a goroutine under the service's context; Stop waits for
// it. Before Start and after Stop it does nothing. It does not block.
func (b *Base) Go(fn func(ctx context.Context)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != stateRunning {
		return
	}
	ctx := b.ctx
	b.wg.Go(func() { fn(ctx) })
}

// StartLoop is a Start of one loop: it runs run under the service's
// context, once; see [Service.Start].
func (b *Base) StartLoop(ctx context.Context, run func(ctx context.Context)) error {
	if _, ok := b.StartInit(ctx); ok {
		b.Go(run)
	}
	return nil
}

// Stop ends the service's context and blocks until every goroutine Go
// started has returned, then fires the stopped signal. It is safe to
// call more than once; before Start it only marks the service stopped.
func (b *Base) Stop() {
	b.mu.Lock()
	b.initLocked()
	if b.state == stateStopped {
		b.mu.Unlock()
		<-b.stopped
		return
	}
	b.state = stateStopped
	if b.cancel != nil {
		b.cancel()
	}
	b.mu.Unlock()
	b.wg.Wait()
	close(b.stopped)
}

// Context returns the context the service's loops run under, for a
// loop of another component that ends with this service; nil before
// Start.
func (b *Base) Context() context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ctx
}

// Started returns a channel closed when the service has started.
func (b *Base) Started() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initLocked()
	return b.started
}

// Stopped returns a channel closed when the service has stopped: Stop
// was called and its loops have returned.
func (b *Base) Stopped() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initLocked()
	return b.stopped
}

func (b *Base) initLocked() {
	if b.started == nil {
		b.started = make(chan struct{})
		b.stopped = make(chan struct{})
	}
}

// Loop is a service of one loop, for a type whose loop has no lifecycle
// of its own: Start runs the loop, Stop ends its context and waits.
type Loop struct {
	Base
	run func(ctx context.Context)
}

// NewLoop returns the service running run until its context ends.
func NewLoop(run func(ctx context.Context)) *Loop { return &Loop{run: run} }

// Start runs the loop in a goroutine; see [Service].
func (l *Loop) Start(ctx context.Context) error { return l.StartLoop(ctx, l.run) }

// StopAll stops the services at once and blocks until every one has
// stopped: each is told to stop without waiting for the others'.
func StopAll(svcs ...Service) {
	var wg sync.WaitGroup
	for _, s := range svcs {
		wg.Go(s.Stop)
	}
	wg.Wait()
}
