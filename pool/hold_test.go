package pool

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestHoldProbeRelease: a held pool starts nothing, each probe starts
// the first ready item only, Drain counts a held pool idle, and Release
// starts up to Workers at once; in an Ordered pool too.
func TestHoldProbeRelease(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var ran []int
				running, most := 0, 0
				cfg := Config[item]{Name: "held", Workers: 3, QueueSize: 16, Ordered: ordered,
					Handler: func(ctx context.Context, it item) error {
						mu.Lock()
						ran = append(ran, it.id)
						running++
						most = max(most, running)
						mu.Unlock()
						time.Sleep(10 * time.Millisecond)
						mu.Lock()
						running--
						mu.Unlock()
						return nil
					}}
				if ordered {
					cfg.KeyFunc = keyOf
				}
				p, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				p.Hold()
				if !p.Held() {
					t.Fatal("Held is false after Hold")
				}
				for i := range 8 {
					if err := p.Submit(context.Background(), item{id: i, key: string(rune('a' + i%4))}); err != nil {
						t.Fatal(err)
					}
				}
				synctest.Wait()
				snap := func() ([]int, int) { mu.Lock(); defer mu.Unlock(); return slices.Clone(ran), most }
				if r, _ := snap(); len(r) != 0 {
					t.Fatalf("a held pool ran %v", r)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				if err := p.Drain(ctx); err != nil {
					t.Fatalf("Drain of a held idle pool: %v", err)
				}
				cancel()
				if !p.Probe() {
					t.Fatal("Probe found nothing ready")
				}
				time.Sleep(time.Second)
				if r, _ := snap(); !slices.Equal(r, []int{0}) {
					t.Fatalf("one probe ran %v, want [0]", r)
				}
				if !p.Probe() {
					t.Fatal("the second Probe found nothing ready")
				}
				time.Sleep(time.Second)
				if r, _ := snap(); !slices.Equal(r, []int{0, 1}) {
					t.Fatalf("two probes ran %v, want [0 1]", r)
				}
				p.Release()
				time.Sleep(time.Second)
				if r, m := snap(); len(r) != 8 || m != 3 {
					t.Fatalf("after Release ran %v, at most %d at once; want 8 items, 3 at once", r, m)
				}
				if p.Probe() {
					t.Fatal("Probe of a pool not held reported an item")
				}
				p.Stop(time.Second, nil)
			})
		})
	}
}

// TestHoldRetryWaitsInPlace: an item a held pool's RetryFunc sends back
// waits its delay and then waits in place for the release.
func TestHoldRetryWaitsInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := 0
		release := make(chan struct{})
		p, err := New(Config[item]{Name: "held", Workers: 1, QueueSize: 4,
			Handler: func(ctx context.Context, it item) error {
				mu.Lock()
				calls++
				n := calls
				mu.Unlock()
				if n == 1 {
					<-release
					return errRetry
				}
				return nil
			},
			RetryFunc: retryAfter(0)})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Submit(context.Background(), item{id: 1}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		p.Hold()
		close(release)
		time.Sleep(time.Second)
		count := func() int { mu.Lock(); defer mu.Unlock(); return calls }
		if s := p.Stats(); count() != 1 || s.Queued != 1 || s.Retried != 1 {
			t.Fatalf("held: %d calls, stats %+v", count(), s)
		}
		p.Release()
		synctest.Wait()
		if s := p.Stats(); count() != 2 || s.Succeeded != 1 {
			t.Fatalf("released: %d calls, stats %+v", count(), s)
		}
		p.Stop(time.Second, nil)
	})
}
