package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"syscall"
	"time"
)

// usage is the measuring process's resource use at one moment.
type usage struct {
	cpu     time.Duration // user + system, this process only
	mallocs uint64        // heap objects allocated so far
}

func readUsage() usage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{
		cpu:     time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		mallocs: ms.Mallocs,
	}
}

// resetPeakRSS collects garbage, returns free memory to the OS and, on
// Linux, resets the process's peak RSS (VmHWM) so that the next
// peakRSS reports the peak of one side only. It reports whether the
// reset worked; if not, peakRSS is the peak of the whole process so far.
func resetPeakRSS() bool {
	runtime.GC()
	debug.FreeOSMemory()
	// "5" resets the peak RSS (Linux ≥ 4.0, proc(5) clear_refs).
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// peakRSS returns the process's peak resident set size in bytes: VmHWM
// from /proc/self/status, else ru_maxrss.
func peakRSS() uint64 {
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmHWM:")); ok {
				f := bytes.Fields(rest) // "1234", "kB"
				if len(f) > 0 {
					if kb, err := strconv.ParseUint(string(f[0]), 10, 64); err == nil {
						return kb << 10
					}
				}
			}
		}
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return uint64(ru.Maxrss) << 10 // kilobytes on Linux
}

// meter measures one side of one round from its start: CPU and
// allocations to the moment the side calls handled (the last message is
// handled: the hot path, without the wait for the commit tick), peak RSS
// to the moment it calls end (the group's commit covers every message).
// The stop that follows is not measured.
//
// It also samples the live heap (runtime/metrics /gc/heap/live:bytes, the
// heap marked live by the last GC) every 10 ms from the start to end:
// liveHeap is the largest sample, the memory the side's consumer held
// without the garbage not yet collected that RSS counts too.
type meter struct {
	hwmReset bool
	start    usage
	endUse   usage
	peak     uint64
	liveHeap uint64

	stopSampling chan struct{}
	sampled      chan uint64
}

func (m *meter) handled() { m.endUse = readUsage() }

// startMeter starts measuring a side; with heapProf set, an in-use heap
// profile is written there each time the live heap sampled grows by a
// tenth: the last one written shows what the side held at its peak.
func startMeter(heapProf string) *meter {
	m := &meter{hwmReset: resetPeakRSS(), stopSampling: make(chan struct{}), sampled: make(chan uint64, 1)}
	m.start = readUsage()
	go sampleLiveHeap(m.stopSampling, m.sampled, heapProf)
	return m
}

// sampleLiveHeap samples until stop closes, then sends the largest sample.
func sampleLiveHeap(stop <-chan struct{}, out chan<- uint64, heapProf string) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var top, profiled uint64
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		metrics.Read(s)
		if s[0].Value.Kind() == metrics.KindUint64 {
			top = max(top, s[0].Value.Uint64())
		}
		if heapProf != "" && top > profiled+profiled/10 {
			profiled = top
			// The heap profile is the last GC's, as the sample is.
			if err := writeProfile("heap", heapProf); err != nil {
				fmt.Fprintln(os.Stderr, "bench: heap profile:", err)
				heapProf = ""
			}
		}
		select {
		case <-stop:
			out <- top
			return
		case <-t.C:
		}
	}
}

// end records the peak RSS and the live heap's peak; a second call does
// nothing.
func (m *meter) end() {
	if m.stopSampling == nil {
		return
	}
	m.peak = peakRSS()
	close(m.stopSampling)
	m.stopSampling = nil
	m.liveHeap = <-m.sampled
}

// sleepTime measures what time.Sleep(d) really takes here, averaged over
// 100 calls: the worker ceiling is workers ÷ this, not ÷ d.
func sleepTime(d time.Duration) time.Duration {
	const k = 100
	t := time.Now()
	for range k {
		time.Sleep(d)
	}
	return time.Since(t) / k
}
