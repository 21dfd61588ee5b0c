package main

import (
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestParseProcStatCPU(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration
		ok   bool
	}{
		// utime 250 and stime 50 ticks: 3 s.
		{"1234 (bench) S 1 1234 1234 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 9 0 100 0 0", 3 * time.Second, true},
		// A command name with spaces and parentheses of its own.
		{"99 (a (b) c) R 1 99 99 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 5 0 0", 100 * time.Millisecond, true},
		{"99 (cut) R 1 99 99 0 -1 0 0 0 0 0 7", 0, false},
		{"no parenthesis here", 0, false},
		{"1 (x) S 1 1 1 0 -1 0 0 0 0 0 seven 3 0", 0, false},
	} {
		got, ok := parseProcStatCPU([]byte(tc.line))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseProcStatCPU(%q) = %v, %v; want %v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

// TestProcCPUOfSelf reads this process's CPU from /proc and compares it
// with getrusage: the units are right, and every thread is counted.
func TestProcCPUOfSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/<pid>/stat is Linux's")
	}
	if _, ok := procCPU(0); ok {
		t.Error("procCPU(0) reports a figure")
	}
	// Burn CPU on two goroutines, so more than one thread may run.
	done := make(chan struct{})
	for range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			for end := time.Now().Add(150 * time.Millisecond); time.Now().Before(end); {
			}
		}()
	}
	<-done
	<-done
	got, ok := procCPU(os.Getpid())
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	want := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if !ok {
		t.Fatal("procCPU of this process reports no figure")
	}
	// /proc counts in hundredths of a second, and getrusage ran later.
	if got > want+10*time.Millisecond || got < want-50*time.Millisecond {
		t.Errorf("procCPU = %v, getrusage = %v", got, want)
	}
	if got < 100*time.Millisecond {
		t.Errorf("procCPU = %v after at least 150ms of CPU", got)
	}
}

// poolForLiveHeap is a sync.Pool that TestLiveHeapFreesPoolVictims
// fills; a pool stays registered with the runtime once it was used.
var poolForLiveHeap sync.Pool

// TestLiveHeapFreesPoolVictims checks that liveHeap does not count what a
// sync.Pool keeps through one GC: a baseline taken after producing
// records counted kafka-go's pooled buffers, which were gone by the
// time the runtime's queued messages were measured.
func TestLiveHeapFreesPoolVictims(t *testing.T) {
	const size = 32 << 20
	base := liveHeap()
	poolForLiveHeap.Put(make([]byte, size))
	if h := liveHeap(); h > base+size/2 {
		t.Fatalf("live heap %d bytes after a %d-byte buffer was put in a sync.Pool, %d before: it counts the pool's victim cache", h, size, base)
	}
}

// gcGarbage keeps TestReadUsageCountsTheGC's allocations from being
// optimized away.
var gcGarbage [][]byte

// TestReadUsageCountsTheGC checks that readUsage counts the heap bytes
// allocated and the collector's CPU: a usage read after 64 MiB of
// garbage and four GCs shows both grown, the GC's CPU no more than the
// Ps could have run meanwhile.
func TestReadUsageCountsTheGC(t *testing.T) {
	start := time.Now()
	before := readUsage(0)
	for range 4 {
		for range 1 << 10 {
			gcGarbage = append(gcGarbage, make([]byte, 16<<10))
		}
		gcGarbage = nil
		runtime.GC()
	}
	after := readUsage(0)
	if got := after.bytes - before.bytes; got < 64<<20 {
		t.Errorf("%d bytes allocated counted, want at least %d", got, 64<<20)
	}
	elapsed := time.Since(start)
	gc := after.gc - before.gc
	if gc <= 0 {
		t.Errorf("GC CPU grew by %v over four GCs, want more than 0 (metric %s)", gc, gcCPUMetric)
	}
	// The metric estimates the time of the Ps (a pause counts for all of
	// them), not the threads' CPU, which a loaded machine may take from
	// them: its bound is the elapsed time on every P.
	if ps := elapsed * time.Duration(runtime.GOMAXPROCS(0)); gc > ps {
		t.Errorf("GC CPU %v over %v, %v on each of %d Ps", gc, ps, elapsed, runtime.GOMAXPROCS(0))
	}
}
