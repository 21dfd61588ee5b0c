package pool

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// remove calls Remove and records what it took, as the harness records
// Stop's unstarted items, so the cleanup's accounting includes them.
func (h *harness) remove(match func(item) bool) []item {
	out := h.p.Remove(match)
	h.mu.Lock()
	h.stops = append(h.stops, StopResult[item]{Unstarted: out})
	h.mu.Unlock()
	return out
}

func TestRemove(t *testing.T) {
	t.Parallel()

	t.Run("unordered takes matching unstarted items only", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		started := make(chan int, 16)
		var mu sync.Mutex
		var ran []int
		h := setup(t, Config[item]{Workers: 1, QueueSize: 16, Handler: func(_ context.Context, it item) error {
			started <- it.id
			if it.id == 0 {
				<-release
			}
			mu.Lock()
			ran = append(ran, it.id)
			mu.Unlock()
			return nil
		}})
		for i := range 10 {
			h.mustSubmit(item{id: i})
		}
		<-started // 0 runs and blocks
		got := h.remove(func(it item) bool { return it.id%2 == 0 })
		if !slices.Equal(ids(got), []int{2, 4, 6, 8}) {
			t.Errorf("removed %v, want 2 4 6 8 (0 is running)", ids(got))
		}
		close(release)
		h.drain()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(ran, []int{0, 1, 3, 5, 7, 9}) {
			t.Errorf("ran %v", ran)
		}
	})

	t.Run("ordered keeps per-key order and readies new heads", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		var mu sync.Mutex
		var ran []int
		h := setup(t, Config[item]{Workers: 1, QueueSize: 16, Ordered: true, KeyFunc: keyOf,
			Handler: func(_ context.Context, it item) error {
				if it.id == 0 {
					started <- struct{}{}
					<-release
				}
				mu.Lock()
				ran = append(ran, it.id)
				mu.Unlock()
				return nil
			}})
		// a: 0 1 2 3, b: 4 5, c: 6
		h.mustSubmit(item{0, "a"}, item{1, "a"}, item{2, "a"}, item{3, "a"}, item{4, "b"}, item{5, "b"}, item{6, "c"})
		<-started
		got := h.remove(func(it item) bool { return it.id == 1 || it.id == 4 || it.id == 6 })
		if !slices.Equal(ids(got), []int{1, 4, 6}) {
			t.Errorf("removed %v", ids(got))
		}
		if s := h.p.Stats(); s.Queued != 3 || s.Running != 1 {
			t.Errorf("stats after remove: %+v", s)
		}
		close(release)
		h.drain()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(ran, []int{0, 2, 3, 5}) {
			t.Errorf("ran %v, want 0 2 3 5", ran)
		}
	})

	t.Run("ordered removes a whole key and its tail", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		h := setup(t, Config[item]{Workers: 1, QueueSize: 16, Ordered: true, KeyFunc: keyOf,
			Handler: func(_ context.Context, it item) error {
				if it.id == 0 {
					started <- struct{}{}
					<-release
				}
				return nil
			}})
		h.mustSubmit(item{0, "a"}, item{1, "b"}, item{2, "b"})
		<-started
		if got := h.remove(func(it item) bool { return it.key == "b" }); len(got) != 2 {
			t.Errorf("removed %v", ids(got))
		}
		h.p.mu.Lock()
		_, busy := h.p.keys[maphash.String(h.p.seed, "b")]
		h.p.mu.Unlock()
		if busy {
			t.Error("key b still busy with nothing left")
		}
		h.mustSubmit(item{3, "b"})
		close(release)
		h.drain()
		if _, ok := h.result(3); !ok {
			t.Error("a new item of a removed key did not run")
		}
	})

	t.Run("waiting items are taken and their timers stopped", func(t *testing.T) {
		t.Parallel()
		h := setup(t, Config[item]{Workers: 2, QueueSize: 4, Ordered: true, KeyFunc: keyOf,
			Handler: func(_ context.Context, it item) error {
				if it.id == 0 {
					return errors.New("fail")
				}
				return nil
			},
			RetryFunc: func(item, error) (time.Duration, bool) { return time.Hour, true },
		})
		h.mustSubmit(item{0, "a"}, item{1, "a"})
		for h.p.Stats().Waiting != 1 {
			h.drain() // 0 failed and waits; 1 is behind it
		}
		got := h.remove(func(it item) bool { return it.id == 0 })
		if !slices.Equal(ids(got), []int{0}) {
			t.Errorf("removed %v", ids(got))
		}
		h.drain()
		if _, ok := h.result(1); !ok {
			t.Error("the item behind a removed waiting one did not run")
		}
		if s := h.p.Stats(); s.Waiting != 0 || s.Queued != 0 {
			t.Errorf("stats %+v", s)
		}
	})

	t.Run("freed room goes to waiting submits", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		h := setup(t, Config[item]{Workers: 1, QueueSize: 2, Handler: func(_ context.Context, it item) error {
			if it.id == 0 {
				started <- struct{}{}
				<-release
			}
			return nil
		}})
		h.mustSubmit(item{id: 0})
		<-started
		h.mustSubmit(item{id: 1}, item{id: 2})
		done := make(chan error, 1)
		go func() { done <- h.submit(context.Background(), item{id: 3}) }()
		for h.waiters() == 0 {
			time.Sleep(time.Millisecond) // the submit is on its way to wait
		}
		h.remove(func(it item) bool { return it.id == 1 })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		close(release)
		h.drain()
	})

	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("concurrent remove keeps per-key order/batch=%v", batched), func(t *testing.T) {
			t.Parallel()
			concurrentRemove(t, batched)
		})
	}
}

