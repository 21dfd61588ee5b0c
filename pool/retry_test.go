package pool

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var errRetry = errors.New("retry me")

// start is one handler run: which item, which of its attempts (from 1),
// and when, on the clock of the test's bubble.
type start struct {
	id, attempt int
	at          time.Duration
}

// runs records handler runs in a synctest bubble, where the clock is
// exact: at is the time since the recorder was made.
type runs struct {
	t0      time.Time
	mu      sync.Mutex
	perItem map[int]int
	ch      chan start
}

func newRuns() *runs {
	return &runs{t0: time.Now(), perItem: make(map[int]int), ch: make(chan start, 64)}
}

// begin records a run of it and returns its attempt number.
func (r *runs) begin(it item) int {
	r.mu.Lock()
	r.perItem[it.id]++
	n := r.perItem[it.id]
	r.mu.Unlock()
	r.ch <- start{id: it.id, attempt: n, at: time.Since(r.t0)}
	return n
}

// next receives the next run. Waiting for it lets the bubble's clock move
// on to the next timer, however far; if nothing is left to run, synctest
// reports the deadlock.
func (r *runs) next() start { return <-r.ch }

// failFirst fails each item's first attempt with errRetry.
func (r *runs) failFirst(_ context.Context, it item) error {
	if r.begin(it) == 1 {
		return errRetry
	}
	return nil
}

// retryAfter retries errRetry after d, and nothing else.
func retryAfter(d time.Duration) func(item, error) (time.Duration, bool) {
	return func(_ item, err error) (time.Duration, bool) {
		return d, errors.Is(err, errRetry)
	}
}

