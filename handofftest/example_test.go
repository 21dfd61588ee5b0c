package handofftest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/handofftest"
	"github.com/handoff-go/handoff/runtime"
)

// An ordered class whose handler rejects one order's payment: the
// runtime makes it a dead letter and parks that order's later changes,
// while other orders flow. In a test, handofftest.New(t, class) does the
// same and reports failures to t; Start is for code without a t.
func ExampleStart() {
	dir, err := os.MkdirTemp("", "handofftest")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	h, err := handofftest.Start(runtime.Class{
		Name:    "orders",
		Ordered: true,
		Handler: func(ctx context.Context, m *handoff.Message) error {
			if string(m.Value) == "paid" && string(m.Key) == "order-1" {
				return handoff.Permanent(errors.New("card declined"))
			}
			return nil
		},
	}, dir, nil)
	if err != nil {
		panic(err)
	}
	defer h.Stop()

	h.SendValues("order-1", "created", "paid", "shipped")
	h.SendValues("order-2", "created", "paid")
	h.Wait()
	for _, r := range h.Results() {
		fmt.Printf("%s/%s: %s\n", r.Message.Key, r.Message.Value, r)
	}
	// Output:
	// order-1/created: msg-1 handled after 1 attempt
	// order-1/paid: msg-2 dead-lettered after 1 attempt: permanent: card declined
	// order-1/shipped: msg-3 parked
	// order-2/created: msg-4 handled after 1 attempt
	// order-2/paid: msg-5 handled after 1 attempt
}

// The class's retry policy runs as in production: a message that fails
// twice is handled on its third attempt, one that always fails is a dead
// letter. (Inside testing/synctest's Test the backoffs take no time.)
func ExampleHarness_Wait() {
	dir, err := os.MkdirTemp("", "handofftest")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	failures := map[string]int{"flaky": 2, "broken": 99}
	h, err := handofftest.Start(runtime.Class{
		Name:    "users",
		Workers: 1, // one at a time: the map needs no lock
		Retry:   runtime.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
		Handler: func(ctx context.Context, m *handoff.Message) error {
			if failures[m.ID] > 0 {
				failures[m.ID]--
				return errors.New("mail server busy")
			}
			return nil
		},
	}, dir, nil)
	if err != nil {
		panic(err)
	}
	defer h.Stop()

	h.Send(&handoff.Message{ID: "flaky"}, &handoff.Message{ID: "broken"})
	h.Wait()
	for _, r := range h.Results() {
		fmt.Println(r)
	}
	// Output:
	// flaky handled after 3 attempts
	// broken dead-lettered after 3 attempts: mail server busy
}

// A batch class: the handler writes a batch in one call and names the
// message it could not write; only that one is retried.
func ExampleHarness_Send_batch() {
	dir, err := os.MkdirTemp("", "handofftest")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	h, err := handofftest.Start(runtime.Class{
		Name:     "heartbeats",
		MaxBatch: 10,
		Workers:  1,
		Retry:    runtime.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
		BatchHandler: func(ctx context.Context, ms []*handoff.Message) error {
			var be handoff.BatchError
			for i, m := range ms {
				if string(m.Value) == "garbled" {
					be.Fail(i, handoff.Permanent(errors.New("cannot parse heartbeat")))
				}
			}
			return be.Err()
		},
	}, dir, nil)
	if err != nil {
		panic(err)
	}
	defer h.Stop()

	h.SendValues("device-1", "ok", "ok", "garbled", "ok")
	h.Wait()
	for _, r := range h.Results() {
		fmt.Println(r)
	}
	// Output:
	// msg-1 handled after 1 attempt
	// msg-2 handled after 1 attempt
	// msg-3 dead-lettered after 1 attempt: permanent: cannot parse heartbeat
	// msg-4 handled after 1 attempt
}

// The history of a message: each attempt with what the runtime decided
// after it, and the discard of its dead letter. Options set the stop's
// timings, further classes and Config-level middleware.
func ExampleHarness_History() {
	dir, err := os.MkdirTemp("", "handofftest")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	h, err := handofftest.Start(runtime.Class{
		Name:  "users",
		Retry: runtime.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
		Handler: func(ctx context.Context, m *handoff.Message) error {
			return errors.New("mailbox full")
		},
	}, dir, nil, handofftest.WithDrainTimeout(100*time.Millisecond), handofftest.WithHardStopGrace(100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer h.Stop()

	h.Send(&handoff.Message{ID: "welcome-7"})
	h.Wait()
	dls, _, err := h.Runtime().DeadLetters("users", "", 10)
	if err != nil {
		panic(err)
	}
	if err := h.Runtime().Discard(context.Background(), dls[0].Key); err != nil {
		panic(err)
	}
	h.Wait()
	for _, e := range h.History("welcome-7") {
		fmt.Println(e.Kind, e.Attempt, e.Err)
	}
	fmt.Println(h.Result("welcome-7"))
	// Output:
	// retried 0 mailbox full
	// dead_lettered 1 mailbox full
	// discarded 2 mailbox full
	// welcome-7 discarded after 2 attempts: mailbox full
}
