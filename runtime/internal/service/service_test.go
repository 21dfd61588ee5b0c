package service

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counter is a service of n loops that count their ends.
type counter struct {
	Base
	n     int
	ran   atomic.Int32
	ended atomic.Int32
	up    chan struct{}
}

func (c *counter) Start(ctx context.Context) error {
	if _, ok := c.StartInit(ctx); !ok {
		return nil
	}
	for range c.n {
		c.Go(func(ctx context.Context) {
			c.ran.Add(1)
			c.up <- struct{}{}
			<-ctx.Done()
			c.ended.Add(1)
		})
	}
	return nil
}

// TestBaseLifecycle: the loops started run until Stop, Stop joins them,
// the signals fire in order, a loop started after Stop never runs, and
// a second Start does nothing.
func TestBaseLifecycle(t *testing.T) {
	c := &counter{n: 3, up: make(chan struct{})}
	select {
	case <-c.Started():
		t.Fatal("started before Start")
	default:
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		<-c.up
	}
	<-c.Started()
	if err := c.Start(t.Context()); err != nil { // a second Start: nothing
		t.Fatal(err)
	}
	if n := c.ended.Load(); n != 0 {
		t.Fatalf("%d loops ended before Stop", n)
	}
	select {
	case <-c.Stopped():
		t.Fatal("stopped before Stop")
	default:
	}
	c.Stop()
	<-c.Stopped()
	if n := c.ended.Load(); n != 3 {
		t.Fatalf("%d loops ended after Stop, want 3", n)
	}
	c.Go(func(context.Context) { c.ran.Add(1) })
	c.Stop() // twice: no-op
	if n := c.ran.Load(); n != 3 {
		t.Errorf("%d loops ran, want 3: one started after Stop ran", n)
	}
}

// TestStopBeforeStart: Stop on a service never started returns, and a
// Start after it runs nothing.
func TestStopBeforeStart(t *testing.T) {
	var ran atomic.Bool
	l := NewLoop(func(context.Context) { ran.Store(true) })
	l.Stop()
	<-l.Stopped()
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	l.Stop()
	if ran.Load() {
		t.Error("a loop started after Stop ran")
	}
}

// TestStartContextEnds: a service's loops also end with Start's
// context.
func TestStartContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	ended := make(chan struct{})
	l := NewLoop(func(ctx context.Context) { <-ctx.Done(); close(ended) })
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-ended
	l.Stop()
}

// TestStopAllConcurrent: StopAll tells every service to stop before
// waiting for any: a loop that returns only once another loop's context
// has ended still stops.
func TestStopAllConcurrent(t *testing.T) {
	var second sync.WaitGroup
	second.Add(1)
	a := NewLoop(func(ctx context.Context) { <-ctx.Done(); second.Wait() })
	b := NewLoop(func(ctx context.Context) { <-ctx.Done(); second.Done() })
	for _, s := range []Service{a, b} {
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	StopAll(a, b)
	<-a.Stopped()
	<-b.Stopped()
}

// TestConcurrentStartStop hammers Start, Go and Stop from several
// goroutines: no race, no leak, and Stop returns.
func TestConcurrentStartStop(t *testing.T) {
	for range 50 {
		l := NewLoop(func(ctx context.Context) { <-ctx.Done() })
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { _ = l.Start(t.Context()) })
			wg.Go(func() { l.Go(func(ctx context.Context) { <-ctx.Done() }) })
			wg.Go(l.Stop)
		}
		wg.Wait()
		l.Stop()
	}
}
