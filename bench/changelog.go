package main

import (
	"context"
	"fmt"
	"io"
	"slices"

	hrt "github.com/handoff-go/handoff/runtime"
)

// goalChangelogRatio is the no-op throughput with the state changelog
// over the same build with Config.LocalStateOnly: the success path
// writes nothing to the changelog.
const goalChangelogRatio = 0.97

// changelogAB is what the changelog comparison found, per client: the
// handled rate with the changelog over the rate with LocalStateOnly, per
// round, and the medians of both sides.
type changelogAB struct {
	n, rounds int
	clients   []hrt.Client
	ratios    map[hrt.Client][]float64
	// steady is the same ratio of the steady rates (first message
	// handled to last): without the join, and without the restores of
	// the partitions' (empty) changelogs before their first fetch.
	steady  map[hrt.Client][]float64
	on, off map[hrt.Client]sample
}

// runChangelogAB runs the runtime's no-op side on 3 topics of
// cfg.tablePartition partitions, on each client with the changelog (the
// default) and with LocalStateOnly, the four sides alternating and their
// order turning every round.
func runChangelogAB(ctx context.Context, cfg config, log io.Writer) (changelogAB, error) {
	topics := []string{"cl-a", "cl-b", "cl-c"}
	ab := changelogAB{n: cfg.n, rounds: cfg.rounds, clients: []hrt.Client{hrt.ClientKafkaGo, hrt.ClientFranzGo},
		ratios: map[hrt.Client][]float64{}, steady: map[hrt.Client][]float64{}, on: map[hrt.Client]sample{}, off: map[hrt.Client]sample{}}
	br, err := startBroker(topics, cfg.tablePartition)
	if err != nil {
		return ab, err
	}
	defer br.close()
	fmt.Fprintf(log, "changelog comparison: broker process %d on %s; producing %d messages of %d bytes\n",
		br.cmd.Process.Pid, br.addr, cfg.n, valueSize)
	if err := br.produce(ctx, topics, cfg.n, valueSize); err != nil {
		return ab, err
	}
	var classes [][]string
	for _, t := range topics {
		classes = append(classes, []string{t})
	}
	base := spec{br: br, classes: classes, n: cfg.n, commitInterval: cfg.commitInterval}
	// One untimed read first, as the table does: the first read after the
	// produce runs slower whichever side it is.
	if _, err := measure(ctx, runRaw, base, ""); err != nil {
		return ab, err
	}
	type side struct {
		client hrt.Client
		local  bool
	}
	var sides []side
	for _, c := range ab.clients {
		sides = append(sides, side{c, false}, side{c, true})
	}
	got := map[side][]sample{}
	for r := range cfg.rounds {
		k := r % len(sides)
		order := append(slices.Clone(sides[k:]), sides[:k]...)
		for _, sd := range order {
			s := base
			s.client, s.localStateOnly = sd.client, sd.local
			smp, err := measure(ctx, runHandoff, s, "")
			if err != nil {
				return ab, err
			}
			got[sd] = append(got[sd], smp)
			fmt.Fprintf(log, "round %d %-8s local-state-only=%-5v %9.0f msgs/s handled, %9.0f steady, %.2f µs CPU/msg, %.2f allocs/msg\n",
				r, sd.client, sd.local, smp.handled, smp.steady, smp.cpuUS, smp.allocs)
		}
		for _, c := range ab.clients {
			on, off := got[side{c, false}], got[side{c, true}]
			ab.ratios[c] = append(ab.ratios[c], on[r].handled/off[r].handled)
			ab.steady[c] = append(ab.steady[c], on[r].steady/off[r].steady)
		}
	}
	for _, c := range ab.clients {
		ab.on[c], ab.off[c] = medianSample(got[side{c, false}]), medianSample(got[side{c, true}])
	}
	return ab, nil
}

// printChangelogAB prints the comparison and whether it meets
// goalChangelogRatio on both clients.
func printChangelogAB(w io.Writer, ab changelogAB) {
	fmt.Fprintf(w, "\nstate changelog on vs LocalStateOnly, no-op, 3 topics; n=%d, %d interleaved rounds (ratios per round, min/median/max):\n\n", ab.n, ab.rounds)
	fmt.Fprintln(w, "| client | changelog msgs/s | local only msgs/s | ratio min | median | max | steady ratio min / median / max | CPU µs/msg on / off | allocs/msg on / off | met (≥ 0.97, median) |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, c := range ab.clients {
		rs := ab.ratios[c]
		on, off := ab.on[c], ab.off[c]
		met := map[bool]string{true: "yes", false: "no"}[median(rs) >= goalChangelogRatio]
		ss := ab.steady[c]
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.3f | %.3f | %.3f | %.3f / %.3f / %.3f | %.2f / %.2f | %.2f / %.2f | %s |\n",
			c, on.handled, off.handled, slices.Min(rs), median(rs), slices.Max(rs), slices.Min(ss), median(ss), slices.Max(ss),
			on.cpuUS, off.cpuUS, on.allocs, off.allocs, met)
	}
}
