package main

import (
	"bytes"
	"context"
	"image/png"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	if order := os.Getenv(sideEnv); order != "" {
		os.Exit(sideChild(order))
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
		stacks: allStacks[:2], franz: defaultFranzFetch, // the kafka-go stacks; TestSweepFourStacks runs all four
	}
	out, _ := runChecked(t, ctx, cfg)
	for _, want := range []string{"raw kafka-go, one committer, no-op", "handoff runtime on kafka-go, no-op", "handoff runtime on franz-go, no-op",
		"2ms handler", "3 partitions (3 topics)", "2 classes (2 topics × 3 partitions)", "Memory per queued message", "with the same reader queue", "Stop with full pools", "workers busy"} {
		if !strings.Contains(out, want) {
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

// runChecked checks cfg, runs it and returns its output; it logs the
// progress log and the output, and fails the test if the check or the
// run does.
func runChecked(t *testing.T, ctx context.Context, cfg config) (out, log string) {
	t.Helper()
	if err := cfg.check(); err != nil {
		t.Fatal(err)
	}
	var o, l bytes.Buffer
	if err := run(ctx, cfg, &o, &l); err != nil {
		t.Fatalf("%v\n%s", err, l.String())
	}
	t.Log("\n" + l.String() + o.String())
	return o.String(), l.String()
}

// TestSweepFourStacks runs a tiny partitions sweep of the four stacks
// (raw kafka-go, the runtime on kafka-go, raw franz-go, the runtime on
// franz-go) and checks that the output states each one's fetch settings,
// has a figure of each at every point, their ratios, a memory row of
// each at every point and per partition, and a held-memory row of each.
// Figures are not checked.
func TestSweepFourStacks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := config{
		n: 1, slowN: 1, rounds: 1, tablePartition: 1, workers: 1, commitInterval: 100 * time.Millisecond,
		partitions: []int{3, 6}, sweepN: 600, sweep: true, held: true, stacks: allStacks, franz: defaultFranzFetch,
		isolate: true, // each side in a process of its own, as -isolate's default
		warmUp:  true, // as -warm-up's default
	}
	text, log := runChecked(t, ctx, cfg)
	for _, p := range []string{"3 partitions", "6 partitions"} {
		if want := "sweep: " + p + ", warm-up (not counted): " + allStacks[0].name + " "; strings.Count(log, want) != 1 {
			t.Errorf("log has %d lines %q, want 1 (a warm-up read of each broker's records)", strings.Count(log, want), want)
		}
	}
	for _, st := range allStacks {
		if !strings.Contains(text, "- "+st.name+": ") {
			t.Errorf("output states no fetch settings of %s", st.name)
		}
	}
	if !strings.Contains(text, defaultFranzFetch.String()) {
		t.Errorf("output lacks raw franz-go's settings %q", defaultFranzFetch.String())
	}
	head := "| sweep | raw kafka-go msgs/s | runtime on kafka-go msgs/s | raw franz-go msgs/s | runtime on franz-go msgs/s | " +
		"runtime/raw (kafka-go) | runtime/raw (franz-go) | runtime franz-go/kafka-go | raw franz-go/kafka-go |"
	if !strings.Contains(text, head) {
		t.Errorf("output lacks the header %q", head)
	}
	rows := map[string]int{}
	for line := range strings.Lines(text) {
		f := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		isStack := slices.ContainsFunc(allStacks, func(s stack) bool { return s.name == f[0] })
		switch {
		case len(f) == 10 && strings.HasSuffix(f[0], "partitions (3 topics)"):
			// Four rates, four ratios, the vs-mean column: all numbers > 0.
			for _, v := range f[1:] {
				if x, err := strconv.ParseFloat(v, 64); err != nil || x <= 0 {
					t.Errorf("row %q: %q is not a positive figure", f[0], v)
				}
			}
			rows["rate "+f[0]]++
		case len(f) == 10 && isStack:
			// The GC's CPU and the bytes allocated come from the side
			// process, and so does the broker's CPU.
			for i, what := range map[int]string{4: "GC CPU", 5: "broker CPU", 7: "bytes"} {
				if x, err := strconv.ParseFloat(f[i], 64); err != nil || x < 0 {
					t.Errorf("row %q: %s %q is not a figure", line, what, f[i])
				}
			}
			if x, _ := strconv.ParseFloat(f[7], 64); x == 0 {
				t.Errorf("row %q: no bytes allocated", line)
			}
			rows["memory "+f[0]]++
		case len(f) == 3 && isStack:
			rows["per partition "+f[0]]++
		case len(f) == 4 && isStack:
			rows["held "+f[0]]++
		}
	}
	want := map[string]int{"rate 3 partitions (3 topics)": 1, "rate 6 partitions (3 topics)": 1}
	for _, st := range allStacks {
		want["memory "+st.name] = 2
		want["per partition "+st.name] = 1
		want["held "+st.name] = 1
	}
	if !maps.Equal(rows, want) {
		t.Errorf("rows %v, want %v", rows, want)
	}
}

// TestGoals runs a tiny configuration of -goals (the table without the
// full-pools stop, a one-point partitions sweep and a one-point classes
// sweep of the four stacks, the rental point) and checks that the rental
// table has a row of each stack and that the goals table has every goal
// with a figure and a verdict. Figures are not checked.
func TestGoals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := config{
		n: 1500, slowN: 150, memN: 300, rounds: 1, tablePartition: 1, workers: 2,
		work: 2 * time.Millisecond, commitInterval: 100 * time.Millisecond,
		partitions: []int{3}, classes: []int{3}, sweepN: 900, sweep: true, rental: true, goals: true, table: true,
		stacks: allStacks, franz: defaultFranzFetch, warmUp: true,
	}
	text, log := runChecked(t, ctx, cfg)
	for _, what := range []string{"3 partitions", "rental's topics", "classes' topics"} {
		if want := "sweep: " + what + ", warm-up (not counted): "; strings.Count(log, want) != 1 {
			t.Errorf("log has %d lines %q, want 1", strings.Count(log, want), want)
		}
	}
	_, rentalPart, ok := strings.Cut(text, "examples/rental's configuration")
	if !ok {
		t.Fatal("output lacks the rental table")
	}
	rentalPart, goals, ok := strings.Cut(rentalPart, "the goals of issue 25")
	if !ok {
		t.Fatal("output lacks the goals table")
	}
	for _, st := range allStacks {
		if !strings.Contains(rentalPart, "| "+st.name+" | ") {
			t.Errorf("rental table lacks %s", st.name)
		}
	}
	n := 0
	for line := range strings.Lines(goals) {
		f := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(f) != 4 || strings.TrimSpace(f[0]) == "goal" || strings.HasPrefix(strings.TrimSpace(f[0]), "---") {
			continue
		}
		n++
		if fig, met := strings.TrimSpace(f[2]), strings.TrimSpace(f[3]); fig == "–" || (met != "yes" && met != "no") {
			t.Errorf("goal %q: figures %q, met %q", strings.TrimSpace(f[0]), fig, met)
		}
	}
	if n != 8 {
		t.Errorf("%d goals, want 8", n)
	}
}

// sweepOfDocs is the sweep of docs/bench-journal.md's latest sweep.
var sweepOfDocs = sweepResult{
	n: 1_000_000, rounds: 5, topics: 8,
	partitions: []point{{x: 3, handled: 1025201, committed: 1022405, raw: 1149048}, {x: 12, handled: 1112389, committed: 1110676, raw: 1190713},
		{x: 30, handled: 1030304, committed: 1028170, raw: 1155205}},
	classes: []point{{x: 1, handled: 1063257, committed: 1060613, raw: 1134885}, {x: 3, handled: 1055884, committed: 1054248, raw: 1201450},
		{x: 8, handled: 1101731, committed: 1099746, raw: 1206125}},
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
