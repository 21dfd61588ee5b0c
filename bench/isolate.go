package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"time"

	"github.com/handoff-go/handoff/internal/rental"
	hrt "github.com/handoff-go/handoff/runtime"
)

// sideEnv, when set in the environment, turns this binary into a side
// process: it measures the one side the JSON value (a sideOrder) names
// and prints the sample on one "SAMPLE {json}" line. The sweep runs
// every side so (-isolate), because a process keeps what an earlier side
// made resident: after the runtime on kafka-go at 300 partitions (a live
// heap of about 230 MiB), the franz-go sides measured in the same
// process read 10–25 MiB more peak RSS than alone, even with the heap
// returned to the OS and the peak reset before each side.
const sideEnv = "HANDOFF_BENCH_SIDE"

// sideOrder is one side to measure in a process of its own: the stack,
// the spec with the broker reduced to what a side uses of it, and the
// profile path prefix ("" for none).
type sideOrder struct {
	Stack                            string
	Addr                             string
	BrokerPID                        int
	Topics                           []string
	Partitions                       int
	Classes                          [][]string
	N                                int
	Work, CommitInterval             time.Duration
	Workers, ReaderQueue, MaxBatch   int
	CallCost, MsgCost                time.Duration
	Client                           string
	FranzMaxBytes, FranzMaxPartBytes int32
	FranzMaxWait                     time.Duration
	Rental, Poisoned, LocalStateOnly bool
	Recycle                          bool
	Prof                             string
}

// sampleWire is a sample as the side process prints it.
type sampleWire struct {
	Handled, Committed, Steady, Busy, CPUUS, Allocs float64
	GCUS, Bytes, BrokerUS                           float64
	BrokerOK                                        bool
	PeakRSS, LiveHeap                               uint64
	Stop                                            time.Duration
	Calls                                           int64
}

// orderOf is st's side on s as a side process takes it. A spec's check
// can only be rental.Poisoned or nil: a function does not cross a
// process boundary, so any other is refused.
func orderOf(st stack, s spec, prof string) (sideOrder, error) {
	o := sideOrder{
		Stack: st.key, Addr: s.br.addr, BrokerPID: s.br.pid, Topics: s.br.topics, Partitions: s.br.partitions,
		Classes: s.classes, N: s.n, Work: s.work, CommitInterval: s.commitInterval,
		Workers: s.workers, ReaderQueue: s.readerQueue, MaxBatch: s.maxBatch,
		CallCost: s.callCost, MsgCost: s.msgCost, Client: string(s.client),
		FranzMaxBytes: s.franz.maxBytes, FranzMaxPartBytes: s.franz.maxPartitionBytes, FranzMaxWait: s.franz.maxWait,
		Rental: s.rental, Poisoned: s.check != nil, LocalStateOnly: s.localStateOnly,
		Recycle: recycleMessages, Prof: prof,
	}
	if s.check != nil && reflect.ValueOf(s.check).Pointer() != reflect.ValueOf(rental.Poisoned).Pointer() {
		return o, fmt.Errorf("bench: %s: a side process can only run rental.Poisoned as the raw stacks' check", st.name)
	}
	return o, nil
}

// spec is the order's spec, its broker the order's address (no process of
// its own: the parent runs it).
func (o sideOrder) spec() spec {
	s := spec{
		br:      &broker{addr: o.Addr, topics: o.Topics, partitions: o.Partitions, pid: o.BrokerPID},
		classes: o.Classes, n: o.N, work: o.Work, commitInterval: o.CommitInterval,
		workers: o.Workers, readerQueue: o.ReaderQueue, maxBatch: o.MaxBatch,
		callCost: o.CallCost, msgCost: o.MsgCost, client: hrt.Client(o.Client),
		franz:  franzFetch{maxBytes: o.FranzMaxBytes, maxPartitionBytes: o.FranzMaxPartBytes, maxWait: o.FranzMaxWait},
		rental: o.Rental, localStateOnly: o.LocalStateOnly,
	}
	if o.Poisoned {
		s.check = rental.Poisoned
	}
	return s
}

// sideChild measures the side order describes and prints its sample. It
// returns the process exit code.
func sideChild(order string) int {
	var o sideOrder
	if err := json.Unmarshal([]byte(order), &o); err != nil {
		fmt.Fprintf(os.Stderr, "bench side: bad %s: %v\n", sideEnv, err)
		return 2
	}
	sts, err := stacksOf(o.Stack)
	if err != nil || len(sts) != 1 {
		fmt.Fprintf(os.Stderr, "bench side: stack %q: %v\n", o.Stack, err)
		return 2
	}
	st := sts[0]
	recycleMessages = o.Recycle
	smp, err := measure(context.Background(), st.run, o.spec(), o.Prof)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench side %s: %v\n", st.name, err)
		return 1
	}
	line, err := json.Marshal(sampleWire{
		Handled: smp.handled, Committed: smp.committed, Steady: smp.steady, Busy: smp.busy,
		CPUUS: smp.cpuUS, GCUS: smp.gcUS, Bytes: smp.bytes, Allocs: smp.allocs, BrokerUS: smp.brokerUS, BrokerOK: smp.brokerOK,
		PeakRSS: smp.peakRSS, LiveHeap: smp.liveHeap, Stop: smp.stop, Calls: smp.calls,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench side:", err)
		return 1
	}
	fmt.Printf("SAMPLE %s\n", line)
	return 0
}

// measureIsolated measures st's side on s as measure does, in a new
// process of this binary: what the measuring process made resident
// before does not count in the side's peak RSS, nor its heap in the
// side's garbage collection. The child is killed if ctx ends.
func measureIsolated(ctx context.Context, st stack, s spec, prof string) (sample, error) {
	o, err := orderOf(st, s, prof)
	if err != nil {
		return sample{}, err
	}
	order, err := json.Marshal(o)
	if err != nil {
		return sample{}, err
	}
	exe, err := os.Executable()
	if err != nil {
		return sample{}, fmt.Errorf("bench: find own binary: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), sideEnv+"="+string(order))
	cmd.Stderr = os.Stderr
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return sample{}, fmt.Errorf("bench: side process for %s: %w", st.name, err)
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "SAMPLE ")
		if !ok {
			continue
		}
		var w sampleWire
		if err := json.Unmarshal([]byte(rest), &w); err != nil {
			return sample{}, fmt.Errorf("bench: side process for %s: %w", st.name, err)
		}
		return sample{
			handled: w.Handled, committed: w.Committed, steady: w.Steady, busy: w.Busy,
			cpuUS: w.CPUUS, gcUS: w.GCUS, bytes: w.Bytes, allocs: w.Allocs, brokerUS: w.BrokerUS, brokerOK: w.BrokerOK,
			peakRSS: w.PeakRSS, liveHeap: w.LiveHeap,
			stop: w.Stop, calls: w.Calls,
		}, nil
	}
	return sample{}, fmt.Errorf("bench: side process for %s printed no sample", st.name)
}
