package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/handoff-go/handoff/internal/rental"
	hrt "github.com/handoff-go/handoff/runtime"
)

// stack is one of the consumers the sweep compares, each on the same
// topics in the same rounds.
type stack struct {
	key    string // as -stacks names it
	name   string // as the output names it
	run    sideFunc
	held   heldFunc   // its held-memory measure
	client hrt.Client // the runtime's Config.Client; raw stacks: ""
}

// The four stacks, in the order of the output's columns.
const (
	rawKafkaGo     = "raw-kafka-go"
	runtimeKafkaGo = "runtime-kafka-go"
	rawFranzGo     = "raw-franz-go"
	runtimeFranzGo = "runtime-franz-go"
)

var allStacks = []stack{
	{rawKafkaGo, "raw kafka-go", runRaw, heldRawKafka, ""},
	{runtimeKafkaGo, "runtime on kafka-go", runHandoff, heldRuntime, hrt.ClientKafkaGo},
	{rawFranzGo, "raw franz-go", runRawFranz, heldRawFranz, ""},
	{runtimeFranzGo, "runtime on franz-go", runHandoff, heldRuntime, hrt.ClientFranzGo},
}

// stackKeys is allStacks' keys, comma-separated: -stacks' default.
func stackKeys() string {
	var keys []string
	for _, s := range allStacks {
		keys = append(keys, s.key)
	}
	return strings.Join(keys, ",")
}

