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

// A message that fails for good becomes a dead letter; once the bug is
// fixed an operator requeues it, and it is handled.
func ExampleRuntime_Requeue() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	var fixed atomic.Bool
	handled := make(chan string, 1)
	rt, err := runtime.New(runtime.Config{
		StatePath: filepath.Join(dir, "state.db"),
		Classes: []runtime.Class{{
			Name: "mail", // fed by Submit only: no brokers needed
			Handler: func(ctx context.Context, m *handoff.Message) error {
				if !fixed.Load() {
					return handoff.Permanent(errors.New("template missing"))
				}
				handled <- m.ID
				return nil
			},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rt.Run(ctx); close(done) }()
	for !rt.Ready() { // Run recovers the state file first
		time.Sleep(time.Millisecond)
	}
	rt.Submit(context.Background(), "mail", &handoff.Message{ID: "welcome-42"})

	var dead []runtime.DeadLetter
	for len(dead) == 0 { // the handler runs on a worker
		time.Sleep(time.Millisecond)
		dead, _, _ = rt.DeadLetters("mail", "", 10)
	}
	fmt.Printf("dead letter %s after %d attempt: %s\n", dead[0].Message.ID, dead[0].Message.Attempt, dead[0].Err)

	fixed.Store(true)
	if err := rt.Requeue(context.Background(), dead[0].Key); err != nil {
		fmt.Println(err)
	}
	fmt.Println("handled", <-handled)
	stop()
	<-done
	// Output:
	// dead letter welcome-42 after 1 attempt: permanent: template missing
	// handled welcome-42
}