// concurrentRemove removes at random while four submitters submit
// (batched: with SubmitBatch, to a BatchHandler pool) and checks per-key
// order.
func concurrentRemove(t *testing.T, batched bool) {
	const keys, perKey = 16, 200
	var mu sync.Mutex
	order := map[string][]int{}
	var busy [keys]atomic.Int32
	var overlap atomic.Int32
	handle := func(_ context.Context, it item) error {
		k := it.id / perKey
		if busy[k].Add(1) != 1 {
			overlap.Add(1)
		}
		defer busy[k].Add(-1)
		mu.Lock()
		order[it.key] = append(order[it.key], it.id)
		mu.Unlock()
		if rand.IntN(5) == 0 {
			return errors.New("retry me")
		}
		return nil
	}
	cfg := Config[item]{Workers: 6, QueueSize: 24, Ordered: true, KeyFunc: keyOf, Handler: handle,
		RetryFunc: func(item, error) (time.Duration, bool) { return time.Duration(rand.IntN(200)) * time.Microsecond, true },
	}
	if batched {
		cfg.Handler, cfg.MaxBatch = nil, 4
		cfg.BatchHandler = func(ctx context.Context, vs []item, errs []error) {
			for i, v := range vs {
				errs[i] = handle(ctx, v)
			}
		}
	}
	h := setup(t, cfg)
	stop := make(chan struct{})
	var removers sync.WaitGroup
	removers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			r := rand.IntN(7)
			h.remove(func(it item) bool { return it.id%7 == r })
		}
	})
	var wg sync.WaitGroup
	for s := range 4 {
		wg.Go(func() {
			for n := range perKey {
				var its []item
				for k := s; k < keys; k += 4 {
					its = append(its, item{id: k*perKey + n, key: fmt.Sprint("k", k)})
				}
				if !batched {
					h.mustSubmit(its...)
				} else if _, err := h.submitBatch(context.Background(), its); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	removers.Wait()
	h.drain()
	for h.p.Stats().Waiting > 0 {
		h.drain()
		time.Sleep(time.Millisecond) // retry delays are microseconds
	}
	if n := overlap.Load(); n != 0 {
		t.Errorf("%d overlaps", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for key, got := range order {
		// Retries repeat an id in place; order must not go backwards.
		if !slices.IsSorted(got) {
			t.Errorf("key %s ran out of order: %v", key, got)
		}
	}
}

func (h *harness) waiters() int {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	n := 0
	for w := h.p.waiters.head; w != nil; w = w.next {
		n++
	}
	return n
}
