package pool

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// No ignore list: a stopped pool leaves no goroutine behind, and the
	// straggler tests release their handlers and wait for the workers.
	goleak.VerifyTestMain(m)
}

// item is what the tests submit: a unique id, and a key for Ordered pools.
type item struct {
	id  int
	key string
}

func keyOf(it item) string { return it.key }

// harness wraps a pool under test and records every outcome, so that each
// test's cleanup can check the accounting: every accepted item is reported
// exactly once, by ResultFunc or by Stop, and every retry is counted.
type harness struct {
	t *testing.T
	p *Pool[item]

	mu        sync.Mutex
	submitted []int
	results   map[int]error // ResultFunc calls
	calls     int           // ResultFunc calls, duplicates included
	retries   uint64        // RetryFunc calls that asked for a retry
	stops     []StopResult[item]
}

// waitLimit guards against hangs: a test that reaches it has failed, it
// never paces a test.
const waitLimit = 10 * time.Second

// setup makes a pool from cfg, filling Name, Workers, QueueSize and
// Handler when zero, wrapping ResultFunc to record results and RetryFunc,
// if set, to count retries.
func setup(t *testing.T, cfg Config[item]) *harness {
	t.Helper()
	h := &harness{t: t, results: make(map[int]error)}
	if cfg.Name == "" {
		cfg.Name = "test"
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = 16
	}
	if cfg.Handler == nil && cfg.BatchHandler == nil {
		cfg.Handler = func(context.Context, item) error { return nil }
	}
	user := cfg.ResultFunc
	cfg.ResultFunc = func(it item, err error) {
		if user != nil {
			user(it, err)
		}
		h.mu.Lock()
		h.results[it.id] = err
		h.calls++
		h.mu.Unlock()
	}
	if retry := cfg.RetryFunc; retry != nil {
		cfg.RetryFunc = func(it item, err error) (time.Duration, bool) {
			after, ok := retry(it, err)
			if ok {
				h.mu.Lock()
				h.retries++
				h.mu.Unlock()
			}
			return after, ok
		}
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.p = p
	t.Cleanup(h.check)
	return h
}

// submit submits it and records it when accepted.
func (h *harness) submit(ctx context.Context, it item) error {
	err := h.p.Submit(ctx, it)
	if err == nil {
		h.mu.Lock()
		h.submitted = append(h.submitted, it.id)
		h.mu.Unlock()
	}
	return err
}

// submitBatch submits its with SubmitBatch and records the prefix
// accepted.
func (h *harness) submitBatch(ctx context.Context, its []item) (int, error) {
	n, err := h.p.SubmitBatch(ctx, its)
	if n < 0 || n > len(its) || (err == nil) != (n == len(its)) {
		h.t.Errorf("SubmitBatch of %d items: %d accepted, err %v", len(its), n, err)
	}
	h.mu.Lock()
	for _, it := range its[:n] {
		h.submitted = append(h.submitted, it.id)
	}
	h.mu.Unlock()
	return n, err
}

// mustSubmit submits items that must be accepted at once.
func (h *harness) mustSubmit(items ...item) {
	h.t.Helper()
	for _, it := range items {
		if err := h.submit(context.Background(), it); err != nil {
			h.t.Fatalf("Submit(%v): %v", it, err)
		}
	}
}

// stop stops the pool and records what it handed back.
func (h *harness) stop(grace time.Duration, cause error) StopResult[item] {
	res := h.p.Stop(grace, cause)
	h.mu.Lock()
	h.stops = append(h.stops, res)
	h.mu.Unlock()
	return res
}

// drain waits for the pool to be empty, failing the test after waitLimit.
func (h *harness) drain() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := h.p.Drain(ctx); err != nil {
		h.t.Fatalf("Drain: %v", err)
	}
}

