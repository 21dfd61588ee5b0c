package runtime

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/handoff-go/handoff"
)

// TestAliveNamesStuckLoop: a running runtime is alive hour after hour
// while its loops turn; when the drain-budget watcher and the state file
// deleter stop turning (a test blocks them in their beats, as a deadlock
// or a hung disk would), Alive names both once their 30 s windows have
// passed, and not before; a stop makes it nil again.
// On the bubble's clock: no sleeps on the real one.
func TestAliveNamesStuckLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt, err := newRuntime(Config{StatePath: t.TempDir() + "/s.db", Logger: testLogger(t), Classes: []Class{{Name: "mail",
			Handler: func(context.Context, *handoff.Message) error { return nil }}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Alive(); err != nil {
			t.Fatalf("before Run: %v", err)
		}
		var stuck atomic.Bool
		unblock := make(chan struct{})
		rt.alive.stall = func(name string) {
			if (name == "drain budget watcher" || name == "state file deleter") && stuck.Load() {
				<-unblock
			}
		}
		done := make(chan error, 1)
		go func() { _, err := rt.Run(context.Background()); done <- err }()
		for !rt.Ready() {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(2 * time.Hour)
		if err := rt.Alive(); err != nil {
			t.Fatalf("after 2h of turning loops: %v", err)
		}
		stuck.Store(true)
		time.Sleep(2 * time.Second) // both are blocked in their beats from now on
		synctest.Wait()
		time.Sleep(aliveMinWindow - 5*time.Second)
		if err := rt.Alive(); err != nil {
			t.Fatalf("within the window: %v", err)
		}
		time.Sleep(10 * time.Second)
		err = rt.Alive()
		if !errors.Is(err, ErrNotAlive) || !strings.Contains(err.Error(), "drain budget watcher has not turned for") ||
			!strings.Contains(err.Error(), "state file deleter has not turned for") {
			t.Fatalf("stuck watcher: %v", err)
		}
		go rt.Shutdown(context.Background()) // returns once Run has: after close(unblock)
		synctest.Wait()                      // the stop waits for the watcher
		if err := rt.Alive(); err != nil {
			t.Errorf("during the stop: %v", err)
		}
		close(unblock)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := rt.Alive(); err != nil {
			t.Errorf("after Run: %v", err)
		}
	})
}
