// Package service runs background loops that start together and stop
// together: a service with a start and a stop.
package service

import (
	"context"
	"sync"
)

// Loops are background loops that start together and stop together:
// Start runs each in a goroutine under the loops' context, Stop ends that
// context, Wait joins them. The zero value is ready; Stop and Wait on
// loops never started do nothing. Its methods are safe for concurrent
// use.
type Loops struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start runs fn in a goroutine, with a context that Stop ends; after
// Stop it does nothing. It does not block.
func (l *Loops) Start(fn func(ctx context.Context)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancel(context.Background())
	}
	if l.ctx.Err() != nil {
		return
	}
	ctx := l.ctx
	l.wg.Go(func() { fn(ctx) })
}

// Stop ends the loops' context; it does not wait for them (see Wait).
func (l *Loops) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancel(context.Background())
	}
	l.cancel()
}

// Wait blocks until every loop started has returned.
func (l *Loops) Wait() { l.wg.Wait() }
