package pool

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/alitto/pond/v2"
)

// BenchmarkDispatch measures one no-op item through Submit, the worker and
// the result accounting. Compare with BenchmarkRawPondGo: pond's Go of a
// no-op on the same number of workers.
func BenchmarkDispatch(b *testing.B) {
	workers := runtime.GOMAXPROCS(0)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	for _, bc := range []struct {
		name      string
		ordered   bool
		queueSize int
	}{
		{"unordered", false, 1024},
		{"ordered-1024keys", true, 1024},
		{"unordered-queue64", false, 64},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := Config[int]{Name: "bench", Workers: workers, QueueSize: bc.queueSize,
				Handler: func(context.Context, int) error { return nil },
			}
			if bc.ordered {
				cfg.Ordered = true
				cfg.KeyFunc = func(i int) string { return keys[i&1023] }
			}
			p, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := p.Submit(ctx, i); err != nil {
					b.Fatal(err)
				}
				i++
			}
			if err := p.Drain(ctx); err != nil {
				b.Fatal(err)
			}
			p.Stop(time.Minute, nil)
		})
	}
}

func BenchmarkRawPondGo(b *testing.B) {
	p := pond.NewPool(runtime.GOMAXPROCS(0))
	noop := func() {}
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Go(noop); err != nil {
			b.Fatal(err)
		}
	}
	p.StopAndWait()
}

// BenchmarkHandOff compares handing a fetch's records to the pool one
// Submit each with one SubmitBatch per fetch (batch items of one
// partition), and a worker per item with a BatchHandler taking up to
// MaxBatch ready items per call, side by side: one op is one item through
// the pool to its no-op handler and its result.
func BenchmarkHandOff(b *testing.B) {
	workers := runtime.GOMAXPROCS(0)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	const fetch = 64 // records per fetch handed over at once
	for _, bc := range []struct {
		name    string
		ordered bool
		batch   bool // SubmitBatch of fetch items
		handler bool // BatchHandler, MaxBatch 64
	}{
		{"unordered/submit", false, false, false},
		{"unordered/submit-batch", false, true, false},
		{"unordered/submit-batch/batch-handler", false, true, true},
		{"ordered-1024keys/submit", true, false, false},
		{"ordered-1024keys/submit-batch", true, true, false},
		{"ordered-1024keys/submit-batch/batch-handler", true, true, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := Config[int]{Name: "bench", Workers: workers, QueueSize: 1024,
				Handler: func(context.Context, int) error { return nil },
			}
			if bc.ordered {
				cfg.Ordered = true
				cfg.KeyFunc = func(i int) string { return keys[i&1023] }
			}
			if bc.handler {
				cfg.Handler = nil
				cfg.MaxBatch = fetch
				cfg.BatchHandler = func(context.Context, []int, []error) {}
			}
			p, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			buf := make([]int, 0, fetch)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if !bc.batch {
					if err := p.Submit(ctx, i); err != nil {
						b.Fatal(err)
					}
				} else if buf = append(buf, i); len(buf) == fetch {
					if _, err := p.SubmitBatch(ctx, buf); err != nil {
						b.Fatal(err)
					}
					buf = buf[:0]
				}
				i++
			}
			if _, err := p.SubmitBatch(ctx, buf); err != nil {
				b.Fatal(err)
			}
			if err := p.Drain(ctx); err != nil {
				b.Fatal(err)
			}
			p.Stop(time.Minute, nil)
		})
	}
}
