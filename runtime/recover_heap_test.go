//go:build soak

package runtime

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/handoff-go/handoff"
)

// Soak tests, kept out of the normal suite. Run them with
//
//	go test -tags soak -run TestRecoveryHeap -v -timeout 30m ./runtime/
//
// TestRecoveryHeap writes state files of 100k and 1M pending records of
// 1 KiB (about 150 MB and 1.5 GB, in t.TempDir: check its free space)
// and re-pushes each into a class whose handlers wait for the test, so
// the pool stays full and the recovery keeps waiting for room. The live
// heap (after a GC) must stay bounded by what the pool and the read-ahead
// hold, whatever the size of the file: it is sampled each time the pool
// is full again, after the test released 1/50 of the records. RSS is
// logged alongside, split into anonymous memory (the heap and the Go
// runtime's) and file pages (bbolt's memory map of the state file).
func TestRecoveryHeap(t *testing.T) {
	for _, n := range []int{100_000, 1_000_000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) { recoveryHeap(t, n) })
	}
}

// maxRecoveryHeap bounds the live heap the re-push may add: the pool's
// 36 messages (each may keep its 32 KiB read block alive), the read-ahead
// of the state file and the runtime's own structures.
const maxRecoveryHeap = 64 << 20

func recoveryHeap(t *testing.T, n int) {
	path := filepath.Join(t.TempDir(), "state.db")
	writePending(t, path, n)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	payload := uint64(n) * 1024
	t.Logf("state file: %d records, %.0f MiB; values %.0f MiB", n, mib(uint64(fi.Size())), mib(payload))

	const workers, queue = 4, 32
	gate := make(chan struct{})
	var handled atomic.Int64
	base := sampleMem(t)
	rt, err := newRuntime(Config{
		StatePath: path,
		Logger:    testLogger(t),
		Classes: []Class{{Name: "local", Workers: workers, QueueSize: queue, Handler: func(ctx context.Context, _ *handoff.Message) error {
			select {
			case <-gate:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			handled.Add(1)
			return nil
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())

	// full: the pool holds as many messages as it can of those left.
	full := func() bool {
		s := rt.classes.byName["local"].pool.Stats()
		return int64(s.Running+s.Queued) == min(workers+queue, int64(n)-handled.Load())
	}
	var peak memSample
	samples := 0
	sample := func() memSample {
		m := sampleMem(t)
		samples++
		peak.heap = max(peak.heap, m.heap)
		peak.rssAnon = max(peak.rssAnon, m.rssAnon)
		peak.rssFile = max(peak.rssFile, m.rssFile)
		peak.vmSize = max(peak.vmSize, m.vmSize)
		return m
	}
	// While every handler waits, the recovery waits for room in the pool
	// and the file is read ahead as far as the reader goes: sample until
	// the heap stops growing (three samples within 1 MiB).
	waitFor(t, "pool full", full)
	for last, still := sample(), 0; still < 3; {
		m := sample()
		if m.heap < last.heap+1<<20 {
			still++
		} else {
			still = 0
		}
		last = m
	}
	stalled := peak
	step := n / 50
	for released := 0; released < n; {
		waitFor(t, "pool full", full)
		sample()
		k := min(step, n-released)
		for range k {
			gate <- struct{}{}
		}
		released += k
		waitFor(t, "released messages handled", func() bool { return handled.Load() == int64(released) })
	}
	if err := rt.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Repushed != n || rep.Succeeded != uint64(n) || handled.Load() != int64(n) {
		t.Fatalf("repushed %d, succeeded %d, handled %d; want %d", rep.Repushed, rep.Succeeded, handled.Load(), n)
	}
	end := sampleMem(t)
	grown := peak.heap - min(peak.heap, base.heap)
	t.Logf("live heap: before %.1f MiB, peak %.1f MiB (+%.1f MiB, %.2f%% of the values), after %.1f MiB; %d samples",
		mib(base.heap), mib(peak.heap), mib(grown), 100*float64(grown)/float64(payload), mib(end.heap), samples)
	t.Logf("while the push waited: live heap %.1f MiB, RSS anonymous %.0f MiB, file %.0f MiB",
		mib(stalled.heap), mib(stalled.rssAnon), mib(stalled.rssFile))
	t.Logf("RSS peak: anonymous %.0f MiB, file %.0f MiB (high-water mark %.0f MiB); address space %.0f MiB",
		mib(peak.rssAnon), mib(peak.rssFile), mib(end.rssPeak), mib(peak.vmSize))
	if grown > maxRecoveryHeap {
		t.Errorf("re-push grew the live heap by %.0f MiB, want at most %.0f MiB", mib(grown), mib(maxRecoveryHeap))
	}
}

// memSample is the process's memory at one moment.
type memSample struct {
	heap                      uint64 // live heap after a GC
	rssAnon, rssFile, rssPeak uint64 // resident: anonymous, file-backed, high-water mark
	vmSize                    uint64 // address space
}

// sampleMem collects garbage, then reads the heap and /proc/self/status.
func sampleMem(t *testing.T) memSample {
	t.Helper()
	goruntime.GC()
	goruntime.GC() // a second cycle frees what sync.Pools kept through the first
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	m := memSample{heap: ms.HeapAlloc}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]*uint64{"RssAnon:": &m.rssAnon, "RssFile:": &m.rssFile, "VmHWM:": &m.rssPeak, "VmSize:": &m.vmSize}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		var name string
		var kb uint64
		if _, err := fmt.Sscanf(sc.Text(), "%s %d kB", &name, &kb); err == nil && fields[name] != nil {
			*fields[name] = kb << 10
		}
	}
	return m
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
