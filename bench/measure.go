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

// usage is the measuring process's resource use at one moment, and the
// broker process's CPU.
type usage struct {
	cpu     time.Duration // user + system, this process only
	mallocs uint64        // heap objects allocated so far
	bytes   uint64        // heap bytes allocated so far
	// gc is the Go runtime's estimate of the CPU its garbage collector
	// has used so far (gcCPUMetric), counted in whole cycles: the time of
	// the Ps it ran on, which on an idle machine is part of cpu.
	gc time.Duration
	// broker is the broker process's user + system CPU, when brokerOK.
	broker   time.Duration
	brokerOK bool
}

// readUsage reads this process's usage and the CPU of the broker process
// brokerPID (0: none known).
func readUsage(brokerPID int) usage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	u := usage{
		cpu:     time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		mallocs: ms.Mallocs,
		bytes:   ms.TotalAlloc,
		gc:      gcCPU(),
	}
	u.broker, u.brokerOK = procCPU(brokerPID)
	return u
}

// gcCPUMetric is the runtime/metrics estimate of the CPU the garbage
// collector has used: its mark workers (dedicated, fractional and those
// run on an idle P), the assists it took from allocating goroutines and
// its pauses. The runtime adds a cycle's share when the cycle ends.
const gcCPUMetric = "/cpu/classes/gc/total:cpu-seconds"

// gcCPU returns gcCPUMetric, or 0 if this Go has no such metric.
func gcCPU() time.Duration {
	s := []metrics.Sample{{Name: gcCPUMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration(s[0].Value.Float64() * float64(time.Second))
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
// proc(5)): 100 a second on x86 and arm64, the machines this runs on.
const userHZ = 100

// procCPU returns the user + system CPU time process pid has used, all
// its threads, from /proc/<pid>/stat (proc(5): utime and stime, fields
// 14 and 15), to a hundredth of a second. It reports false off Linux,
// for pid 0, or when the process is gone.
func procCPU(pid int) (time.Duration, bool) {
	if pid <= 0 {
		return 0, false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	return parseProcStatCPU(data)
}

// parseProcStatCPU reads utime + stime from a /proc/<pid>/stat line. The
// command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so the fields are counted from its last ")": the
// first after it is field 3.
func parseProcStatCPU(line []byte) (time.Duration, bool) {
	i := bytes.LastIndexByte(line, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(line[i+1:])
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, false
	}
	ut, err1 := strconv.ParseUint(string(f[utime]), 10, 64)
	st, err2 := strconv.ParseUint(string(f[stime]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * time.Second / userHZ, true
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
	brokerPID int // the broker process whose CPU is measured too; 0: none
	hwmReset  bool
	start     usage
	endUse    usage
	peak      uint64
	liveHeap  uint64

	stopSampling chan struct{}
	sampled      chan uint64
}

func (m *meter) handled() { m.endUse = readUsage(m.brokerPID) }

// startMeter starts measuring a side, and the CPU of the broker process
// brokerPID (0: none) over the same time; with heapProf set, an in-use
// heap profile is written there each time the live heap sampled grows by
// a tenth: the last one written shows what the side held at its peak.
func startMeter(heapProf string, brokerPID int) *meter {
	m := &meter{brokerPID: brokerPID, hwmReset: resetPeakRSS(), stopSampling: make(chan struct{}), sampled: make(chan uint64, 1)}
	m.start = readUsage(brokerPID)
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
