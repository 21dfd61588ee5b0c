package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/handoff-go/handoff/internal/rental"
)

// The CPU measure: what the runtime costs per message above raw
// franz-go, no-op handlers, in examples/rental's configuration and with
// one plain class, each side in a process of its own (measureIsolated)
// after one untimed read, the sides taking turns.

// cpuPoint is one configuration's medians per stack key.
type cpuPoint struct {
	name   string
	by     map[string]sample
	deltas []float64 // runtime − raw franz-go CPU µs/msg, per round
}

// cpuStacks are the stacks of the CPU measure, raw first.
func cpuStacks() []stack {
	var out []stack
	for _, st := range allStacks {
		if st.key == rawFranzGo || st.key == runtimeFranzGo {
			out = append(out, st)
		}
	}
	return out
}

// runCPU measures the plain class and rental's configuration, n messages
// each, over rounds rounds.
func runCPU(ctx context.Context, n, rounds int, commitInterval time.Duration, franz franzFetch, log io.Writer) ([]cpuPoint, error) {
	plain := []string{"plain-a", "plain-b", "plain-c"}
	br, err := startBroker(slices.Concat(plain, rental.Topics()), rentalPartitions)
	if err != nil {
		return nil, err
	}
	defer br.close()
	if err := br.produce(ctx, plain, n, valueSize); err != nil {
		return nil, err
	}
	if err := br.produce(ctx, rental.Topics(), n, valueSize); err != nil {
		return nil, err
	}
	var rentalClasses [][]string
	for _, t := range rental.Topics() {
		rentalClasses = append(rentalClasses, []string{t})
	}
	specs := []struct {
		name string
		s    spec
	}{
		{"one plain class (3 topics × 4 partitions)", spec{br: br, classes: [][]string{plain}, n: n, commitInterval: commitInterval, franz: franz}},
		{"examples/rental's configuration", spec{br: br, classes: rentalClasses, n: n, commitInterval: commitInterval, franz: franz,
			rental: true, check: rental.Poisoned}},
	}
	stacks := cpuStacks()
	var out []cpuPoint
	for _, sp := range specs {
		if _, err := measureIsolated(ctx, stacks[0], sp.s, ""); err != nil { // warm-up, not counted
			return nil, fmt.Errorf("cpu, %s, warm-up: %w", sp.name, err)
		}
		got := map[string][]sample{}
		pt := cpuPoint{name: sp.name, by: map[string]sample{}}
		for r := range rounds {
			k := r % len(stacks)
			for _, st := range slices.Concat(stacks[k:], stacks[:k]) {
				s := sp.s
				s.client = st.client
				smp, err := measureIsolated(ctx, st, s, "")
				if err != nil {
					return nil, fmt.Errorf("cpu, %s, %s: %w", sp.name, st.name, err)
				}
				got[st.key] = append(got[st.key], smp)
				fmt.Fprintf(log, "cpu %s round %d %-20s %.2f µs/msg (GC %.2f), %.2f allocs/msg, %.0f msgs/s\n",
					sp.name, r, st.name, smp.cpuUS, smp.gcUS, smp.allocs, smp.handled)
			}
			pt.deltas = append(pt.deltas, got[runtimeFranzGo][r].cpuUS-got[rawFranzGo][r].cpuUS)
		}
		for key, ss := range got {
			pt.by[key] = medianSample(ss)
		}
		out = append(out, pt)
	}
	return out, nil
}

// printCPU writes the CPU measure.
func printCPU(w io.Writer, pts []cpuPoint, n, rounds int, franz franzFetch) {
	fmt.Fprintf(w, "No-op handlers, %d messages of %d bytes per side, medians of %d rounds, each side in a process of its own (the broker in another); CPU is getrusage user+sys of the side's process from its start to its last message handled, over the messages (the start's fixed cost, larger for the runtime, which creates and reads its changelog, spread over them); raw franz-go has the runtime's franz-go fetch settings (%s) and, in rental's configuration, makes rental's poison check on each value as rental's handlers do.\n\n",
		n, valueSize, rounds, franz)
	fmt.Fprintln(w, "| configuration | stack | msgs/s | CPU µs/msg | of it GC | allocs/msg | bytes/msg | runtime − raw franz-go, µs/msg (rounds) |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, pt := range pts {
		for _, st := range cpuStacks() {
			m := pt.by[st.key]
			delta := "–"
			if st.key == runtimeFranzGo {
				delta = fmt.Sprintf("%+.2f (%+.2f … %+.2f)", median(pt.deltas), slices.Min(pt.deltas), slices.Max(pt.deltas))
			}
			fmt.Fprintf(w, "| %s | %s | %.0f | %.2f | %.2f | %.2f | %.0f | %s |\n", pt.name, st.name, m.handled, m.cpuUS, m.gcUS, m.allocs, m.bytes, delta)
		}
	}
	for _, pt := range pts {
		if pt.name == "examples/rental's configuration" {
			d := median(pt.deltas)
			verdict := "met"
			if d > 0.2 {
				verdict = "not met"
			}
			fmt.Fprintf(w, "\nGoal: rental's configuration on franz-go ≤ raw franz-go + 0.2 µs per message: %+.2f µs, %s.\n", d, verdict)
		}
	}
}
