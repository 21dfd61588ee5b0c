package main

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The test binary is re-executed as the broker process, as the
	// command's binary is.
	if spec := os.Getenv(brokerEnv); spec != "" {
		os.Exit(brokerChild(spec))
	}
	goleak.VerifyTestMain(m,
		// kafka-go's package-level connection pool for the default
		// transport keeps an idle reaper per address.
		goleak.IgnoreAnyFunction("github.com/segmentio/kafka-go.(*connPool).discover"),
	)
}

func TestBrokerProcessStops(t *testing.T) {
	br, err := startBroker([]string{"t"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	br.close()
	if st := br.cmd.ProcessState; st == nil || !st.Exited() || st.ExitCode() != 0 {
		t.Fatalf("broker process state after close: %v", st)
	}
}

// TestSmoke runs a tiny configuration of everything: the table (both
// comparisons and the queued-memory measure, one round) and a two-point
// sweep (runtime and raw) with its plot. Figures
// are not checked, only that every side finished and reported.
func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := config{
		n: 2000, slowN: 200, memN: 500, fullStop: true, rounds: 1, tablePartition: 2, workers: 4,
		work: 2 * time.Millisecond, commitInterval: 100 * time.Millisecond,
		partitions: []int{3}, classes: []int{2}, sweepN: 1000,
		plot: filepath.Join(t.TempDir(), "scaling.png"), table: true,
	}
	if err := cfg.check(); err != nil {
		t.Fatal(err)
	}
	var out, log bytes.Buffer
	if err := run(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Log("\n" + log.String() + out.String())
	for _, want := range []string{"raw kafka-go, one committer, no-op", "handoff runtime, no-op",
		"2ms handler", "3 partitions (3 topics)", "2 classes (2 topics × 3 partitions)", "Memory per queued message", "with the same reader queue", "Stop with full pools", "workers busy"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	f, err := os.Open(cfg.plot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatalf("plot: %v", err)
	}
}

func TestNiceStep(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{0.7, 1}, {1, 1}, {1.1, 2}, {3, 5}, {120_000, 200_000}, {600, 1000}} {
		if got := niceStep(c.in); got != c.want {
			t.Errorf("niceStep(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestGlyphs: every letter and digit the labels may use has a glyph of
// five rows of one width.
func TestGlyphs(t *testing.T) {
	for _, r := range "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/-+%.,=() " {
		g, ok := glyphs[r]
		if !ok {
			t.Errorf("no glyph for %q", r)
			continue
		}
		for _, row := range g {
			if len(row) != len(g[0]) {
				t.Errorf("glyph %q has rows of different widths", r)
			}
		}
	}
}
