package pool

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestSubmitFirst: with the pool full and a Submit waiting, SubmitFirst
// is admitted at once into its own lane (QueueSize over the bound), and
// once that lane is full too it waits ahead of the waiting Submits; items
// keep their order once accepted and, in an Ordered pool, their key's
// order. A waiting SubmitFirst gives up with its ctx.
func TestSubmitFirst(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var (
			mu      sync.Mutex
			started []int
		)
		h := setup(t, Config[item]{Workers: 1, QueueSize: 2, Ordered: true, KeyFunc: keyOf,
			Handler: func(_ context.Context, it item) error {
				mu.Lock()
				started = append(started, it.id)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				return nil
			}})
		h.mustSubmit(item{id: 1, key: "a"})
		synctest.Wait() // 1 runs
		h.mustSubmit(item{id: 2, key: "b"}, item{id: 3, key: "c"})

		var wg sync.WaitGroup
		wg.Go(func() {
			if err := h.submit(t.Context(), item{id: 4, key: "x"}); err != nil {
				t.Errorf("Submit 4: %v", err)
			}
		})
		synctest.Wait() // 4 waits for room
		first := func(ctx context.Context, it item) error {
			err := h.p.SubmitFirst(ctx, it)
			if err == nil {
				h.mu.Lock()
				h.submitted = append(h.submitted, it.id)
				h.mu.Unlock()
			}
			return err
		}
		// Its lane has room: admitted at once, 10 behind 1 of its key.
		for _, it := range []item{{id: 10, key: "a"}, {id: 11, key: "y"}} {
			if err := first(t.Context(), it); err != nil {
				t.Fatalf("SubmitFirst %d: %v", it.id, err)
			}
		}
		if st := h.p.Stats(); st.Queued != 4 || st.Running != 1 {
			t.Fatalf("Stats = %+v, want 4 queued, 1 running", st)
		}
		// The lane is full: 12 waits, ahead of 4 and of 5 after it.
		wg.Go(func() {
			if err := first(t.Context(), item{id: 12, key: "z"}); err != nil {
				t.Errorf("SubmitFirst 12: %v", err)
			}
		})
		synctest.Wait()
		wg.Go(func() {
			if err := h.submit(t.Context(), item{id: 5, key: "x"}); err != nil {
				t.Errorf("Submit 5: %v", err)
			}
		})
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		gaveUp := make(chan error, 1)
		go func() { gaveUp <- first(ctx, item{id: 13, key: "z"}) }()
		synctest.Wait()
		cancel()
		if err := <-gaveUp; !errors.Is(err, context.Canceled) {
			t.Errorf("waiting SubmitFirst after its ctx ended = %v, want context.Canceled", err)
		}
		wg.Wait()
		if err := h.p.Drain(t.Context()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []int{1, 2, 3, 10, 11, 12, 4, 5}; !slices.Equal(started, want) {
			t.Errorf("started %v, want %v", started, want)
		}
		h.stop(time.Second, nil)
	})
}
