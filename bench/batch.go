package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// The heartbeats measure: one class reading one topic with a handler
// that costs what a bulk insert does, callCost per call plus msgCost per
// message, run once as a batch class (up to batchMax messages per call)
// and once handling one message per call, with the same Workers (the
// calls at once, as database connections would bound them).
const (
	callCost   = time.Millisecond
	msgCost    = 10 * time.Microsecond
	batchMax   = 100
	batchWait  = 5 * time.Millisecond
	beatsTopic = "beats"
)

// batchResult is the heartbeats measure: medians over the rounds.
type batchResult struct {
	n, workers    int
	single, batch sample
	ratios        []float64 // batch handled rate / single's, per round
	// calls and perCall are the batch side's handler calls and mean
	// messages per call in its last round.
	calls   int64
	perCall float64
}

// runBatch measures the heartbeats class as a batch class against the
// same class one message at a time, on a broker of its own, cfg.rounds
// interleaved rounds.
func runBatch(ctx context.Context, cfg config, log io.Writer) (*batchResult, error) {
	br, err := startBroker([]string{beatsTopic}, cfg.tablePartition)
	if err != nil {
		return nil, err
	}
	defer br.close()
	fmt.Fprintf(log, "heartbeats: broker process %d on %s; producing %d messages of %d bytes\n", br.cmd.Process.Pid, br.addr, cfg.batchN, valueSize)
	if err := br.produce(ctx, []string{beatsTopic}, cfg.batchN, valueSize); err != nil {
		return nil, err
	}
	res := &batchResult{n: cfg.batchN, workers: cfg.batchWorkers}
	base := spec{br: br, classes: [][]string{{beatsTopic}}, n: cfg.batchN, workers: cfg.batchWorkers,
		commitInterval: cfg.commitInterval, callCost: callCost, msgCost: msgCost}
	bs := base
	bs.maxBatch = batchMax
	var singles, batches []sample
	for r := range cfg.rounds {
		sides := []struct {
			name string
			s    spec
			out  *[]sample
		}{{"single", base, &singles}, {"batch", bs, &batches}}
		if r%2 == 1 {
			slices.Reverse(sides)
		}
		for _, sd := range sides {
			smp, err := measure(ctx, runHandoff, sd.s, "")
			if err != nil {
				return nil, fmt.Errorf("heartbeats %s: %w", sd.name, err)
			}
			*sd.out = append(*sd.out, smp)
			fmt.Fprintf(log, "round %d heartbeats %-6s %9.0f msgs/s handled, %9.0f committed, %.2f µs CPU/msg\n",
				r, sd.name, smp.handled, smp.committed, smp.cpuUS)
			if sd.name == "batch" {
				res.calls = smp.calls
			}
		}
		res.ratios = append(res.ratios, batches[r].handled/singles[r].handled)
	}
	res.single, res.batch = medianSample(singles), medianSample(batches)
	if res.calls > 0 {
		res.perCall = float64(cfg.batchN) / float64(res.calls)
	}
	return res, nil
}

func printBatch(w io.Writer, cfg config, b *batchResult) {
	fmt.Fprintf(w, "\nHeartbeats (%d messages, 1 topic × %d partitions, a handler costing %s per call + %s per message, %d workers; %d interleaved rounds, medians):\n",
		b.n, cfg.tablePartition, callCost, msgCost, b.workers, cfg.rounds)
	fmt.Fprintln(w, "| heartbeats class | handled msgs/s | committed msgs/s | CPU µs/msg |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: |")
	fmt.Fprintf(w, "| one message per call | %.0f | %.0f | %.2f |\n", b.single.handled, b.single.committed, b.single.cpuUS)
	fmt.Fprintf(w, "| batch class (MaxBatch %d, MaxWait %s) | %.0f | %.0f | %.2f |\n", batchMax, batchWait, b.batch.handled, b.batch.committed, b.batch.cpuUS)
	fmt.Fprintf(w, "\nbatch vs one at a time (handled): %.1f× (%.1f–%.1f); %.1f messages per batch call in the last round\n",
		median(b.ratios), slices.Min(b.ratios), slices.Max(b.ratios), b.perCall)
}
