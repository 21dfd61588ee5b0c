package main

import (
	"context"
	"fmt"
	"io"
	"slices"
)

// point is one sweep point: medians over the rounds of the runtime's
// rates and of raw kafka-go's handled rate on the same topics.
type point struct {
	x                  int
	handled, committed float64
	raw                float64
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

// sweepResult is how the runtime's no-op throughput scales.
type sweepResult struct {
	n, rounds  int
	partitions []point // 3 topics, x partitions in all
	classes    []point // max(classes) topics of 3 partitions, x classes
	topics     int     // topics of the classes sweep
}

// runSweep measures the runtime (no-op handler) against partitions, then
// against classes, each point with its own topics and fresh groups, and
// raw kafka-go on the same topics in the same rounds (interleaved, order
// flipped every round): raw is what the broker and the machine allow at
// that point, and in the classes sweep, where its setup is the same at
// every point, its spread is the noise of the measure. The partitions
// sweep starts a broker per point.
func runSweep(ctx context.Context, cfg config, log io.Writer) (sweepResult, error) {
	sw := sweepResult{n: cfg.sweepN, rounds: cfg.rounds}
	pointOf := func(x int, s spec) (point, error) {
		var hs, cs, raws []float64
		for r := range cfg.rounds {
			var rt, raw sample
			for i := range 2 {
				isRaw := (i == 0) == (r%2 == 0) // raw first in even rounds
				side := runHandoff
				if isRaw {
					side = runRaw
				}
				smp, err := measure(ctx, side, s, "")
				if err != nil {
					return point{}, err
				}
				if isRaw {
					raw = smp
				} else {
					rt = smp
				}
			}
			raws = append(raws, raw.handled)
			fmt.Fprintf(log, "sweep x=%d round %d: runtime %9.0f msgs/s handled, %9.0f committed; raw %9.0f handled\n",
				x, r, rt.handled, rt.committed, raw.handled)
			hs, cs = append(hs, rt.handled), append(cs, rt.committed)
		}
		return point{x: x, handled: median(hs), committed: median(cs), raw: median(raws)}, nil
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
			pt, err := pointOf(p, spec{br: br, classes: cs, n: cfg.sweepN, commitInterval: cfg.commitInterval})
			sw.partitions = append(sw.partitions, pt)
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
	for _, k := range cfg.classes {
		cs := make([][]string, k)
		for i, t := range ctopics {
			cs[i%k] = append(cs[i%k], t)
		}
		pt, err := pointOf(k, spec{br: br, classes: cs, n: cfg.sweepN, commitInterval: cfg.commitInterval})
		if err != nil {
			return sw, err
		}
		sw.classes = append(sw.classes, pt)
	}
	return sw, nil
}

func printSweep(w io.Writer, sw sweepResult) {
	fmt.Fprintf(w, "\nno-op handler, n=%d, median of %d interleaved rounds:\n\n", sw.n, sw.rounds)
	fmt.Fprintln(w, "| sweep | runtime handled msgs/s | runtime committed msgs/s | raw kafka-go handled msgs/s | runtime vs raw | runtime vs sweep mean |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: |")
	for _, s := range []struct {
		what string
		pts  []point
	}{{"partitions (3 topics)", sw.partitions}, {fmt.Sprintf("classes (%d topics × 3 partitions)", sw.topics), sw.classes}} {
		if len(s.pts) == 0 {
			continue
		}
		m := mean(s.pts)
		for _, p := range s.pts {
			fmt.Fprintf(w, "| %d %s | %.0f | %.0f | %.0f | %.2f | %.2f |\n", p.x, s.what, p.handled, p.committed, p.raw, p.handled/p.raw, p.handled/m)
		}
	}
}
