package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReportSmoke writes a report of tiny measures: every section is
// there, and the deploy rows count every message sent as handled.
// Figures are not checked.
func TestReportSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "bench.md")
	cfg := config{n: 1, slowN: 1, rounds: 1, tablePartition: 1, workers: 1, commitInterval: 100 * time.Millisecond, franz: defaultFranzFetch,
		report: reportCfg{path: path,
			lat:             latCfg{partitions: 2, workers: 4, work: time.Millisecond, loads: []float64{0.5}, run: 1500 * time.Millisecond, warm: 500 * time.Millisecond, rounds: 1},
			deployInstances: 2, deployPartitions: 2, deployWorkers: 2, deployWork: 5 * time.Millisecond,
			deployBefore: 1500 * time.Millisecond, deploySettle: 200 * time.Millisecond, deployDrain: 10 * time.Millisecond,
			deployDown: 200 * time.Millisecond, deployLoad: 0.3, deployOver: 1.2, cpuN: 3000}}
	runChecked(t, ctx, cfg)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, want := range []string{reportCommand, "bench-journal.md", "## End-to-end latency", "| 50% (", "raw kafka-go + pond",
		"## The deploy gap", "| steady:", "| past capacity:", "## CPU and allocations", "examples/rental's configuration | runtime on franz-go"} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(line, "| steady:") && !strings.HasPrefix(line, "| past capacity:") {
			continue
		}
		f := strings.Split(strings.Trim(line, "| "), "|")
		sent, handled, _ := strings.Cut(strings.TrimSpace(f[len(f)-1]), " / ")
		if sent != handled || sent == "0" {
			t.Errorf("deploy row %q: sent %s, handled %s", f[0], sent, handled)
		}
	}
}

func TestLongestGap(t *testing.T) {
	for _, c := range []struct {
		starts   []int64
		from, to int64
		want     time.Duration
	}{
		{nil, 0, 100, 100},
		{[]int64{10, 20, 70}, 0, 100, 50},
		{[]int64{-5, 10, 95, 200}, 0, 100, 85},
		{[]int64{40}, 0, 100, 60},
	} {
		if got := longestGap(c.starts, c.from, c.to); got != c.want {
			t.Errorf("longestGap(%v, %d, %d) = %d, want %d", c.starts, c.from, c.to, got, c.want)
		}
	}
}

func TestQuantiles(t *testing.T) {
	var ds []time.Duration
	for i := 1000; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	q := quantiles(ds, 0.5, 0.99, 0.999)
	if q[0] != 501 || q[1] != 991 || q[2] != 1000 {
		t.Errorf("quantiles = %v, want [501 991 1000]", q)
	}
	if q := quantiles(nil, 0.5); q[0] != 0 {
		t.Errorf("quantiles of none = %v", q)
	}
}
