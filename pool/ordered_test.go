package pool

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"
)

func TestOrdered(t *testing.T) {
	t.Parallel()

	t.Run("per-key submission order holds under concurrency", func(t *testing.T) {
		t.Parallel()
		const (
			keys       = 64
			perKey     = 60
			submitters = 8
		)
		var (
			mu      sync.Mutex
			order   = make(map[string][]int)
			busy    [keys]atomic.Int32
			overlap atomic.Int32
		)
		keyIndex := func(it item) int { return it.id / perKey }
		h := setup(t, Config[item]{Workers: 8, QueueSize: 32, Ordered: true, KeyFunc: keyOf,
			Handler: func(_ context.Context, it item) error {
				if busy[keyIndex(it)].Add(1) != 1 {
					overlap.Add(1)
				}
				mu.Lock()
				order[it.key] = append(order[it.key], it.id)
				mu.Unlock()
				for range rand.IntN(50) { // a random amount of work
					runtime.Gosched()
				}
				if rand.IntN(4) == 0 {
					return fmt.Errorf("failed %d", it.id)
				}
				return nil
			},
			// The next item of a key must not start before this returns.
			ResultFunc: func(it item, _ error) {
				for range rand.IntN(5) {
					runtime.Gosched()
				}
				busy[keyIndex(it)].Add(-1)
			},
		})
		// Each submitter owns keys k ≡ s (mod submitters) and interleaves
		// them, so every key's submission order is that of its ids.
		var wg sync.WaitGroup
		for s := range submitters {
			wg.Go(func() {
				for n := range perKey {
					for k := s; k < keys; k += submitters {
						h.mustSubmit(item{id: k*perKey + n, key: fmt.Sprint("k", k)})
					}
				}
			})
		}
		wg.Wait()
		h.drain()
		if n := overlap.Load(); n != 0 {
			t.Errorf("%d times an item started while another of its key was running", n)
		}
		if len(order) != keys {
			t.Fatalf("%d keys handled, want %d", len(order), keys)
		}
		for key, got := range order {
			if !slices.IsSorted(got) || len(got) != perKey {
				t.Errorf("key %s handled in order %v", key, got)
			}
		}
	})

	t.Run("different keys run in parallel", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan string, 2)
		release := make(chan struct{})
		h := setup(t, Config[item]{Workers: 2, Ordered: true, KeyFunc: keyOf,
			Handler: func(_ context.Context, it item) error {
				arrived <- it.key
				<-release
				return nil
			},
		})
		h.mustSubmit(item{id: 1, key: "a"}, item{id: 2, key: "a"}, item{id: 3, key: "b"})
		// 1 and 3 must both be running at once; 2 must wait behind 1.
		got := make([]string, 0, 2)
		for range 2 {
			select {
			case key := <-arrived:
				got = append(got, key)
			case <-time.After(waitLimit):
				t.Fatalf("only %v running at once, want a and b", got)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("running at once: %v, want [a b]", got)
		}
		if st := h.p.Stats(); st.Queued != 1 || st.Running != 2 {
			t.Errorf("Stats = %+v, want 1 queued behind a, 2 running", st)
		}
		close(release)
		h.drain()
		if key := <-arrived; key != "a" {
			t.Errorf("third start has key %s, want a", key)
		}
	})

	t.Run("one worker runs in submission order", func(t *testing.T) {
		t.Parallel()
		g := newGate()
		h := setup(t, Config[item]{Workers: 1, Ordered: true, KeyFunc: keyOf, Handler: g.handler})
		h.mustSubmit(item{id: 1, key: "a"})
		g.wait(t)
		// 2 and 4 wait behind a; when a frees up they must still go before
		// the younger items of other keys.
		h.mustSubmit(item{id: 2, key: "a"}, item{id: 3, key: "b"}, item{id: 4, key: "a"}, item{id: 5, key: "c"})
		got := []int{1}
		for range 4 {
			g.release <- struct{}{}
			got = append(got, g.wait(t).id)
		}
		close(g.release)
		if want := []int{1, 2, 3, 4, 5}; !slices.Equal(got, want) {
			t.Errorf("started %v, want %v", got, want)
		}
	})

	t.Run("a failed item does not block its key", func(t *testing.T) {
		t.Parallel()
		h := setup(t, Config[item]{Workers: 1, Ordered: true, KeyFunc: keyOf,
			Handler: func(_ context.Context, it item) error {
				if it.id == 1 {
					panic("boom")
				}
				return nil
			},
		})
		h.mustSubmit(item{id: 1, key: "a"}, item{id: 2, key: "a"})
		h.drain()
		if st := h.p.Stats(); st.Succeeded != 1 || st.Failed != 1 {
			t.Errorf("Stats = %+v, want 1 succeeded, 1 failed", st)
		}
	})
}

// TestKeyViewChangesAfterSubmit: the pool keeps a hash of KeyFunc's
// string, not the string, so a key that is a view of bytes changed after
// its Submit (the runtime hands over views of records' keys) still
// orders the items submitted after it by the key it had. Before, the
// pool kept the string: item 1 of key "a" ran beside item 0, whose key
// had become "b" under the pool's map.
func TestKeyViewChangesAfterSubmit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		started := make(chan int, 2)
		h := setup(t, Config[item]{Workers: 2, QueueSize: 4, Ordered: true, KeyFunc: keyOf,
			Handler: func(_ context.Context, it item) error {
				started <- it.id
				if it.id == 0 {
					<-release
				}
				return nil
			}})
		buf := []byte("a")
		h.mustSubmit(item{0, unsafe.String(&buf[0], len(buf))})
		if id := <-started; id != 0 {
			t.Fatalf("item %d started first", id)
		}
		buf[0] = 'b'
		h.mustSubmit(item{1, "a"})
		synctest.Wait() // every goroutine of the pool has done what it can
		select {
		case id := <-started:
			t.Errorf("item %d of key a started while item 0 of key a ran", id)
		default:
		}
		close(release)
		h.drain()
	})
}
