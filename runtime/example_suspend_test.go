package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime"
)

// A handler that knows its database is down says so with
// handoff.Unavailable: the class is suspended at once, holds the message
// without counting the attempt, and probes until the database is back.
func ExampleSuspendPolicy() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	var dbUp atomic.Bool
	handled := make(chan handoff.Message, 1)
	rt, err := runtime.New(runtime.Config{
		StatePath: filepath.Join(dir, "state.db"),
		Classes: []runtime.Class{{
			Name: "orders", // fed by Submit only: no brokers needed
			Handler: func(ctx context.Context, m *handoff.Message) error {
				if !dbUp.Load() {
					return handoff.Unavailable(errors.New("connection refused"))
				}
				handled <- *m
				return nil
			},
			Suspend: runtime.SuspendPolicy{ProbeBackoff: 10 * time.Millisecond, ProbeMaxBackoff: 50 * time.Millisecond},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rt.Run(ctx); close(done) }()
	for !rt.Ready() {
		time.Sleep(time.Millisecond)
	}
	rt.Submit(context.Background(), "orders", &handoff.Message{ID: "order-7"})
	for rt.Stats()[0].Hold.State != runtime.HoldSuspended {
		time.Sleep(time.Millisecond)
	}
	h := rt.Stats()[0].Hold
	fmt.Printf("%s: %s (%s)\n", h.State, h.Reason, h.LastError)

	dbUp.Store(true) // the next probe succeeds
	m := <-handled
	fmt.Printf("handled %s with %d failed attempts counted\n", m.ID, m.Attempt)
	stop()
	<-done
	// Output:
	// suspended: handler returned handoff.Unavailable (unavailable: connection refused)
	// handled order-7 with 0 failed attempts counted
}

// An operator pauses a class (kept in the state file, so a restart comes
// back paused) and resumes it later.
func ExampleRuntime_Pause() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	handled := make(chan string, 1)
	rt, err := runtime.New(runtime.Config{
		StatePath: filepath.Join(dir, "state.db"),
		Classes: []runtime.Class{{Name: "mail", Handler: func(ctx context.Context, m *handoff.Message) error {
			handled <- m.ID
			return nil
		}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rt.Run(ctx); close(done) }()
	for !rt.Ready() {
		time.Sleep(time.Millisecond)
	}
	if err := rt.Pause(context.Background(), "mail", "mail provider migration"); err != nil {
		fmt.Println(err)
	}
	rt.Submit(context.Background(), "mail", &handoff.Message{ID: "welcome-42"})
	h := rt.Stats()[0].Hold
	fmt.Printf("%s: %s; queued %d\n", h.State, h.Reason, rt.Stats()[0].Queued)

	if err := rt.Resume(context.Background(), "mail"); err != nil {
		fmt.Println(err)
	}
	fmt.Println("handled", <-handled)
	stop()
	<-done
	// Output:
	// paused: mail provider migration; queued 1
	// handled welcome-42
}