// check stops the pool if the test did not, waits for the worker loops
// (stragglers included, so tests must release theirs) and checks that every
// accepted item was reported exactly once and that Stats agrees.
func (h *harness) check() {
	t := h.t
	h.stop(waitLimit, errors.New("test cleanup"))
	h.p.waitLoops()

	h.mu.Lock()
	defer h.mu.Unlock()
	seen := make(map[int]string)
	note := func(id int, how string) {
		if prev, dup := seen[id]; dup {
			t.Errorf("item %d reported twice: %s and %s", id, prev, how)
		}
		seen[id] = how
	}
	for id := range h.results {
		note(id, "result")
	}
	if h.calls != len(h.results) {
		t.Errorf("ResultFunc called %d times for %d items", h.calls, len(h.results))
	}
	for _, res := range h.stops {
		for _, it := range res.Unstarted {
			note(it.id, "unstarted")
		}
		for _, it := range res.Waiting {
			note(it.id, "waiting")
		}
		for _, it := range res.Interrupted {
			note(it.id, "interrupted")
		}
	}
	for _, id := range h.submitted {
		if _, ok := seen[id]; !ok {
			t.Errorf("item %d accepted but never reported", id)
		}
		delete(seen, id)
	}
	for id, how := range seen {
		t.Errorf("item %d reported (%s) but never accepted", id, how)
	}
	st := h.p.Stats()
	var failed uint64
	for _, err := range h.results {
		if err != nil {
			failed++
		}
	}
	if st.Succeeded+st.Failed != uint64(len(h.results)) || st.Failed != failed {
		t.Errorf("Stats %+v, want %d results of which %d failed", st, len(h.results), failed)
	}
	if st.Retried != h.retries {
		t.Errorf("Stats %+v, want %d retried", st, h.retries)
	}
	if st.Queued != 0 || st.Waiting != 0 || st.Running != 0 {
		t.Errorf("Stats after stop %+v, want nothing queued, waiting or running", st)
	}
	checkFree(t, h.p)
}

// checkFree checks that every entry p keeps for reuse is as a new one:
// on no list, with no item, key or sequence, and queued. recycleLocked
// relies on the lists having unlinked an entry before it is kept.
func checkFree[T any](t *testing.T, p *Pool[T]) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, e := range p.free {
		if e.prev != nil || e.next != nil || e.readyNext != nil || e.keyNext != nil {
			t.Errorf("free entry %d of %d is still linked: prev %p, next %p, readyNext %p, keyNext %p", i, len(p.free), e.prev, e.next, e.readyNext, e.keyNext)
		}
		if !reflect.ValueOf(&e.v).Elem().IsZero() || e.key != 0 || e.seq != 0 || e.state.Load() != stateQueued {
			t.Errorf("free entry %d of %d is not reset: item %v, key %d, seq %d, state %d", i, len(p.free), e.v, e.key, e.seq, e.state.Load())
		}
	}
}

// result returns the error ResultFunc got for id and whether it was called.
func (h *harness) result(id int) (error, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	err, ok := h.results[id]
	return err, ok
}

// ids lists the ids of items.
func ids(items []item) []int {
	out := make([]int, len(items))
	for i, it := range items {
		out[i] = it.id
	}
	return out
}

// gate is a handler that reports each start on started and blocks until
// release is closed. It ignores ctx.
type gate struct {
	started chan item
	release chan struct{}
}

func newGate() *gate {
	return &gate{started: make(chan item, 128), release: make(chan struct{})}
}

func (g *gate) handler(_ context.Context, it item) error {
	g.started <- it
	<-g.release
	return nil
}

