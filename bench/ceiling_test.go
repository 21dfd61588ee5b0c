package main

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSleepers measures the 2 ms handler's worker ceiling two ways
// side by side, with nothing else running in the process: the table's
// (48 workers ÷ one time.Sleep(2ms) timed alone, sleepTime) and the rate
// at which 48 goroutines sleeping 2 ms each at once complete their
// sleeps. When the two agree, a stack that reaches less of the ceiling
// than its workers' busy share says loses it to sleeps that take longer
// while it reads Kafka, not to many sleepers waking together.
//
//	go test -run '^$' -bench Sleepers -benchtime 3x ./bench/
func BenchmarkSleepers(b *testing.B) {
	const workers, sleeps = 48, 24_000
	d := 2 * time.Millisecond
	for b.Loop() {
		alone := float64(workers) / sleepTime(d).Seconds()
		var left atomic.Int64
		left.Store(sleeps)
		var wg sync.WaitGroup
		began := time.Now()
		for range workers {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					time.Sleep(d)
				}
			})
		}
		wg.Wait()
		together := sleeps / time.Since(began).Seconds()
		b.ReportMetric(alone, "ceiling-alone/s")
		b.ReportMetric(together, "sleeps-together/s")
		b.ReportMetric(together/alone, "together/alone")
	}
}
