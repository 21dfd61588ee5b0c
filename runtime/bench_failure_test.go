package runtime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// BenchmarkDeadLetters measures dead-letter writes: a Submit-only class
// whose handler fails permanently, 8 workers, 20k messages per op. Each
// dead letter is one bbolt write shared with the other workers' (Batch).
//
//	go test -run='^$' -bench=DeadLetters -benchtime=3x ./runtime/
func BenchmarkDeadLetters(b *testing.B) {
	const n = 20_000
	var total int
	var took time.Duration
	errPoison := handoff.Permanent(errors.New("poison"))
	for b.Loop() {
		path := filepath.Join(b.TempDir(), "s.db")
		rt, err := newRuntime(Config{StatePath: path, Classes: []Class{{Name: "c", Workers: 8, QueueSize: 1024,
			Handler: func(context.Context, *handoff.Message) error { return errPoison }}}})
		if err != nil {
			b.Fatal(err)
		}
		wait := benchRun(b, rt)
		waitFor(b, "ready", rt.Ready)
		began := time.Now()
		for i := range n {
			if err := rt.Submit(context.Background(), "c", &handoff.Message{ID: fmt.Sprint(i), Value: make([]byte, 256)}); err != nil {
				b.Fatal(err)
			}
		}
		// Count through the result path: dead letters are written before
		// the pool reports the item done.
		waitFor(b, "every dead letter written", func() bool { return rt.tally.total(evDeadLettered) >= n })
		took += time.Since(began)
		total += n
		rt.Shutdown(context.Background())
		if rep := wait(); rep.DeadLettered != n {
			b.Fatalf("dead-lettered %d, want %d", rep.DeadLettered, n)
		}
	}
	b.ReportMetric(float64(total)/took.Seconds(), "dead_letters/s")
}

// BenchmarkScheduler100k measures the delayed scheduler with 100k
// messages waiting in the state file, all due: from the start of Run to
// the last one handled, and the heap held while they wait.
//
//	go test -run='^$' -bench=Scheduler100k -benchtime=3x ./runtime/
func BenchmarkScheduler100k(b *testing.B) {
	const n = 100_000
	golden := filepath.Join(b.TempDir(), "golden.db")
	due := time.Now().Add(-time.Second)
	items := make([]snapshot.Delayed, n)
	for i := range items {
		items[i] = snapshot.Delayed{Due: due.Add(time.Duration(i) * time.Microsecond), Record: snapshot.Record{
			Message: handoff.Message{ID: fmt.Sprint(i), Class: "c", Value: make([]byte, 1024)}, Reason: reasonScheduled}}
	}
	snapshottest.SeedDelayed(b, golden, items...)
	items = nil

	var total int
	var took time.Duration
	var heap uint64
	for b.Loop() {
		path := filepath.Join(b.TempDir(), "s.db")
		copyFile(b, golden, path)
		var handled atomic.Int64
		all := make(chan struct{})
		rt, err := newRuntime(Config{StatePath: path, Classes: []Class{{Name: "c", Workers: 8, QueueSize: 1024,
			Handler: func(context.Context, *handoff.Message) error {
				if handled.Add(1) == n {
					close(all)
				}
				return nil
			}}}})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		began := time.Now()
		wait := benchRun(b, rt)
		<-all
		took += time.Since(began)
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heap = max(heap, after.HeapInuse-min(after.HeapInuse, before.HeapInuse))
		total += n
		rt.Shutdown(context.Background())
		if rep := wait(); rep.Delivered != n {
			b.Fatalf("delivered %d, want %d", rep.Delivered, n)
		}
		assertBucket(b, path, snapshot.BucketDelayed, 0)
	}
	b.ReportMetric(float64(total)/took.Seconds(), "msgs/s")
	b.ReportMetric(float64(heap)/(1<<20), "heap_MiB")
}

func benchRun(b *testing.B, rt *Runtime) func() *Report {
	ran := make(chan *Report, 1)
	go func() {
		rep, err := rt.Run(context.Background())
		if err != nil {
			b.Error(err)
		}
		ran <- rep
	}()
	return func() *Report { return <-ran }
}

func assertBucket(b *testing.B, path, bucket string, want int) {
	counts := snapshottest.Counts(b, path)
	if counts[bucket] != want {
		b.Fatalf("%s: %d records, want %d", bucket, counts[bucket], want)
	}
}
