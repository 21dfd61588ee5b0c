package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"strings"
	"time"
)

// reportCfg is the command line of the measures docs/bench.md shows:
// latency, the deploy gap and CPU per message.
type reportCfg struct {
	path                   string // -report: write docs/bench.md here
	latency, deploy, cpu   bool   // run that measure alone, to stdout
	lat                    latCfg
	deployInstances        int
	deployPartitions       int
	deployWorkers          int
	deployWork             time.Duration
	deployBefore           time.Duration
	deploySettle           time.Duration
	deployDrain            time.Duration
	deployDown             time.Duration
	deployHeartbeat        time.Duration
	deployLoad, deployOver float64
	cpuN                   int
}

// any reports whether a measure of the report was asked for.
func (r reportCfg) any() bool { return r.path != "" || r.latency || r.deploy || r.cpu }

// reportCommand is the one command that regenerates docs/bench.md.
const reportCommand = "go run ./bench -report docs/bench.md"

// runReport runs the measures asked for: with -report all three, written
// as docs/bench.md's markdown to its path; otherwise each asked for, to
// out.
func runReport(ctx context.Context, cfg config, out, log io.Writer) error {
	rc := cfg.report
	all := rc.path != ""
	var body bytes.Buffer
	w := io.Writer(&body)
	if !all {
		w = out
	}
	started := time.Now()
	if all || rc.latency {
		res, err := runLatency(ctx, rc.lat, cfg.franz, log)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\n## End-to-end latency at 50%% and 90%% of the ceiling\n\n")
		printLatency(w, res, cfg.franz)
	}
	if all || rc.deploy {
		var figs []deployFig
		for _, d := range []struct {
			name string
			load float64
		}{{"steady", rc.deployLoad}, {"past capacity", rc.deployOver}} {
			fig, err := runDeploy(ctx, deployCfg{name: d.name, partitions: rc.deployPartitions, instances: rc.deployInstances,
				workers: rc.deployWorkers, work: rc.deployWork, load: d.load, before: rc.deployBefore, settle: rc.deploySettle,
				warm: time.Second, drain: rc.deployDrain, down: rc.deployDown, heartbeat: rc.deployHeartbeat}, log)
			if err != nil {
				return err
			}
			figs = append(figs, fig)
		}
		fmt.Fprintf(w, "\n## The deploy gap: a rolling restart onto empty disks\n\n")
		printDeploy(w, figs)
	}
	if all || rc.cpu {
		pts, err := runCPU(ctx, rc.cpuN, cfg.rounds, cfg.commitInterval, cfg.franz, log)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\n## CPU and allocations per message above raw franz-go\n\n")
		printCPU(w, pts, rc.cpuN, cfg.rounds, cfg.franz)
	}
	fmt.Fprintf(log, "measures took %s\n", time.Since(started).Round(time.Second))
	if !all {
		return nil
	}
	var doc bytes.Buffer
	writeReportHead(&doc, started, time.Since(started))
	doc.Write(body.Bytes())
	if err := os.WriteFile(rc.path, doc.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	fmt.Fprintf(out, "report written to %s\n", rc.path)
	return nil
}

// writeReportHead writes docs/bench.md's top: what it is, where and when
// it was measured, and how to reproduce it.
func writeReportHead(w io.Writer, at time.Time, took time.Duration) {
	fmt.Fprintf(w, `# Benchmark: current results

This page is generated: do not edit it by hand. It was written by

    %s

on %s (the measures took %s), on %s. The machine is shared and noisy
(other builds and tests ran on the same cores at the same time): read the
figures as ratios within one run, not as absolute speeds. The dated
journal of earlier runs and investigations is frozen in
[bench-journal.md](bench-journal.md).

## How to reproduce

From the repository root:

    %s     # everything below, a few minutes
    go run ./bench -latency                   # one measure alone, to stdout
    go run ./bench -deploy
    go run ./bench -cpu

The broker is the embedded one (kfake) in a process of its own (this
binary re-executed), so CPU and allocations count the consumer only. The
other measures of the program (the throughput table, the scaling sweep
and its plot, the changelog A/B, the heartbeats batch measure) run
without -report; see `+"`go run ./bench -h`"+` and the top of bench/main.go.
`, reportCommand, at.UTC().Format("2006-01-02 15:04 MST"), took.Round(time.Second), machine(), reportCommand)
}

// machine describes this machine: CPU model, cores, Go, OS.
func machine() string {
	model := "an unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores visible to Go, %s %s/%s", model, goruntime.NumCPU(), goruntime.Version(), goruntime.GOOS, goruntime.GOARCH)
}