// wait receives the next start, failing after waitLimit.
func (g *gate) wait(t *testing.T) item {
	t.Helper()
	select {
	case it := <-g.started:
		return it
	case <-time.After(waitLimit):
		t.Fatal("no handler started")
		return item{}
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	handler := func(context.Context, int) error { return nil }

	t.Run("valid", func(t *testing.T) {
		t.Parallel()
		p, err := New(Config[int]{Name: "orders", Workers: 1, QueueSize: 1, Handler: handler})
		if err != nil {
			t.Fatal(err)
		}
		if p.Name() != "orders" {
			t.Errorf("Name() = %q", p.Name())
		}
		if res := p.Stop(0, nil); len(res.Unstarted)+len(res.Interrupted) != 0 {
			t.Errorf("Stop of an unused pool = %+v", res)
		}
	})

	t.Run("every problem reported", func(t *testing.T) {
		t.Parallel()
		_, err := New(Config[int]{Ordered: true})
		if err == nil {
			t.Fatal("New accepted an empty config")
		}
		for _, want := range []string{
			`pool "": Name is required`,
			`pool "": Workers must be > 0, got 0`,
			`pool "": QueueSize must be > 0, got 0`,
			`pool "": KeyFunc is required when Ordered`,
			`pool "": Handler or BatchHandler is required`,
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
	})

	t.Run("errors name the pool", func(t *testing.T) {
		t.Parallel()
		_, err := New(Config[int]{Name: "orders", Workers: 0, QueueSize: -1, Handler: handler, KeyFunc: func(int) string { return "" }})
		want := []string{
			`pool "orders": Workers must be > 0, got 0`,
			`pool "orders": QueueSize must be > 0, got -1`,
			`pool "orders": KeyFunc is set but Ordered is false`,
		}
		if err == nil || err.Error() != strings.Join(want, "\n") {
			t.Errorf("error = %v, want %q", err, want)
		}
	})
}

func TestSubmitBound(t *testing.T) {
	t.Parallel()

	// full makes a pool with Workers=1 QueueSize=2 holding one running and
	// two queued items.
	full := func(t *testing.T) (*harness, *gate) {
		g := newGate()
		h := setup(t, Config[item]{Workers: 1, QueueSize: 2, Handler: g.handler})
		t.Cleanup(func() { close(g.release) }) // runs before h.check
		h.mustSubmit(item{id: 1})
		g.wait(t) // item 1 started: its slot is free again
		h.mustSubmit(item{id: 2}, item{id: 3})
		if st := h.p.Stats(); st.Queued != 2 || st.Running != 1 {
			t.Fatalf("Stats = %+v, want 2 queued, 1 running", st)
		}
		return h, g
	}

	t.Run("fourth submit waits for ctx", func(t *testing.T) {
		t.Parallel()
		h, _ := full(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.submit(ctx, item{id: 4}) }()
		select {
		case err := <-done:
			t.Fatalf("fourth Submit returned %v while the queue was full", err)
		default:
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Submit = %v, want context.Canceled", err)
		}
		if st := h.p.Stats(); st.Queued != 2 {
			t.Errorf("Stats = %+v after a refused Submit, want 2 queued", st)
		}
	})

	t.Run("fourth submit waits for room", func(t *testing.T) {
		t.Parallel()
		h, g := full(t)
		done := make(chan error, 1)
		go func() { done <- h.submit(context.Background(), item{id: 4}) }()
		g.release <- struct{}{} // item 1 returns, item 2 starts
		if err := <-done; err != nil {
			t.Fatalf("Submit = %v once there was room", err)
		}
	})

	t.Run("fourth submit fails when stop begins", func(t *testing.T) {
		t.Parallel()
		h, g := full(t)
		done := make(chan error, 1)
		go func() { done <- h.submit(context.Background(), item{id: 4}) }()
		stopped := make(chan StopResult[item], 1)
		go func() { stopped <- h.stop(waitLimit, nil) }()
		if err := <-done; !errors.Is(err, ErrStopped) {
			t.Fatalf("Submit = %v, want ErrStopped", err)
		}
		g.release <- struct{}{} // item 1 ignores ctx; let it return nil
		res := <-stopped
		if got := ids(res.Unstarted); !slices.Equal(got, []int{2, 3}) {
			t.Errorf("Unstarted = %v, want [2 3]", got)
		}
		if err := h.submit(context.Background(), item{id: 5}); !errors.Is(err, ErrStopped) {
			t.Errorf("Submit after Stop = %v, want ErrStopped", err)
		}
	})
}

func TestDrain(t *testing.T) {
	t.Parallel()

	t.Run("empty pool", func(t *testing.T) {
		t.Parallel()
		h := setup(t, Config[item]{})
		h.drain()
	})

	t.Run("returns when everything is handled", func(t *testing.T) {
		t.Parallel()
		h := setup(t, Config[item]{Workers: 3, QueueSize: 5})
		for i := range 100 {
			h.mustSubmit(item{id: i})
		}
		h.drain()
		if st := h.p.Stats(); st != (Stats{Succeeded: 100}) {
			t.Errorf("Stats = %+v, want 100 succeeded", st)
		}
		if len(h.results) != 100 {
			t.Errorf("%d results, want 100", len(h.results))
		}
	})

	t.Run("returns ctx cause while a handler is blocked", func(t *testing.T) {
		t.Parallel()
		g := newGate()
		h := setup(t, Config[item]{Handler: g.handler})
		t.Cleanup(func() { close(g.release) })
		h.mustSubmit(item{id: 1})
		g.wait(t)
		cause := errors.New("drain timeout")
		ctx, cancel := context.WithCancelCause(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.p.Drain(ctx) }()
		cancel(cause)
		if err := <-done; !errors.Is(err, cause) {
			t.Errorf("Drain = %v, want %v", err, cause)
		}
	})
}

// TestEntrySize keeps an entry of a pointer item at 64 bytes, a size
// class of its own: it was 72, rounded up to 80, while it kept the
// ordering key's string instead of its hash.
func TestEntrySize(t *testing.T) {
	if got := unsafe.Sizeof(entry[*int]{}); got != 64 {
		t.Errorf("entry of a pointer item is %d bytes, want 64", got)
	}
}
