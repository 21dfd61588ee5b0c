package pool_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/handoff-go/handoff/pool"
)

type order struct {
	customer string
	step     string
}

// An Ordered pool runs the orders of one customer one at a time, in the
// order they were submitted, and different customers in parallel.
func ExampleNew() {
	var mu sync.Mutex
	done := make(map[string][]string)
	p, err := pool.New(pool.Config[order]{
		Name:      "orders",
		Workers:   4,
		QueueSize: 16,
		Ordered:   true,
		KeyFunc:   func(o order) string { return o.customer },
		Handler: func(ctx context.Context, o order) error {
			return nil // ship it
		},
		ResultFunc: func(o order, err error) {
			mu.Lock()
			defer mu.Unlock()
			done[o.customer] = append(done[o.customer], o.step)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, o := range []order{{"ann", "created"}, {"bob", "created"}, {"ann", "paid"}, {"ann", "shipped"}, {"bob", "cancelled"}} {
		if err := p.Submit(ctx, o); err != nil {
			fmt.Println(err)
		}
	}
	if err := p.Drain(ctx); err != nil {
		fmt.Println(err)
	}
	res := p.Stop(time.Second, nil)
	fmt.Println("ann:", done["ann"])
	fmt.Println("bob:", done["bob"])
	fmt.Println("handed back:", len(res.Unstarted)+len(res.Interrupted))
	// Output:
	// ann: [created paid shipped]
	// bob: [created cancelled]
	// handed back: 0
}

// Stop hands back what was not handled: here one order cancelled while it
// ran, and the two behind it that never started.
func ExamplePool_Stop() {
	started := make(chan struct{}, 1)
	p, err := pool.New(pool.Config[string]{
		Name:      "orders",
		Workers:   1,
		QueueSize: 4,
		Handler: func(ctx context.Context, id string) error {
			started <- struct{}{}
			<-ctx.Done() // a slow call that honours its context
			return context.Cause(ctx)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, id := range []string{"o1", "o2", "o3"} {
		if err := p.Submit(ctx, id); err != nil {
			fmt.Println(err)
		}
		if id == "o1" {
			<-started
		}
	}
	res := p.Stop(5*time.Second, errors.New("deploy"))
	fmt.Println("unstarted:", res.Unstarted)
	fmt.Println("interrupted:", res.Interrupted, "stragglers:", res.Stragglers)
	fmt.Println(p.Submit(ctx, "o4"))
	// Output:
	// unstarted: [o2 o3]
	// interrupted: [o1] stragglers: 0
	// pool: stopped
}

// A failed payment is retried with backoff, without holding the only
// worker; RetryFunc counts the attempts on the item.
func ExampleConfig_retryFunc() {
	type payment struct {
		id       string
		attempts int
	}
	errDeclined := errors.New("gateway busy")
	done := make(chan error, 1)
	p, err := pool.New(pool.Config[*payment]{
		Name:      "payments",
		Workers:   1,
		QueueSize: 4,
		Handler: func(ctx context.Context, pm *payment) error {
			if pm.attempts < 2 {
				return errDeclined
			}
			return nil
		},
		RetryFunc: func(pm *payment, err error) (time.Duration, bool) {
			pm.attempts++
			return time.Duration(pm.attempts) * time.Millisecond, pm.attempts <= 5
		},
		ResultFunc: func(pm *payment, err error) { done <- err },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	pm := &payment{id: "p1"}
	if err := p.Submit(context.Background(), pm); err != nil {
		fmt.Println(err)
	}
	fmt.Println("result:", <-done, "after", pm.attempts, "retries")
	res := p.Stop(time.Second, nil)
	fmt.Println("retried:", p.Stats().Retried, "handed back:", len(res.Unstarted)+len(res.Waiting)+len(res.Interrupted))
	// Output:
	// result: <nil> after 2 retries
	// retried: 2 handed back: 0
}
