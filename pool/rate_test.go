package pool

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// starts records when each handler call began, on the bubble's clock.
type starts struct {
	mu    sync.Mutex
	begin time.Time
	at    []time.Duration
	sizes []int // items per call
}

func (s *starts) note(n int) {
	s.mu.Lock()
	s.at = append(s.at, time.Since(s.begin))
	s.sizes = append(s.sizes, n)
	s.mu.Unlock()
}

// checkPace fails the test when more than burst+rate×t items started by
// any start time t (each call's items count at its start), and returns the
// time of the last start.
func checkPace(t *testing.T, s *starts, rate float64, burst int) time.Duration {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.IsSorted(s.at) {
		t.Fatalf("starts out of order: %v", s.at)
	}
	n := 0
	for i, at := range s.at {
		n += s.sizes[i]
		if most := float64(burst) + rate*at.Seconds() + 1e-6; float64(n) > most {
			t.Errorf("%d items started by %s; the limit allows %.2f", n, at, most)
		}
	}
	return s.at[len(s.at)-1]
}

// TestRate checks Config.Rate in a bubble, where the limiter's clock is
// exact: the starts keep to the rate and burst across the workers, and
// the backlog is not held below the rate either.
func TestRate(t *testing.T) {
	t.Parallel()
	t.Run("handler", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			s := &starts{begin: time.Now()}
			h := setup(t, Config[item]{Workers: 4, QueueSize: 64, Rate: 10, Burst: 2,
				Handler: func(context.Context, item) error { s.note(1); return nil }})
			for i := range 40 {
				h.mustSubmit(item{id: i})
			}
			h.drain()
			last := checkPace(t, s, 10, 2)
			// 38 tokens after the burst's 2, at 10 a second.
			if want := 3800 * time.Millisecond; last < want-time.Millisecond || last > want+time.Millisecond {
				t.Errorf("last start at %s, want %s", last, want)
			}
		})
	})

	t.Run("batch counts items", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			s := &starts{begin: time.Now()}
			h := setup(t, Config[item]{Workers: 2, QueueSize: 64, Rate: 20, Burst: 5, MaxBatch: 10,
				BatchHandler: func(_ context.Context, vs []item, _ []error) { s.note(len(vs)) }})
			for i := range 50 {
				h.mustSubmit(item{id: i})
			}
			h.drain()
			last := checkPace(t, s, 20, 5)
			if most := slices.Max(s.sizes); most > 5 {
				t.Errorf("a call of %d items; Burst is 5", most)
			}
			if want := 2250 * time.Millisecond; last < want-time.Millisecond || last > want+time.Millisecond {
				t.Errorf("last start at %s, want %s (45 items after the burst at 20/s)", last, want)
			}
		})
	})

	t.Run("retry takes a token", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			s := &starts{begin: time.Now()}
			failed := false
			h := setup(t, Config[item]{Workers: 2, Rate: 4, Burst: 1,
				Handler: func(context.Context, item) error {
					s.note(1)
					if !failed {
						failed = true // one worker: no race
						return errors.New("once")
					}
					return nil
				},
				RetryFunc: func(item, error) (time.Duration, bool) { return 0, true }})
			h.mustSubmit(item{id: 1})
			h.drain()
			checkPace(t, s, 4, 1)
			if want := []time.Duration{0, 250 * time.Millisecond}; !slices.Equal(s.at, want) {
				t.Errorf("attempts started at %v, want %v", s.at, want)
			}
		})
	})

	t.Run("stop hands back the paced items as unstarted", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			s := &starts{begin: time.Now()}
			h := setup(t, Config[item]{Workers: 3, QueueSize: 7, Rate: 0.5, Burst: 1,
				Handler: func(context.Context, item) error { s.note(1); return nil }})
			for i := range 8 {
				h.mustSubmit(item{id: i})
			}
			// The queue is full while the loops wait for tokens: a Submit
			// waits for room.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if err := h.submit(ctx, item{id: 8}); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Submit into the queue of paced items = %v, want it to wait for room", err)
			}
			cancel()
			if _, ok := h.result(0); !ok {
				t.Fatal("the burst's item did not run")
			}
			began := time.Now()
			res := h.stop(time.Second, nil)
			if took := time.Since(began); took != 0 {
				t.Errorf("Stop took %s with loops waiting for tokens, want at once", took)
			}
			if got := ids(res.Unstarted); !slices.Equal(got, []int{1, 2, 3, 4, 5, 6, 7}) || len(res.Interrupted) != 0 {
				t.Errorf("Stop handed back unstarted %v, interrupted %v; want 1..7 unstarted", got, ids(res.Interrupted))
			}
			if st := h.p.Stats(); st.Running != 0 {
				t.Errorf("Stats after Stop = %+v", st)
			}
		})
	})
}

func TestRateConfig(t *testing.T) {
	t.Parallel()
	handler := func(context.Context, int) error { return nil }
	for _, tc := range []struct {
		rate  float64
		burst int
		want  string
	}{
		{-1, 1, `pool "orders": Rate must be a finite number >= 0, got -1`},
		{math.NaN(), 1, `pool "orders": Rate must be a finite number >= 0, got NaN`},
		{math.Inf(1), 1, `pool "orders": Rate must be a finite number >= 0, got +Inf`},
		{5, 0, `pool "orders": Burst must be > 0 with Rate, got 0`},
		{5, -2, `pool "orders": Burst must be > 0 with Rate, got -2`},
		{0, 3, `pool "orders": Burst needs Rate`},
	} {
		_, err := New(Config[int]{Name: "orders", Workers: 1, QueueSize: 1, Handler: handler, Rate: tc.rate, Burst: tc.burst})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Rate %v, Burst %d: error %v, want %q", tc.rate, tc.burst, err, tc.want)
		}
	}
}
