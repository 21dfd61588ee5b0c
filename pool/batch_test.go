package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/handoff-go/handoff"
)

// span returns items with ids from..to-1, keyed by key(id) when key is
// set.
func span(from, to int, key func(int) string) []item {
	var out []item
	for id := from; id < to; id++ {
		it := item{id: id}
		if key != nil {
			it.key = key(id)
		}
		out = append(out, it)
	}
	return out
}

func TestSubmitBatch(t *testing.T) {
	t.Parallel()

	t.Run("one worker runs a batch in submission order", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var ran []int
		h := setup(t, Config[item]{Workers: 1, QueueSize: 64, Handler: func(_ context.Context, it item) error {
			mu.Lock()
			ran = append(ran, it.id)
			mu.Unlock()
			return nil
		}})
		for from := 0; from < 60; from += 20 {
			if _, err := h.submitBatch(context.Background(), span(from, from+20, nil)); err != nil {
				t.Fatal(err)
			}
		}
		h.drain()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(ran, ids(span(0, 60, nil))) {
			t.Errorf("ran %v, want 0..59 in order", ran)
		}
	})

	t.Run("empty batch", func(t *testing.T) {
		t.Parallel()
		h := setup(t, Config[item]{})
		if n, err := h.submitBatch(context.Background(), nil); n != 0 || err != nil {
			t.Errorf("SubmitBatch(nil) = %d, %v; want 0, nil", n, err)
		}
	})

	t.Run("one wake-up fans out to every worker", func(t *testing.T) {
		t.Parallel()
		// Each handler waits until all Workers run at once: only a
		// pool whose loops wake each other after one wake-up gets there.
		const workers = 6
		var running atomic.Int32
		all := make(chan struct{})
		h := setup(t, Config[item]{Workers: workers, QueueSize: 64, Handler: func(_ context.Context, it item) error {
			if running.Add(1) == workers {
				close(all)
			}
			select {
			case <-all:
				return nil
			case <-time.After(waitLimit):
				return fmt.Errorf("item %d: %d of %d workers ran at once", it.id, running.Load(), workers)
			}
		}})
		if _, err := h.submitBatch(context.Background(), span(0, workers, nil)); err != nil {
			t.Fatal(err)
		}
		h.drain()
		for id := range workers {
			if err, _ := h.result(id); err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("full pool: the accepted prefix on ctx end", func(t *testing.T) {
		t.Parallel()
		g := newGate()
		h := setup(t, Config[item]{Workers: 1, QueueSize: 4, Handler: g.handler})
		h.mustSubmit(item{id: 100})
		g.wait(t) // 100 runs, the queue is empty
		ctx, cancel := context.WithCancel(context.Background())
		type res struct {
			n   int
			err error
		}
		done := make(chan res, 1)
		go func() {
			n, err := h.submitBatch(ctx, span(0, 10, nil))
			done <- res{n, err}
		}()
		waitFor(t, func() bool { return h.p.Stats().Queued == 4 })
		select {
		case r := <-done:
			t.Fatalf("SubmitBatch returned %d, %v with the pool full", r.n, r.err)
		default:
		}
		cancel()
		r := <-done
		if r.n != 4 || !errors.Is(r.err, context.Canceled) {
			t.Errorf("SubmitBatch = %d, %v; want 4, context.Canceled", r.n, r.err)
		}
		close(g.release)
		h.drain()
	})

	t.Run("waiting batch and Submit are served first come first served", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var ran []int
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		h := setup(t, Config[item]{Workers: 1, QueueSize: 2, Handler: func(_ context.Context, it item) error {
			if it.id == 100 {
				started <- struct{}{}
				<-release
			}
			mu.Lock()
			ran = append(ran, it.id)
			mu.Unlock()
			return nil
		}})
		h.mustSubmit(item{id: 100})
		<-started
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := h.submitBatch(context.Background(), span(0, 6, nil)); err != nil {
				t.Error(err)
			}
		})
		waitFor(t, func() bool { return h.p.Stats().Queued == 2 })
		wg.Go(func() { h.mustSubmit(item{id: 6}) }) // behind the batch's rest
		waitFor(t, func() bool {
			h.p.mu.Lock()
			defer h.p.mu.Unlock()
			return h.p.waiters.head != nil && h.p.waiters.head.next != nil
		})
		close(release)
		wg.Wait()
		h.drain()
		mu.Lock()
		defer mu.Unlock()
		if want := []int{100, 0, 1, 2, 3, 4, 5, 6}; !slices.Equal(ran, want) {
			t.Errorf("ran %v, want %v", ran, want)
		}
	})

	t.Run("Stop ends a waiting batch", func(t *testing.T) {
		t.Parallel()
		g := newGate()
		h := setup(t, Config[item]{Workers: 1, QueueSize: 3, Handler: g.handler})
		h.mustSubmit(item{id: 100})
		g.wait(t)
		done := make(chan error, 1)
		var n int
		go func() {
			var err error
			n, err = h.submitBatch(context.Background(), span(0, 10, nil))
			done <- err
		}()
		waitFor(t, func() bool { return h.p.Stats().Queued == 3 })
		stopped := make(chan StopResult[item], 1)
		go func() { stopped <- h.stop(waitLimit, nil) }()
		if err := <-done; !errors.Is(err, ErrStopped) || n != 3 {
			t.Errorf("SubmitBatch = %d, %v; want 3, ErrStopped", n, err)
		}
		close(g.release)
		if res := <-stopped; !slices.Equal(ids(res.Unstarted), []int{0, 1, 2}) {
			t.Errorf("Unstarted = %v, want 0 1 2", ids(res.Unstarted))
		}
		if n, err := h.submitBatch(context.Background(), span(20, 22, nil)); n != 0 || !errors.Is(err, ErrStopped) {
			t.Errorf("SubmitBatch after Stop = %d, %v; want 0, ErrStopped", n, err)
		}
	})

	t.Run("ordered: per-key order across batches and Submits", func(t *testing.T) {
		t.Parallel()
		const keys, perKey = 16, 40
		var mu sync.Mutex
		order := map[string][]int{}
		h := setup(t, Config[item]{Workers: 6, QueueSize: 24, Ordered: true, KeyFunc: keyOf,
			Handler: func(_ context.Context, it item) error {
				mu.Lock()
				order[it.key] = append(order[it.key], it.id)
				mu.Unlock()
				return nil
			}})
		key := func(id int) string { return fmt.Sprint("k", id%keys) }
		all := span(0, keys*perKey, key)
		var wg sync.WaitGroup
		// Two submitters share the keys: one in batches of 7, one item by
		// item; each key's items go to one of them only.
		var mine [2][]item
		for _, it := range all {
			mine[(it.id%keys)%2] = append(mine[(it.id%keys)%2], it)
		}
		wg.Go(func() {
			for b := range slices.Chunk(mine[0], 7) {
				if _, err := h.submitBatch(context.Background(), b); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() { h.mustSubmit(mine[1]...) })
		wg.Wait()
		h.drain()
		mu.Lock()
		defer mu.Unlock()
		for k, got := range order {
			if len(got) != perKey || !slices.IsSorted(got) {
				t.Errorf("key %s ran %v", k, got)
			}
		}
	})
}

// waitFor polls cond until it holds, failing after waitLimit.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

// batchRecorder is a BatchHandler that records each call's ids.
type batchRecorder struct {
	mu    sync.Mutex
	calls [][]int
	fail  func(item) error // nil: every item done
}

func (r *batchRecorder) handler(_ context.Context, vs []item, errs []error) {
	r.mu.Lock()
	r.calls = append(r.calls, ids(vs))
	r.mu.Unlock()
	if r.fail != nil {
		for i, v := range vs {
			errs[i] = r.fail(v)
		}
	}
}

func (r *batchRecorder) sizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for _, c := range r.calls {
		out = append(out, len(c))
	}
	return out
}

