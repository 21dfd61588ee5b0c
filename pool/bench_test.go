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
