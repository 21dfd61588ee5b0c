package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// goalInputs is what printGoals reads: the table's rows and queued
// memory (nil when the table did not run) and the sweep.
type goalInputs struct {
	rows []*row
	mem  *queued
	sw   sweepResult
}

// goal is one line of the goals table: what is asked, the figures
// measured, and whether every figure meets it (unknown when a figure is
// missing).
type goal struct {
	what, want string
	figures    []string
	met, known bool
}

// The goals of issue 25.
const (
	goalFranzRatio   = 0.95 // runtime on franz-go / raw franz-go, no-op
	goalFranzCPU     = 0.3  // µs CPU per message above raw franz-go
	goalFranzAllocs  = 1.0  // allocations per message above raw franz-go
	goalRentalRatio  = 0.9  // rental configuration / its raw client
	goalRentalCPU    = 0.5  // µs above raw franz-go
	goalRentalAllocs = 1.5  // allocations per message in all, franz-go
	goalKafkaRatio   = 0.95 // runtime on kafka-go / raw kafka-go, same reader settings
	goalCeiling      = 0.98 // 2 ms handler, of the worker ceiling
	goalQueuedMemory = 1.3  // live heap per queued 1 KiB message / payload
	goalPeakRSSMiB   = 73.0 // peak RSS at 300 partitions, runtime on franz-go
)