func TestBatchHandler(t *testing.T) {
	t.Parallel()

	t.Run("config", func(t *testing.T) {
		t.Parallel()
		bh := func(context.Context, []int, []error) {}
		handler := func(context.Context, int) error { return nil }
		_, err := New(Config[int]{Name: "b", Workers: 1, QueueSize: 1, BatchHandler: bh, Handler: handler, MaxWait: -1})
		for _, want := range []string{
			`pool "b": Handler and BatchHandler are both set`,
			`pool "b": MaxBatch must be > 0 with a BatchHandler, got 0`,
			`pool "b": MaxWait must not be negative, got -1ns`,
		} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v lacks %q", err, want)
			}
		}
		_, err = New(Config[int]{Name: "b", Workers: 1, QueueSize: 1, Handler: handler, MaxBatch: 3})
		if want := `pool "b": MaxBatch and MaxWait need a BatchHandler`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	})

	t.Run("full batches at once, the rest after MaxWait", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var r batchRecorder
			h := setup(t, Config[item]{Workers: 1, QueueSize: 512, BatchHandler: r.handler, MaxBatch: 100, MaxWait: time.Second})
			began := time.Now()
			if _, err := h.submitBatch(context.Background(), span(0, 250, nil)); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if got := r.sizes(); !slices.Equal(got, []int{100, 100}) {
				t.Errorf("calls before MaxWait: %v, want 100 100", got)
			}
			h.drain()
			if got := r.sizes(); !slices.Equal(got, []int{100, 100, 50}) {
				t.Errorf("calls: %v, want 100 100 50", got)
			}
			if took := time.Since(began); took != time.Second {
				t.Errorf("the partial batch was called after %s, want MaxWait (1s)", took)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if got := slices.Concat(r.calls...); !slices.Equal(got, ids(span(0, 250, nil))) {
				t.Errorf("items called in order %v", got)
			}
		})
	})

	t.Run("a trickle joins the filling batch", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var r batchRecorder
			h := setup(t, Config[item]{Workers: 4, QueueSize: 64, BatchHandler: r.handler, MaxBatch: 10, MaxWait: 100 * time.Millisecond})
			for i := range 25 {
				h.mustSubmit(item{id: i})
				time.Sleep(time.Millisecond)
			}
			h.drain()
			// 0..9 fill within 10ms, 10..19 too, 20..24 wait out MaxWait.
			if got := r.sizes(); !slices.Equal(got, []int{10, 10, 5}) {
				t.Errorf("calls: %v, want 10 10 5", got)
			}
		})
	})

	t.Run("each item settles on its own", func(t *testing.T) {
		t.Parallel()
		errOdd := errors.New("odd")
		var retried sync.Map
		r := batchRecorder{fail: func(it item) error {
			switch {
			case it.id%10 == 3:
				if _, again := retried.LoadOrStore(it.id, true); !again {
					return errRetry // first attempt only
				}
			case it.id%2 == 1:
				return errOdd
			}
			return nil
		}}
		h := setup(t, Config[item]{Workers: 2, QueueSize: 64, BatchHandler: r.handler, MaxBatch: 8,
			RetryFunc: func(_ item, err error) (time.Duration, bool) { return 0, errors.Is(err, errRetry) }})
		if _, err := h.submitBatch(context.Background(), span(0, 40, nil)); err != nil {
			t.Fatal(err)
		}
		h.drain()
		for id := range 40 {
			err, called := h.result(id)
			want := error(nil)
			if id%2 == 1 && id%10 != 3 {
				want = errOdd
			}
			if !called || !errors.Is(err, want) && err != want {
				t.Errorf("item %d: result %v (called %v), want %v", id, err, called, want)
			}
		}
		if st := h.p.Stats(); st.Retried != 4 || st.Failed != 16 || st.Succeeded != 24 {
			t.Errorf("Stats %+v, want 4 retried, 16 failed, 24 succeeded", st)
		}
	})

	t.Run("a panic fails every item of the call", func(t *testing.T) {
		t.Parallel()
		h := setup(t, Config[item]{Workers: 1, QueueSize: 8, MaxBatch: 4,
			BatchHandler: func(context.Context, []item, []error) { panic("boom") }})
		if _, err := h.submitBatch(context.Background(), span(0, 4, nil)); err != nil {
			t.Fatal(err)
		}
		h.drain()
		for id := range 4 {
			var pe *handoff.PanicError
			if err, _ := h.result(id); !errors.As(err, &pe) {
				t.Errorf("item %d: %v, want a *handoff.PanicError", id, err)
			}
		}
	})

	t.Run("ordered: one item per key in a call, keys in order", func(t *testing.T) {
		t.Parallel()
		var r batchRecorder
		h := setup(t, Config[item]{Workers: 3, QueueSize: 200, Ordered: true, KeyFunc: keyOf,
			BatchHandler: r.handler, MaxBatch: 16})
		key := func(id int) string { return fmt.Sprint("k", id%5) }
		if _, err := h.submitBatch(context.Background(), span(0, 200, key)); err != nil {
			t.Fatal(err)
		}
		h.drain()
		r.mu.Lock()
		defer r.mu.Unlock()
		last := map[string]int{}
		for _, call := range r.calls {
			seen := map[string]bool{}
			for _, id := range call {
				k := key(id)
				if seen[k] {
					t.Errorf("call %v holds two items of key %s", call, k)
				}
				seen[k] = true
				if prev, ok := last[k]; ok && prev > id {
					t.Errorf("key %s: %d ran after %d", k, id, prev)
				}
				last[k] = id
			}
		}
	})

	t.Run("Stop hands a filling batch back unstarted", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var r batchRecorder
			h := setup(t, Config[item]{Workers: 2, QueueSize: 64, BatchHandler: r.handler, MaxBatch: 10, MaxWait: time.Hour})
			if _, err := h.submitBatch(context.Background(), span(0, 5, nil)); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // a loop is filling
			res := h.stop(time.Second, nil)
			if !slices.Equal(ids(res.Unstarted), []int{0, 1, 2, 3, 4}) || len(res.Interrupted) != 0 {
				t.Errorf("Stop = %+v, want 0..4 unstarted", res)
			}
			if got := r.sizes(); len(got) != 0 {
				t.Errorf("BatchHandler called %v", got)
			}
		})
	})

	t.Run("Stop interrupts a running call's failures, keeps its successes", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			in := make(chan struct{})
			h := setup(t, Config[item]{Workers: 1, QueueSize: 64, MaxBatch: 4,
				BatchHandler: func(ctx context.Context, vs []item, errs []error) {
					close(in)
					<-ctx.Done()
					for i, v := range vs {
						if v.id%2 == 0 {
							errs[i] = context.Cause(ctx)
						}
					}
				}})
			if _, err := h.submitBatch(context.Background(), span(0, 6, nil)); err != nil {
				t.Fatal(err)
			}
			<-in
			res := h.stop(time.Second, nil)
			if !slices.Equal(ids(res.Interrupted), []int{0, 2}) || !slices.Equal(ids(res.Unstarted), []int{4, 5}) {
				t.Errorf("Stop = interrupted %v, unstarted %v; want 0 2 and 4 5", ids(res.Interrupted), ids(res.Unstarted))
			}
			for _, id := range []int{1, 3} {
				if err, called := h.result(id); !called || err != nil {
					t.Errorf("item %d: result %v (called %v), want done", id, err, called)
				}
			}
		})
	})

	t.Run("stragglers of a call", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			release := make(chan struct{})
			in := make(chan struct{})
			h := setup(t, Config[item]{Workers: 1, QueueSize: 64, MaxBatch: 3,
				BatchHandler: func(context.Context, []item, []error) { close(in); <-release }})
			if _, err := h.submitBatch(context.Background(), span(0, 3, nil)); err != nil {
				t.Fatal(err)
			}
			<-in
			res := h.stop(time.Second, nil)
			if !slices.Equal(ids(res.Interrupted), []int{0, 1, 2}) || res.Stragglers != 3 {
				t.Errorf("Stop = %+v, want 0 1 2 stragglers", res)
			}
			close(release)
			h.p.waitLoops()
		})
	})

	t.Run("held: no call; a probe calls with one item", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var r batchRecorder
			h := setup(t, Config[item]{Workers: 2, QueueSize: 64, BatchHandler: r.handler, MaxBatch: 10, MaxWait: time.Millisecond})
			h.p.Hold()
			if _, err := h.submitBatch(context.Background(), span(0, 15, nil)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			synctest.Wait()
			if got := r.sizes(); len(got) != 0 {
				t.Fatalf("held pool called %v", got)
			}
			if !h.p.Probe() {
				t.Fatal("Probe found nothing ready")
			}
			synctest.Wait()
			if got := r.sizes(); !slices.Equal(got, []int{1}) {
				t.Fatalf("after Probe: calls %v, want one of 1", got)
			}
			h.p.Release()
			h.drain()
			if got := r.sizes(); !slices.Equal(got, []int{1, 10, 4}) {
				t.Errorf("calls %v, want 1 10 4", got)
			}
		})
	})

	t.Run("Drain waits for a filling batch", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var r batchRecorder
			h := setup(t, Config[item]{Workers: 1, QueueSize: 64, BatchHandler: r.handler, MaxBatch: 10, MaxWait: 5 * time.Second})
			h.mustSubmit(item{id: 1})
			began := time.Now()
			h.drain()
			if took := time.Since(began); took != 5*time.Second || !slices.Equal(r.sizes(), []int{1}) {
				t.Errorf("Drain returned after %s with calls %v, want 5s and [1]", took, r.sizes())
			}
		})
	})

	t.Run("Remove takes items out of a filling batch", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var r batchRecorder
			h := setup(t, Config[item]{Workers: 1, QueueSize: 64, BatchHandler: r.handler, MaxBatch: 10, MaxWait: time.Second})
			if _, err := h.submitBatch(context.Background(), span(0, 6, nil)); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if got := h.remove(func(it item) bool { return it.id%2 == 0 }); !slices.Equal(ids(got), []int{0, 2, 4}) {
				t.Errorf("Remove = %v, want 0 2 4", ids(got))
			}
			h.drain()
			r.mu.Lock()
			defer r.mu.Unlock()
			if !slices.Equal(slices.Concat(r.calls...), []int{1, 3, 5}) {
				t.Errorf("calls %v, want [1 3 5]", r.calls)
			}
		})
	})
}