// stacksOf returns the stacks -stacks names, in allStacks' order.
func stacksOf(list string) ([]stack, error) {
	want := map[string]bool{}
	for f := range strings.SplitSeq(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !slices.ContainsFunc(allStacks, func(s stack) bool { return s.key == f }) {
			return nil, fmt.Errorf("-stacks: unknown %q (want some of %s)", f, stackKeys())
		}
		want[f] = true
	}
	var out []stack
	for _, s := range allStacks {
		if want[s.key] {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-stacks: none named in %q", list)
	}
	return out, nil
}

// stackFig is one stack's figures at one sweep point: medians over the
// rounds, but for the memory, the largest of the rounds (a bound, and
// the two figures of one round: medians taken apart could pair a live
// heap with another round's smaller RSS).
type stackFig struct {
	handled, committed float64 // msgs/s
	steady             float64 // msgs/s, first message handled to the last
	cpuUS, allocs      float64 // per message
	gcUS, bytes        float64 // per message: the GC's part of cpuUS, heap bytes allocated
	// brokerUS is the broker process's CPU per message, when brokerOK.
	brokerUS          float64
	brokerOK          bool
	peakRSS, liveHeap uint64 // bytes
}

// point is one sweep point: the stacks' medians over the rounds. handled,
// committed and raw are the runtime on kafka-go's rates and raw
// kafka-go's handled rate (zero for a stack not run), which the plot
// draws.
type point struct {
	x                  int
	handled, committed float64
	raw                float64
	by                 map[string]stackFig // by stack key
}

// mean returns the mean handled rate of pts: the centre of the ±10 %
// flatness band.
func mean(pts []point) float64 {
	s := 0.0
	for _, p := range pts {
		s += p.handled
	}
	return s / float64(len(pts))
}

// sweepResult is how the stacks' no-op throughput scales.
type sweepResult struct {
	n, rounds  int
	stacks     []stack
	franz      franzFetch // raw franz-go's fetch settings
	partitions []point    // 3 topics, x partitions in all
	classes    []point    // max(classes) topics of 3 partitions, x classes
	topics     int        // topics of the classes sweep
	// held is each stack's held memory at heldAt partitions (the most of
	// the partitions sweep); nil when not measured.
	held   map[string]heldFig
	heldAt int
	// rental is the rental point: the stacks on rental's topics, the
	// runtime with rental's classes; nil when not run.
	rental *point
}

// runSweep measures the stacks (no-op handler) against partitions, then
// against classes, each point with its own topics and fresh groups, all
// stacks on the same topics in the same rounds (interleaved, the order
// rotating every round). Raw kafka-go is what the broker and the machine
// allow a kafka-go consumer at that point; raw franz-go the same for a
// franz-go one. In the classes sweep, where the raw stacks' setup is the
// same at every point, their spread is the noise of the measure. The
// partitions sweep starts a broker per point.
func runSweep(ctx context.Context, cfg config, log io.Writer) (sweepResult, error) {
	sw := sweepResult{n: cfg.sweepN, rounds: cfg.rounds, stacks: cfg.stacks, franz: cfg.franz}
	pointOf := func(kind string, x int, s spec) (point, error) {
		s.franz = cfg.franz
		got := map[string][]sample{}
		for r := range cfg.rounds {
			k := r % len(cfg.stacks)
			order := slices.Concat(cfg.stacks[k:], cfg.stacks[:k])
			line := fmt.Sprintf("sweep x=%d round %d", x, r)
			for _, st := range order {
				ss := s
				ss.client = st.client
				prof := ""
				if cfg.profileDir != "" && r == 0 {
					prof = filepath.Join(cfg.profileDir, fmt.Sprintf("sweep-%s-%d-%s", kind, x, st.key))
				}
				var smp sample
				var err error
				if cfg.isolate {
					smp, err = measureIsolated(ctx, st, ss, prof)
				} else {
					smp, err = measure(ctx, st.run, ss, prof)
				}
				if err != nil {
					return point{}, fmt.Errorf("%s, x=%d: %w", st.name, x, err)
				}
				got[st.key] = append(got[st.key], smp)
				line += fmt.Sprintf("; %s %.0f (steady %.0f, RSS %.0f MiB)", st.name, smp.handled, smp.steady, float64(smp.peakRSS)/(1<<20))
			}
			fmt.Fprintln(log, line+" msgs/s handled")
		}
		pt := point{x: x, by: map[string]stackFig{}}
		for key, ss := range got {
			m := medianSample(ss)
			f := stackFig{handled: m.handled, committed: m.committed, steady: m.steady, cpuUS: m.cpuUS, allocs: m.allocs,
				gcUS: m.gcUS, bytes: m.bytes, brokerUS: m.brokerUS, brokerOK: m.brokerOK}
			for _, smp := range ss {
				f.peakRSS, f.liveHeap = max(f.peakRSS, smp.peakRSS), max(f.liveHeap, smp.liveHeap)
			}
			pt.by[key] = f
		}
		pt.handled, pt.committed = pt.by[runtimeKafkaGo].handled, pt.by[runtimeKafkaGo].committed
		pt.raw = pt.by[rawKafkaGo].handled
		return pt, nil
	}

	// warm reads s's records once with the first stack, not counted, on
	// a broker that has just been produced to (see warmUp).
	warm := func(what string, s spec) error {
		s.franz = cfg.franz
		st := cfg.stacks[0]
		s.client = st.client
		var smp sample
		var err error
		if cfg.isolate {
			smp, err = measureIsolated(ctx, st, s, "")
		} else {
			smp, err = measure(ctx, st.run, s, "")
		}
		if err != nil {
			return fmt.Errorf("warm-up, %s, %s: %w", what, st.name, err)
		}
		fmt.Fprintf(log, "sweep: %s, warm-up (not counted): %s %.0f msgs/s, broker CPU %.2f µs/msg\n", what, st.name, smp.steady, smp.brokerUS)
		return nil
	}

	topics := []string{"sweep-a", "sweep-b", "sweep-c"}
	for _, p := range cfg.partitions {
		err := func() error {
			br, err := startBroker(topics, p/len(topics))
			if err != nil {
				return err
			}
			defer br.close()
			fmt.Fprintf(log, "sweep: %d partitions, producing %d\n", p, cfg.sweepN)
			if err := br.produce(ctx, topics, cfg.sweepN, valueSize); err != nil {
				return err
			}
			var cs [][]string
			for _, t := range topics {
				cs = append(cs, []string{t})
			}
			sp := spec{br: br, classes: cs, n: cfg.sweepN, commitInterval: cfg.commitInterval, franz: cfg.franz}
			if cfg.warmUp {
				if err := warm(fmt.Sprintf("%d partitions", p), sp); err != nil {
					return err
				}
			}
			pt, err := pointOf("partitions", p, sp)
			sw.partitions = append(sw.partitions, pt)
			if err != nil || !cfg.held || p != slices.Max(cfg.partitions) {
				return err
			}
			sw.heldAt = p
			sw.held, err = runHeld(ctx, cfg.stacks, sp, log)
			return err
		}()
		if err != nil {
			return sw, err
		}
	}

	if cfg.rental {
		err := func() error {
			br, err := startBroker(rental.Topics(), rentalPartitions)
			if err != nil {
				return err
			}
			defer br.close()
			fmt.Fprintf(log, "sweep: rental's topics, %d × %d partitions, producing %d\n", len(rental.Topics()), rentalPartitions, cfg.sweepN)
			if err := br.produce(ctx, rental.Topics(), cfg.sweepN, valueSize); err != nil {
				return err
			}
			var cs [][]string
			for _, t := range rental.Topics() {
				cs = append(cs, []string{t})
			}
			sp := spec{br: br, classes: cs, n: cfg.sweepN, commitInterval: cfg.commitInterval, rental: true, check: rental.Poisoned}
			if cfg.warmUp {
				if err := warm("rental's topics", sp); err != nil {
					return err
				}
			}
			pt, err := pointOf("rental", len(rental.Topics())*rentalPartitions, sp)
			sw.rental = &pt
			return err
		}()
		if err != nil {
			return sw, err
		}
	}

	if len(cfg.classes) == 0 {
		return sw, nil
	}
	sw.topics = slices.Max(cfg.classes)
	var ctopics []string
	for i := range sw.topics {
		ctopics = append(ctopics, fmt.Sprintf("class-topic-%d", i))
	}
	br, err := startBroker(ctopics, 3)
	if err != nil {
		return sw, err
	}
	defer br.close()
	fmt.Fprintf(log, "sweep: classes over %d topics × 3 partitions, producing %d\n", sw.topics, cfg.sweepN)
	if err := br.produce(ctx, ctopics, cfg.sweepN, valueSize); err != nil {
		return sw, err
	}
	if cfg.warmUp {
		if err := warm("classes' topics", spec{br: br, classes: [][]string{ctopics}, n: cfg.sweepN, commitInterval: cfg.commitInterval}); err != nil {
			return sw, err
		}
	}
	for _, k := range cfg.classes {
		cs := make([][]string, k)
		for i, t := range ctopics {
			cs[i%k] = append(cs[i%k], t)
		}
		pt, err := pointOf("classes", k, spec{br: br, classes: cs, n: cfg.sweepN, commitInterval: cfg.commitInterval})
		if err != nil {
			return sw, err
		}
		sw.classes = append(sw.classes, pt)
	}
	return sw, nil
}

// fetchSettings says how each stack fetches, as the sweep ran it.
func fetchSettings(st stack, franz franzFetch) string {
	switch st.key {
	case rawKafkaGo:
		return fmt.Sprintf("a kafka.Reader per partition, MinBytes 1, MaxBytes 10 MiB, MaxWait %s, QueueCapacity 100 (kafka-go's default)", hrt.DefaultFetchMaxWait)
	case runtimeKafkaGo:
		return fmt.Sprintf("a kafka.Client.Fetch loop per partition, 1 MiB per response, FetchMaxWait %s, FetchQueue %d (the runtime's defaults)", hrt.DefaultFetchMaxWait, hrt.DefaultFetchQueue)
	case rawFranzGo:
		return "one kgo.Client, fetches per broker, " + franz.String() + ", no pools (each batch's records in a new slice)"
	case runtimeFranzGo:
		return fmt.Sprintf("one kgo.Client, fetches per broker, %s, a queue per partition that pauses its partition at FetchQueue %d records (the runtime's defaults), each batch's records in a pooled slice (kgo.WithPools)", defaultFranzFetch, hrt.DefaultFetchQueue)
	}
	return ""
}

// ratio is one comparison: of's handled rate over to's.
type ratio struct{ name, of, to string }

// ratios are the comparisons the sweep prints, where it ran both stacks.
var ratios = []ratio{
	{"runtime/raw (kafka-go)", runtimeKafkaGo, rawKafkaGo},
	{"runtime/raw (franz-go)", runtimeFranzGo, rawFranzGo},
	{"runtime franz-go/kafka-go", runtimeFranzGo, runtimeKafkaGo},
	{"raw franz-go/kafka-go", rawFranzGo, rawKafkaGo},
}

func printSweep(w io.Writer, sw sweepResult) {
	has := func(key string) bool {
		return slices.ContainsFunc(sw.stacks, func(s stack) bool { return s.key == key })
	}
	// The columns past the rates, chosen once for the header and the rows.
	shown := slices.DeleteFunc(slices.Clone(ratios), func(r ratio) bool { return !has(r.of) || !has(r.to) })
	vsMean := has(runtimeKafkaGo)
	fmt.Fprintf(w, "\nno-op handler, %d-byte values, n=%d, median of %d interleaved rounds; fetch settings:\n\n", valueSize, sw.n, sw.rounds)
	for _, st := range sw.stacks {
		fmt.Fprintf(w, "- %s: %s\n", st.name, fetchSettings(st, sw.franz))
	}
	fmt.Fprintln(w)
	head := "| sweep |"
	sep := "| --- |"
	for _, st := range sw.stacks {
		head += " " + st.name + " msgs/s |"
		sep += " ---: |"
	}
	for _, r := range shown {
		head += " " + r.name + " |"
		sep += " ---: |"
	}
	if vsMean {
		head += " runtime on kafka-go vs sweep mean |"
		sep += " ---: |"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
	for _, s := range []struct {
		what string
		pts  []point
	}{{"partitions (3 topics)", sw.partitions}, {fmt.Sprintf("classes (%d topics × 3 partitions)", sw.topics), sw.classes}} {
		if len(s.pts) == 0 {
			continue
		}
		m := mean(s.pts)
		for _, p := range s.pts {
			line := fmt.Sprintf("| %d %s |", p.x, s.what)
			for _, st := range sw.stacks {
				line += fmt.Sprintf(" %.0f |", p.by[st.key].handled)
			}
			for _, r := range shown {
				line += fmt.Sprintf(" %.2f |", p.by[r.of].handled/p.by[r.to].handled)
			}
			if vsMean {
				line += fmt.Sprintf(" %.2f |", p.handled/m)
			}
			fmt.Fprintln(w, line)
		}
	}
	printSweepMemory(w, sw)
	printHeld(w, sw)
	printRental(w, sw)
}

// printRental prints the rental point: each stack's rate, CPU,
// allocations and memory, the runtime's against its raw client.
func printRental(w io.Writer, sw sweepResult) {
	p := sw.rental
	if p == nil {
		return
	}
	fmt.Fprintf(w, "\nexamples/rental's configuration: %d topics × %d partitions (orders, users, heartbeats), n=%d, no-op handlers; the runtime stacks run rental's classes (orders ordered, 8 workers, queue 64; users 4 workers, queue 32; heartbeats a batch class of 64, MaxWait 5ms, 4 calls, queue 256; each recycling its messages) with rental's own handlers (no work, no effects file: the poison check on each value, rental.Poisoned) and a metrics registry with the Go and process collectors; the raw stacks as in the sweep, each making the same poison check on each value, so that the CPU above them is the runtime's:\n\n",
		len(rental.Topics()), rentalPartitions, sw.n)
	fmt.Fprintln(w, "| stack | msgs/s | vs its raw client | steady msgs/s | CPU µs/msg | CPU µs/msg above its raw client | allocs/msg | peak RSS MiB |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, st := range sw.stacks {
		f, ok := p.by[st.key]
		if !ok {
			continue
		}
		vs, above := "–", "–"
		if raw, ok := p.by[rawOf(st.key)]; ok && rawOf(st.key) != st.key {
			vs = fmt.Sprintf("%.2f", f.handled/raw.handled)
			above = fmt.Sprintf("%+.2f", f.cpuUS-raw.cpuUS)
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %.0f | %.2f | %s | %.2f | %.1f |\n", st.name, f.handled, vs, f.steady, f.cpuUS, above, f.allocs, float64(f.peakRSS)/(1<<20))
	}
}

// rawOf is the raw stack a stack is compared with: its client's.
func rawOf(key string) string {
	switch key {
	case runtimeKafkaGo:
		return rawKafkaGo
	case runtimeFranzGo:
		return rawFranzGo
	}
	return key
}

// printHeld prints the held-memory measure.
func printHeld(w io.Writer, sw sweepResult) {
	if sw.held == nil {
		return
	}
	fmt.Fprintf(w, "\nheld memory at %d partitions: all %d messages of %d bytes produced (%d per partition), every handler blocked from the first message on; the live heap after GC once it stopped growing (within 1 %% or 256 KiB for %s), over the heap before the consumer was made:\n\n",
		sw.heldAt, sw.n, valueSize, sw.n/sw.heldAt, heldSettle)
	fmt.Fprintln(w, "| stack | held MiB | held KiB/partition | settled |")
	fmt.Fprintln(w, "| --- | ---: | ---: | --- |")
	for _, st := range sw.stacks {
		f, ok := sw.held[st.key]
		if !ok {
			continue
		}
		settled := "yes"
		if !f.settled {
			settled = fmt.Sprintf("no (largest in %s)", heldLimit)
		}
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %s |\n", st.name, float64(f.bytes)/(1<<20), float64(f.bytes)/float64(sw.heldAt)/1024, settled)
	}
}

// printSweepMemory prints the partitions sweep's memory: each stack's
// peak RSS and peak live heap at each point, CPU and allocations per
// message, and the memory per partition, the growth of the live heap
// and of the peak RSS from the fewest partitions to the most, over the
// partitions added.
func printSweepMemory(w io.Writer, sw sweepResult) {
	pts := sw.partitions
	if len(pts) == 0 {
		return
	}
	fmt.Fprintln(w, "\neach stack against partitions: the steady rate (first message handled to the last, without the join and the first fetch), CPU and allocations (medians; GC CPU is the part of the CPU the Go runtime counts as its garbage collector's, /cpu/classes/gc/total:cpu-seconds), the broker process's CPU over the same time (median; it shares the cores), and the memory of the measuring process (the largest of the rounds): peak RSS is VmHWM reset before each side, live heap the largest /gc/heap/live:bytes sampled every 10 ms:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| stack | partitions | steady msgs/s | CPU µs/msg | GC CPU µs/msg | broker CPU µs/msg | allocs/msg | bytes/msg | peak RSS MiB | peak live heap MiB |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, st := range sw.stacks {
		for _, p := range pts {
			f := p.by[st.key]
			broker := "–"
			if f.brokerOK {
				broker = fmt.Sprintf("%.2f", f.brokerUS)
			}
			fmt.Fprintf(w, "| %s | %d | %.0f | %.2f | %.2f | %s | %.2f | %.0f | %.1f | %.1f |\n", st.name, p.x,
				f.steady, f.cpuUS, f.gcUS, broker, f.allocs, f.bytes, float64(f.peakRSS)/(1<<20), float64(f.liveHeap)/(1<<20))
		}
	}
	lo, hi := pts[0], pts[0]
	for _, p := range pts {
		if p.x < lo.x {
			lo = p
		}
		if p.x > hi.x {
			hi = p
		}
	}
	if hi.x == lo.x {
		return
	}
	fmt.Fprintf(w, "\nmemory per partition, from %d to %d partitions ((figure at %d − figure at %d) ÷ %d):\n\n", lo.x, hi.x, hi.x, lo.x, hi.x-lo.x)
	fmt.Fprintln(w, "| stack | live heap KiB/partition | peak RSS KiB/partition |")
	fmt.Fprintln(w, "| --- | ---: | ---: |")
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(hi.x-lo.x) / 1024 }
	for _, st := range sw.stacks {
		h, l := hi.by[st.key], lo.by[st.key]
		fmt.Fprintf(w, "| %s | %.1f | %.1f |\n", st.name, per(h.liveHeap, l.liveHeap), per(h.peakRSS, l.peakRSS))
	}
}
