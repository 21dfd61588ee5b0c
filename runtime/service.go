package runtime

import (
	"context"
	"sync"
)

// loops are background loops that start together and stop together, a
// service with a start and a stop: start runs each in a goroutine under
// the loops' context, stop ends that context, wait joins them. The zero
// value is ready; stop and wait on loops never started do nothing.
type loops struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// start runs fn in a goroutine until the loops stop; after stop it does
// nothing.
func (l *loops) start(fn func(ctx context.Context)) {
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

// stop ends the loops' context; it does not wait for them.
func (l *loops) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancel(context.Background())
	}
	l.cancel()
}

// wait waits for the loops to return.
func (l *loops) wait() { l.wg.Wait() }