func TestRetry(t *testing.T) {
	t.Parallel()

	t.Run("runs again after the delay", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			r := newRuns()
			type call struct {
				it  item
				err error
			}
			var calls []call
			h := setup(t, Config[item]{Workers: 1, Handler: r.failFirst,
				RetryFunc: func(it item, err error) (time.Duration, bool) {
					calls = append(calls, call{it, err}) // one worker: no race
					return time.Second, true
				},
			})
			h.mustSubmit(item{id: 1, key: "x"})
			synctest.Wait()
			if st := h.p.Stats(); st != (Stats{Waiting: 1, Retried: 1}) {
				t.Errorf("Stats while waiting = %+v, want 1 waiting, 1 retried", st)
			}
			if _, called := h.result(1); called {
				t.Error("ResultFunc called for a retried attempt")
			}
			got := []start{r.next(), r.next()}
			if want := []start{{1, 1, 0}, {1, 2, time.Second}}; !slices.Equal(got, want) {
				t.Errorf("runs = %v, want %v", got, want)
			}
			synctest.Wait()
			if err, called := h.result(1); !called || err != nil {
				t.Errorf("ResultFunc: called %v with %v, want called with nil", called, err)
			}
			if h.calls != 1 {
				t.Errorf("ResultFunc called %d times, want once", h.calls)
			}
			if st := h.p.Stats(); st != (Stats{Succeeded: 1, Retried: 1}) {
				t.Errorf("Stats = %+v, want 1 succeeded, 1 retried", st)
			}
			if len(calls) != 1 || calls[0].it != (item{id: 1, key: "x"}) || !errors.Is(calls[0].err, errRetry) {
				t.Errorf("RetryFunc calls = %v, want one with item 1 and errRetry", calls)
			}
		})
	})

	t.Run("RetryFunc may update the item", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			type job struct{ attempts int }
			type result struct {
				attempts int
				err      error
			}
			results := make(chan result, 1)
			p, err := New(Config[*job]{Name: "jobs", Workers: 1, QueueSize: 1,
				Handler: func(_ context.Context, j *job) error {
					if j.attempts < 2 {
						return errRetry
					}
					return nil
				},
				RetryFunc: func(j *job, _ error) (time.Duration, bool) {
					j.attempts++
					return time.Duration(j.attempts) * time.Second, true
				},
				ResultFunc: func(j *job, err error) { results <- result{j.attempts, err} },
			})
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			if err := p.Submit(context.Background(), &job{}); err != nil {
				t.Fatal(err)
			}
			if got := <-results; got != (result{2, nil}) {
				t.Errorf("result = %+v, want done after 2 retries", got)
			}
			if took := time.Since(t0); took != 3*time.Second {
				t.Errorf("done after %v, want 1s + 2s of delays", took)
			}
			if st := p.Stats(); st.Retried != 2 || st.Failed != 0 {
				t.Errorf("Stats = %+v, want 2 retried, none failed", st)
			}
			p.Stop(0, nil)
		})
	})

	t.Run("waiting holds no worker and goes first when ready", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			r := newRuns()
			release := make(chan struct{})
			h := setup(t, Config[item]{Workers: 1, RetryFunc: retryAfter(time.Hour),
				Handler: func(ctx context.Context, it item) error {
					if it.id == 2 {
						r.begin(it)
						<-release
						return nil
					}
					return r.failFirst(ctx, it)
				},
			})
			h.mustSubmit(item{id: 1}, item{id: 2}, item{id: 3})
			// Item 2 runs on the only worker while item 1 waits.
			if got, want := []start{r.next(), r.next()}, []start{{1, 1, 0}, {2, 1, 0}}; !slices.Equal(got, want) {
				t.Fatalf("runs = %v, want %v", got, want)
			}
			if st := h.p.Stats(); st != (Stats{Queued: 1, Waiting: 1, Running: 1, Retried: 1}) {
				t.Errorf("Stats = %+v, want 1 queued, 1 waiting, 1 running", st)
			}
			// The delay ends while 2 still runs: 1 is ready, ahead of 3.
			time.Sleep(time.Hour)
			synctest.Wait()
			if st := h.p.Stats(); st != (Stats{Queued: 2, Running: 1, Retried: 1}) {
				t.Errorf("Stats after the delay = %+v, want 2 queued, 1 running", st)
			}
			close(release)
			if got, want := []start{r.next(), r.next()}, []start{{1, 2, time.Hour}, {3, 1, time.Hour}}; !slices.Equal(got, want) {
				t.Errorf("runs after the delay = %v, want %v", got, want)
			}
			h.drain()
		})
	})

	t.Run("ordered: the key waits, other keys flow", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			r := newRuns()
			h := setup(t, Config[item]{Workers: 1, Ordered: true, KeyFunc: keyOf,
				RetryFunc: retryAfter(time.Minute),
				Handler: func(ctx context.Context, it item) error {
					if it.id == 1 {
						return r.failFirst(ctx, it)
					}
					r.begin(it)
					return nil
				},
			})
			h.mustSubmit(item{id: 1, key: "k"}, item{id: 2, key: "k"}, item{id: 3, key: "j"},
				item{id: 4, key: "k"}, item{id: 5, key: "j"})
			got := []start{r.next(), r.next(), r.next()}
			if want := []start{{1, 1, 0}, {3, 1, 0}, {5, 1, 0}}; !slices.Equal(got, want) {
				t.Errorf("runs = %v, want %v", got, want)
			}
			synctest.Wait()
			// The worker is free, yet 2 and 4 stay behind their key.
			if st := h.p.Stats(); st != (Stats{Queued: 2, Waiting: 1, Succeeded: 2, Retried: 1}) {
				t.Errorf("Stats = %+v, want 2 queued behind k, 1 waiting, 2 succeeded", st)
			}
			got = []start{r.next(), r.next(), r.next()}
			if want := []start{{1, 2, time.Minute}, {2, 1, time.Minute}, {4, 1, time.Minute}}; !slices.Equal(got, want) {
				t.Errorf("runs after the delay = %v, want %v", got, want)
			}
			h.drain()
			if st := h.p.Stats(); st != (Stats{Succeeded: 5, Retried: 1}) {
				t.Errorf("Stats = %+v, want 5 succeeded, 1 retried", st)
			}
		})
	})

	t.Run("drain leaves waiting items to stop", func(t *testing.T) {
		t.Parallel()
		for _, ordered := range []bool{false, true} {
			cfg := Config[item]{Workers: 1, RetryFunc: retryAfter(time.Hour),
				Handler: func(_ context.Context, it item) error {
					if it.id <= 2 {
						return errRetry // 1 and 2 wait, always
					}
					return nil
				},
			}
			if ordered {
				cfg.Ordered, cfg.KeyFunc = true, keyOf
			}
			h := setup(t, cfg)
			// Ordered: 3 and 5 queue behind the waiting keys, 4 runs.
			h.mustSubmit(item{id: 1, key: "k"}, item{id: 2, key: "l"}, item{id: 3, key: "k"},
				item{id: 4, key: "j"}, item{id: 5, key: "l"})
			h.drain()
			want := Stats{Waiting: 2, Succeeded: 3, Retried: 2}
			if ordered {
				want = Stats{Queued: 2, Waiting: 2, Succeeded: 1, Retried: 2}
			}
			if st := h.p.Stats(); st != want {
				t.Errorf("ordered=%v: Stats after drain = %+v, want %+v", ordered, st, want)
			}
			res := h.stop(waitLimit, nil)
			wantUnstarted := []int{}
			if ordered {
				wantUnstarted = []int{3, 5}
			}
			if got := ids(res.Waiting); !slices.Equal(got, []int{1, 2}) {
				t.Errorf("ordered=%v: Waiting = %v, want [1 2]", ordered, got)
			}
			if got := ids(res.Unstarted); !slices.Equal(got, wantUnstarted) || len(res.Interrupted) != 0 {
				t.Errorf("ordered=%v: Unstarted = %v, Interrupted = %v; want %v, none", ordered, got, ids(res.Interrupted), wantUnstarted)
			}
		}
	})

	t.Run("drain waits for an item whose delay ends", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			r := newRuns()
			release := make(chan struct{})
			h := setup(t, Config[item]{Workers: 1, RetryFunc: retryAfter(time.Second),
				Handler: func(ctx context.Context, it item) error {
					if it.id == 2 {
						r.begin(it)
						<-release
						return nil
					}
					return r.failFirst(ctx, it)
				},
			})
			h.mustSubmit(item{id: 1}, item{id: 2})
			r.next()
			r.next() // 2 runs, 1 waits
			drained := make(chan error, 1)
			go func() { drained <- h.p.Drain(context.Background()) }()
			time.Sleep(time.Second) // 1 is ready again, behind the running 2
			synctest.Wait()
			select {
			case err := <-drained:
				t.Fatalf("Drain returned %v while 2 ran", err)
			default:
			}
			close(release)
			if err := <-drained; err != nil {
				t.Fatalf("Drain: %v", err)
			}
			if err, called := h.result(1); !called || err != nil {
				t.Errorf("Drain returned before item 1 was done: called %v, err %v", called, err)
			}
		})
	})

	t.Run("waiting items count against QueueSize", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			release := make(chan struct{})
			started := make(chan struct{}, 2)
			var attempts [4]atomic.Int32
			h := setup(t, Config[item]{Workers: 2, QueueSize: 1, RetryFunc: retryAfter(time.Hour),
				Handler: func(_ context.Context, it item) error {
					if it.id > 2 {
						return nil
					}
					if attempts[it.id].Add(1) > 1 {
						return nil
					}
					started <- struct{}{}
					<-release
					return errRetry
				},
			})
			t0 := time.Now()
			h.mustSubmit(item{id: 1}, item{id: 2})
			<-started
			<-started
			h.mustSubmit(item{id: 3}) // the one free slot
			submitted := make(chan error, 1)
			go func() { submitted <- h.submit(context.Background(), item{id: 4}) }()
			synctest.Wait() // item 4 waits for room
			// 1 and 2 fail and wait; 3 runs. The pool holds two waiting
			// items, over its QueueSize of 1: item 4 must go on waiting.
			close(release)
			synctest.Wait()
			select {
			case err := <-submitted:
				t.Fatalf("Submit returned %v while 2 items waited in a pool of QueueSize 1", err)
			default:
			}
			if st := h.p.Stats(); st != (Stats{Waiting: 2, Succeeded: 1, Retried: 2}) {
				t.Errorf("Stats = %+v, want 2 waiting, 1 succeeded", st)
			}
			// Room comes back only once both have run again.
			if err := <-submitted; err != nil {
				t.Fatalf("Submit: %v", err)
			}
			if took := time.Since(t0); took != time.Hour {
				t.Errorf("item 4 accepted after %v, want after the delay (1h)", took)
			}
			h.drain()
			if st := h.p.Stats(); st != (Stats{Succeeded: 4, Retried: 2}) {
				t.Errorf("Stats = %+v, want 4 succeeded, 2 retried", st)
			}
		})
	})

	t.Run("a timer firing as stop begins does not run the item", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var runs atomic.Int32
			h := setup(t, Config[item]{Workers: 1, RetryFunc: retryAfter(time.Second),
				Handler: func(context.Context, item) error {
					runs.Add(1)
					return errRetry
				},
			})
			firing := make(chan struct{})
			proceed := make(chan struct{})
			h.p.testHookWake = func() {
				firing <- struct{}{}
				<-proceed
			}
			h.mustSubmit(item{id: 1})
			<-firing // the delay is over; the callback has not taken the lock
			stopped := make(chan StopResult[item], 1)
			go func() { stopped <- h.stop(waitLimit, nil) }()
			synctest.Wait()
			select {
			case res := <-stopped:
				t.Fatalf("Stop returned %+v before the timer callback did", res)
			default:
			}
			close(proceed)
			res := <-stopped
			if got := ids(res.Waiting); !slices.Equal(got, []int{1}) || len(res.Unstarted)+len(res.Interrupted) != 0 {
				t.Errorf("Stop = %+v, want item 1 in Waiting only", res)
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("handler ran %d times, want once", n)
			}
		})
	})

	t.Run("sent back after stop began is waiting", func(t *testing.T) {
		t.Parallel()
		inRetry := make(chan struct{})
		release := make(chan struct{})
		h := setup(t, Config[item]{Workers: 1,
			Handler: func(context.Context, item) error { return errRetry },
			// Blocking here breaks RetryFunc's contract on purpose: it
			// holds the attempt between "handler returned" and "retry
			// decided" while Stop begins.
			RetryFunc: func(item, error) (time.Duration, bool) {
				close(inRetry)
				<-release
				return time.Nanosecond, true
			},
		})
		h.mustSubmit(item{id: 1}, item{id: 2})
		<-inRetry
		stopped := make(chan StopResult[item], 1)
		go func() { stopped <- h.stop(waitLimit, nil) }()
		<-h.p.stopCh
		close(release)
		res := <-stopped
		if got := ids(res.Waiting); !slices.Equal(got, []int{1}) {
			t.Errorf("Waiting = %v, want [1]", got)
		}
		if got := ids(res.Unstarted); !slices.Equal(got, []int{2}) || len(res.Interrupted) != 0 {
			t.Errorf("Unstarted = %v, Interrupted = %v; want [2], none", got, ids(res.Interrupted))
		}
	})

	t.Run("not called for an interrupted item", func(t *testing.T) {
		t.Parallel()
		started := make(chan struct{})
		var retries atomic.Int32
		h := setup(t, Config[item]{
			Handler: func(ctx context.Context, _ item) error {
				close(started)
				<-ctx.Done()
				return context.Cause(ctx)
			},
			RetryFunc: func(item, error) (time.Duration, bool) {
				retries.Add(1)
				return 0, true
			},
		})
		h.mustSubmit(item{id: 1})
		<-started
		res := h.stop(waitLimit, nil)
		if got := ids(res.Interrupted); !slices.Equal(got, []int{1}) || len(res.Waiting) != 0 {
			t.Errorf("Stop = %+v, want item 1 interrupted", res)
		}
		if n := retries.Load(); n != 0 {
			t.Errorf("RetryFunc called %d times for an interrupted item", n)
		}
	})

	t.Run("not retried is failed", func(t *testing.T) {
		t.Parallel()
		errFatal := errors.New("fatal")
		h := setup(t, Config[item]{
			Handler:   func(context.Context, item) error { return errFatal },
			RetryFunc: retryAfter(time.Hour),
		})
		h.mustSubmit(item{id: 1})
		h.drain()
		if err, _ := h.result(1); !errors.Is(err, errFatal) {
			t.Errorf("result = %v, want fatal", err)
		}
		if st := h.p.Stats(); st != (Stats{Failed: 1}) {
			t.Errorf("Stats = %+v, want 1 failed", st)
		}
	})
}
