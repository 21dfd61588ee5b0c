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
		plot: filepath.Join(t.TempDir(), "scaling.png"), table: true, batchN: 2000, batchWorkers: 4,
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

// sweepOfDocs is the sweep of docs/bench.md's latest run.
var sweepOfDocs = sweepResult{
	n: 1_000_000, rounds: 5, topics: 8,
	partitions: []point{{3, 1025201, 1022405, 1149048}, {12, 1112389, 1110676, 1190713}, {30, 1030304, 1028170, 1155205}},
	classes:    []point{{1, 1063257, 1060613, 1134885}, {3, 1055884, 1054248, 1201450}, {8, 1101731, 1099746, 1206125}},
}

// TestWritePlot draws the documented sweep, then one sweep alone, and
// refuses a sweep without points.
func TestWritePlot(t *testing.T) {
	one := sweepOfDocs
	one.classes = nil
	for name, sw := range map[string]sweepResult{"both": sweepOfDocs, "partitions only": one} {
		path := filepath.Join(t.TempDir(), "scaling.png")
		if err := writePlot(path, sw); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() != 1152 || b.Dy() != 432 {
			t.Errorf("%s: image is %d×%d, want 1152×432", name, b.Dx(), b.Dy())
		}
	}
	if err := writePlot(filepath.Join(t.TempDir(), "empty.png"), sweepResult{n: 1, rounds: 1}); err == nil {
		t.Error("a sweep without points drew a plot")
	}
}