// printGoals prints every goal of issue 25 in one table, with the
// figures it is judged by, from the table and the sweep of this run.
func printGoals(w io.Writer, in goalInputs) {
	sw := in.sw
	var gs []goal
	type at struct {
		label string
		p     point
	}
	var pts []at
	for _, p := range sw.partitions {
		pts = append(pts, at{fmt.Sprintf("%d partitions", p.x), p})
	}
	for _, p := range sw.classes {
		pts = append(pts, at{fmt.Sprintf("%d classes", p.x), p})
	}
	fig := func(p point, key string) (stackFig, bool) {
		f, ok := p.by[key]
		return f, ok && f.handled > 0
	}

	ratio := goal{what: "runtime on franz-go, no-op, vs raw franz-go (same fetch settings)", want: fmt.Sprintf("≥ %.2f at each point", goalFranzRatio), met: true}
	cost := goal{what: "runtime on franz-go, no-op: CPU and allocations per message above raw franz-go", want: fmt.Sprintf("≤ %.1f µs and ≤ %.0f", goalFranzCPU, goalFranzAllocs), met: true}
	kafka := goal{what: "runtime on kafka-go, no-op, vs raw kafka-go", want: fmt.Sprintf("≥ %.2f", goalKafkaRatio), met: true}
	for _, a := range pts {
		rt, ok1 := fig(a.p, runtimeFranzGo)
		raw, ok2 := fig(a.p, rawFranzGo)
		if ok1 && ok2 {
			r := rt.handled / raw.handled
			ratio.figures = append(ratio.figures, fmt.Sprintf("%s %.2f", a.label, r))
			ratio.met = ratio.met && r >= goalFranzRatio
			ratio.known = true
			dc, da := rt.cpuUS-raw.cpuUS, rt.allocs-raw.allocs
			cost.figures = append(cost.figures, fmt.Sprintf("%s %+.2f µs (%.2f vs %.2f; GC %+.2f), %+.2f allocs", a.label, dc, rt.cpuUS, raw.cpuUS, rt.gcUS-raw.gcUS, da))
			cost.met = cost.met && dc <= goalFranzCPU && da <= goalFranzAllocs
			cost.known = true
		}
		rk, ok1 := fig(a.p, runtimeKafkaGo)
		rawk, ok2 := fig(a.p, rawKafkaGo)
		if ok1 && ok2 {
			r := rk.handled / rawk.handled
			kafka.figures = append(kafka.figures, fmt.Sprintf("%s %.2f (reader defaults)", a.label, r))
		}
	}
	if r := rowByKey(in.rows, "noop-kafka-go"); r != nil && len(r.sameQueue) > 0 {
		m := median(r.sameQueue)
		kafka.figures = append(kafka.figures, fmt.Sprintf("table (3 × 4 partitions) %.2f against raw kafka-go with the same reader queue, %.2f against its defaults", m, median(r.ratios)))
		kafka.met, kafka.known = m >= goalKafkaRatio, true
	}
	gs = append(gs, ratio, cost)

	rentalF := goal{what: "rental configuration on franz-go, no-op (rental's poison check on both sides), vs raw franz-go", want: fmt.Sprintf("≥ %.1f, ≤ %.1f µs above, ≤ %.1f allocs/msg in all", goalRentalRatio, goalRentalCPU, goalRentalAllocs)}
	rentalK := goal{what: "rental configuration on kafka-go, no-op (the poison check on both sides), vs raw kafka-go", want: fmt.Sprintf("≥ %.1f", goalRentalRatio)}
	if p := sw.rental; p != nil {
		if rt, ok := fig(*p, runtimeFranzGo); ok {
			if raw, ok := fig(*p, rawFranzGo); ok {
				r, dc := rt.handled/raw.handled, rt.cpuUS-raw.cpuUS
				rentalF.figures = []string{fmt.Sprintf("%.2f", r), fmt.Sprintf("%+.2f µs (%.2f vs %.2f)", dc, rt.cpuUS, raw.cpuUS), fmt.Sprintf("%.2f allocs/msg", rt.allocs)}
				rentalF.met, rentalF.known = r >= goalRentalRatio && dc <= goalRentalCPU && rt.allocs <= goalRentalAllocs, true
			}
		}
		if rt, ok := fig(*p, runtimeKafkaGo); ok {
			if raw, ok := fig(*p, rawKafkaGo); ok {
				r := rt.handled / raw.handled
				rentalK.figures = []string{fmt.Sprintf("%.2f (%.2f vs %.2f µs, %.2f allocs/msg)", r, rt.cpuUS, raw.cpuUS, rt.allocs)}
				rentalK.met, rentalK.known = r >= goalRentalRatio, true
			}
		}
	}
	gs = append(gs, rentalF, rentalK, kafka)

	slow := goal{what: "2 ms handler, steady rate of the worker ceiling (workers ÷ a time.Sleep(2ms) timed alone)", want: fmt.Sprintf("≥ %.2f on both clients", goalCeiling), met: true}
	for _, key := range []string{"slow-kafka-go", "slow-franz-go"} {
		if r := rowByKey(in.rows, key); r != nil && r.ceiling > 0 {
			c := r.med.steady / r.ceiling
			slow.figures = append(slow.figures, fmt.Sprintf("%s %.2f (workers busy %.2f)", strings.TrimPrefix(key, "slow-"), c, r.med.busy))
			slow.met, slow.known = slow.met && c >= goalCeiling, true
		}
	}
	if r := rowByKey(in.rows, "slow-raw"); r != nil && r.ceiling > 0 {
		slow.figures = append(slow.figures, fmt.Sprintf("raw kafka-go + pond %.2f", r.med.steady/r.ceiling))
	}
	gs = append(gs, slow)

	mem := goal{what: "live heap per queued 1 KiB message, over its payload", want: fmt.Sprintf("≤ %.1f×", goalQueuedMemory)}
	if q := in.mem; q != nil {
		x := q.perMsg / q.payload
		mem.figures = []string{fmt.Sprintf("%.2f× (%.0f bytes for %.0f)", x, q.perMsg, q.payload)}
		mem.met, mem.known = x <= goalQueuedMemory, true
	}
	rss := goal{what: "peak RSS at 300 partitions (here: the sweep's most), runtime on franz-go", want: fmt.Sprintf("≤ %.0f MiB", goalPeakRSSMiB)}
	if len(sw.partitions) > 0 {
		p := slices.MaxFunc(sw.partitions, func(a, b point) int { return a.x - b.x })
		if f, ok := fig(p, runtimeFranzGo); ok {
			mib := float64(f.peakRSS) / (1 << 20)
			rss.figures = []string{fmt.Sprintf("%d partitions %.1f MiB", p.x, mib)}
			if raw, ok := fig(p, rawFranzGo); ok {
				rss.figures = append(rss.figures, fmt.Sprintf("raw franz-go %.1f", float64(raw.peakRSS)/(1<<20)))
			}
			rss.met, rss.known = mib <= goalPeakRSSMiB, true
		}
	}
	gs = append(gs, mem, rss)

	fmt.Fprintf(w, "\nthe goals of issue 25, from this run (ratios of medians measured side by side; n=%d, %d rounds):\n\n", sw.n, sw.rounds)
	fmt.Fprintln(w, "| goal | wanted | measured | met |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	for _, g := range gs {
		met := "not measured"
		if g.known {
			met = map[bool]string{true: "yes", false: "no"}[g.met]
		}
		figs := "–"
		if len(g.figures) > 0 {
			figs = strings.Join(g.figures, "; ")
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", g.what, g.want, figs, met)
	}
}

// rowByKey returns the table row with key, nil if there is none.
func rowByKey(rows []*row, key string) *row {
	if i := slices.IndexFunc(rows, func(r *row) bool { return r.key == key }); i >= 0 {
		return rows[i]
	}
	return nil
}
