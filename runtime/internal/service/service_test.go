package service

import (
	"context"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLoops: loops started run until Stop, Wait joins them, and a loop
// started after Stop never runs; Stop and Wait on zero Loops return.
func TestLoops(t *testing.T) {
	var zero Loops
	zero.Stop()
	zero.Wait()

	var l Loops
	var running, ended atomic.Int32
	started := make(chan struct{})
	for range 3 {
		l.Start(func(ctx context.Context) {
			running.Add(1)
			started <- struct{}{}
			<-ctx.Done()
			ended.Add(1)
		})
	}
	for range 3 {
		<-started
	}
	if n := ended.Load(); n != 0 {
		t.Fatalf("%d loops ended before Stop", n)
	}
	l.Stop()
	l.Wait()
	if n := ended.Load(); n != 3 {
		t.Fatalf("%d loops ended after Stop and Wait, want 3", n)
	}
	l.Start(func(context.Context) { running.Add(1) })
	l.Wait()
	if n := running.Load(); n != 3 {
		t.Errorf("%d loops ran, want 3: one started after Stop ran", n)
	}
}
