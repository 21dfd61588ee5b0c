package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime"
)

// Middleware runs around every attempt, inside the class's Timeout;
// OnOutcome tells it what the runtime did after the attempt returned:
// here a message that fails once, is retried in place and succeeds.
func ExampleOnOutcome() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	done := make(chan struct{})
	report := func(next handoff.HandlerFunc) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error {
			_, bounded := ctx.Deadline()
			attempt := m.Attempt // when f runs, m.Attempt counts this attempt if it failed
			runtime.OnOutcome(ctx, func(o runtime.Outcome) {
				fmt.Printf("%s attempt %d (bounded %v): %s, err=%v\n", m.ID, attempt, bounded, o.Kind, o.Err)
				if o.Kind == runtime.OutcomeSucceeded {
					close(done)
				}
			})
			return next(ctx, m)
		}
	}
	rt, err := runtime.New(runtime.Config{
		StatePath: filepath.Join(dir, "state.db"),
		Classes: []runtime.Class{{
			Name:       "mail", // fed by Submit only: no brokers needed
			Timeout:    10 * time.Second,
			Retry:      runtime.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
			Middleware: []handoff.Middleware{report},
			Handler: func(ctx context.Context, m *handoff.Message) error {
				if m.Attempt == 0 {
					return errors.New("smtp: 421 try again")
				}
				return nil
			},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { rt.Run(ctx); close(ran) }()
	for !rt.Ready() { // Run recovers the state file first
		time.Sleep(time.Millisecond)
	}
	rt.Submit(context.Background(), "mail", &handoff.Message{ID: "welcome-42"})
	<-done
	stop()
	<-ran
	// Output:
	// welcome-42 attempt 0 (bounded true): retried, err=smtp: 421 try again
	// welcome-42 attempt 1 (bounded true): succeeded, err=<nil>
}
