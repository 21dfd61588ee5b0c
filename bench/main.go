// Command bench measures the handoff runtime against raw kafka-go, side
// by side in one run, and in the sweep the runtime on each of its two
// Kafka clients against the raw client (kafka-go, franz-go), over an
// embedded Kafka-protocol broker that runs in a separate process (this
// binary, re-executed):
//
//	go run ./bench                      # the table, 3 rounds
//	go run ./bench -plot docs/scaling.png # plus the scaling sweep
//	go run ./bench -table=false           # only the heartbeats measure (batch vs one at a time)
//	go run ./bench -table=false -batch-n 0 -partitions 3,96,300 -classes '' -sweep-n 300000
//	                                      # the four stacks against partitions
//	go run ./bench -goals                 # the table, the sweep at 3, 96, 300 partitions and 3 classes,
//	                                      # examples/rental's configuration, and issue 25's goals in one table
//	go run ./bench -table=false -batch-n 0 -changelog-ab
//	                                      # the runtime with the state changelog vs LocalStateOnly, both clients
//	go run ./bench -report docs/bench.md  # latency, the deploy gap and CPU/msg, written as docs/bench.md
//	go run ./bench -latency               # one of those alone (also -deploy, -cpu), to stdout
//
// Each side of each round reads every message with a fresh consumer
// group, until the group's committed offsets cover all of them. Sides
// alternate, and their order flips every round. CPU, allocations and peak
// RSS are the measuring process's only: the broker is elsewhere. In the
// sweep each side runs in a process of its own too (-isolate), so that
// what one side left resident does not count in the next one's figures.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	hrt "github.com/handoff-go/handoff/runtime"
)

const valueSize = 256

// config is the command line.
type config struct {
	n, slowN       int
	memN           int  // queued-memory measure; 0: none
	fullStop       bool // the full-pools stop measure
	rounds         int
	tablePartition int // partitions per topic of the table's topics
	workers        int // per class, with the 2ms handler
	work           time.Duration
	commitInterval time.Duration
	partitions     []int  // sweep: total partitions over 3 topics
	classes        []int  // sweep: classes over max(classes) topics
	sweepN         int    // messages per sweep point
	plot           string // sweep and write the PNG here
	sweep          bool   // run the sweep (also with plot)
	held           bool   // the sweep's held-memory measure
	rental         bool   // the sweep's rental point
	goals          bool   // print issue 25's goals from the table and the sweep
	stacks         []stack
	franz          franzFetch // raw franz-go's fetch settings
	table          bool
	profileDir     string
	timeout        time.Duration
	batchN         int // heartbeats measure; 0: none
	batchWorkers   int
	changelogAB    bool // the runtime with the state changelog vs LocalStateOnly
	isolate        bool // the sweep measures each side in a process of its own
	warmUp         bool // the sweep reads each broker's records once, not counted, before its rounds
	report         reportCfg
}

func main() {
	if spec := os.Getenv(brokerEnv); spec != "" {
		os.Exit(brokerChild(spec))
	}
	if order := os.Getenv(sideEnv); order != "" {
		os.Exit(sideChild(order))
	}
	var cfg config
	var parts, classes, stacks string
	var franzMax, franzPart int
	flag.IntVar(&cfg.n, "n", 1_000_000, "messages for the no-op comparison (over 3 topics)")
	flag.IntVar(&cfg.slowN, "slow-n", 24_000, "messages for the 2ms-handler comparison")
	flag.IntVar(&cfg.memN, "mem-n", 20_000, "messages of 1 KiB for the memory-per-queued-message measure; 0 skips it")
	flag.BoolVar(&cfg.fullStop, "full-stop", true, "measure a stop with full pools")
	flag.IntVar(&cfg.rounds, "rounds", 3, "interleaved rounds; figures are medians")
	flag.IntVar(&cfg.tablePartition, "table-partitions", 4, "partitions per topic for the table")
	flag.IntVar(&cfg.workers, "workers", 16, "workers per class (topic) with the slow handler; raw gets workers × 3")
	flag.DurationVar(&cfg.work, "work", 2*time.Millisecond, "the slow handler's sleep")
	flag.DurationVar(&cfg.commitInterval, "commit-interval", time.Second, "commit tick, runtime and raw alike")
	flag.StringVar(&parts, "partitions", "3,12,30", "sweep: total partitions, over 3 topics (multiples of 3)")
	flag.StringVar(&classes, "classes", "1,3,8", "sweep: classes, over max(classes) topics of 3 partitions")
	flag.IntVar(&cfg.sweepN, "sweep-n", 0, "messages per sweep point; 0 means -n")
	flag.StringVar(&cfg.plot, "plot", "", "run the sweep and draw it as a PNG at this path (docs/scaling.png)")
	flag.BoolVar(&cfg.sweep, "sweep", false, "run the sweep; -plot, -partitions and -classes imply it")
	flag.BoolVar(&cfg.held, "held", true, "sweep: measure each stack's held memory (handler blocked) at the most partitions")
	flag.BoolVar(&cfg.rental, "rental", true, "sweep: also run the stacks on examples/rental's topics (3 × 4 partitions), the runtime with rental's classes and metrics")
	flag.BoolVar(&cfg.goals, "goals", false, "run the table (no full-pools stop) and the sweep at 3, 96 and 300 partitions and 3 classes, with the rental point, and print every goal of issue 25 in one table")
	flag.StringVar(&stacks, "stacks", stackKeys(), "sweep: the stacks compared, in the table's order")
	flag.IntVar(&franzMax, "franz-fetch-max-bytes", int(defaultFranzFetch.maxBytes), "raw franz-go's kgo.FetchMaxBytes")
	flag.IntVar(&franzPart, "franz-fetch-max-partition-bytes", int(defaultFranzFetch.maxPartitionBytes), "raw franz-go's kgo.FetchMaxPartitionBytes")
	flag.DurationVar(&cfg.franz.maxWait, "franz-fetch-max-wait", defaultFranzFetch.maxWait, "raw franz-go's kgo.FetchMaxWait")
	flag.BoolVar(&cfg.table, "table", true, "run the side-by-side table")
	flag.StringVar(&cfg.profileDir, "profile", "", "write CPU and allocation profiles, and the in-use heap at its peak, of the first no-op round's sides and of each sweep point's first round's stacks, to this directory")
	flag.IntVar(&cfg.batchN, "batch-n", 20_000, "messages for the heartbeats measure (a batch class vs one message per call, handler costing 1ms per call + 10µs per message); 0 skips it")
	flag.IntVar(&cfg.batchWorkers, "batch-workers", 8, "workers (calls at once) of the heartbeats class, both sides")
	flag.BoolVar(&cfg.changelogAB, "changelog-ab", false, "compare the runtime, no-op, with the state changelog (the default) and with LocalStateOnly, on both clients, -rounds interleaved rounds of -n messages")
	flag.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, "give up after this long")
	flag.BoolVar(&cfg.warmUp, "warm-up", true, "sweep: read each broker's records once with the first stack, not counted, before the measured rounds: the broker's heap grows to its GC target the first time its records are served, and the kernel's page faults for it cost the side measured then")
	flag.BoolVar(&cfg.isolate, "isolate", true, "sweep: measure each side in a new process of this binary, so that what an earlier side left resident does not count in its peak RSS or its garbage collection")
	flag.StringVar(&cfg.report.path, "report", "", "run the latency, deploy-gap and CPU measures and write them as docs/bench.md's markdown to this path (nothing else runs)")
	flag.BoolVar(&cfg.report.latency, "latency", false, "run only the latency measure (as -report does) and print it")
	flag.BoolVar(&cfg.report.deploy, "deploy", false, "run only the deploy-gap measure (as -report does) and print it")
	flag.BoolVar(&cfg.report.cpu, "cpu", false, "run only the CPU-per-message measure (as -report does) and print it")
	flag.IntVar(&cfg.report.lat.partitions, "lat-partitions", 6, "latency: partitions of each stack's topic")
	flag.IntVar(&cfg.report.lat.workers, "lat-workers", 8, "latency: workers of the class (raw: of the pond pool)")
	flag.DurationVar(&cfg.report.lat.work, "lat-work", 2*time.Millisecond, "latency: the handler's sleep")
	flag.DurationVar(&cfg.report.lat.run, "lat-run", 5*time.Second, "latency: producing time per stack and load")
	flag.DurationVar(&cfg.report.lat.warm, "lat-warm", time.Second, "latency: the first part of -lat-run not counted")
	flag.IntVar(&cfg.report.lat.rounds, "lat-rounds", 2, "latency: rounds of every stack at every load (samples pooled)")
	flag.IntVar(&cfg.report.deployInstances, "deploy-instances", 3, "deploy: instances in the group")
	flag.IntVar(&cfg.report.deployPartitions, "deploy-partitions", 6, "deploy: partitions of the topic")
	flag.IntVar(&cfg.report.deployWorkers, "deploy-workers", 4, "deploy: workers of the class per instance")
	flag.DurationVar(&cfg.report.deployWork, "deploy-work", 45*time.Millisecond, "deploy: the handler's sleep")
	flag.DurationVar(&cfg.report.deployDrain, "deploy-drain", 100*time.Millisecond, "deploy: the runtime's DrainTimeout (shorter than a full queue's work: a stop past capacity saves a backlog)")
	flag.DurationVar(&cfg.report.deployBefore, "deploy-before", 4*time.Second, "deploy: steady load before the rollout")
	flag.DurationVar(&cfg.report.deploySettle, "deploy-settle", 2*time.Second, "deploy: wait after each new instance is ready, and after the rollout")
	flag.DurationVar(&cfg.report.deployDown, "deploy-down", 3*time.Second, "deploy: between a stop and its replacement's start (the survivors own its partitions meanwhile)")
	flag.DurationVar(&cfg.report.deployHeartbeat, "deploy-heartbeat", 0, "deploy: the runtime's HeartbeatInterval (0: its default)")
	flag.Float64Var(&cfg.report.deployLoad, "deploy-load", 0.5, "deploy: the steady load, of the group's worker ceiling")
	flag.Float64Var(&cfg.report.deployOver, "deploy-over", 1.1, "deploy: the load past capacity, of the group's worker ceiling")
	flag.IntVar(&cfg.report.cpuN, "cpu-n", 2_000_000, "cpu: messages per side (each side's start, join and first fetch are counted in, spread over them: fewer inflate the figures, the runtime's more, its start creating and reading the changelog)")
	flag.BoolVar(&recycleMessages, "recycle-messages", false, "every runtime class recycles its messages (Class.RecycleMessages); rental's classes do anyway")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) {
		set[f.Name] = true
		cfg.sweep = cfg.sweep || f.Name == "partitions" || f.Name == "classes"
	})
	if cfg.goals {
		// What the goals need, unless the command line says otherwise.
		cfg.sweep, cfg.table, cfg.rental = true, true, true
		defaults := map[string]func(){
			"partitions": func() { parts = "3,96,300" },
			"classes":    func() { classes = "3" },
			"sweep-n":    func() { cfg.sweepN = 300_000 },
			"batch-n":    func() { cfg.batchN = 0 },
			"full-stop":  func() { cfg.fullStop = false },
			"held":       func() { cfg.held = false },
		}
		for name, fill := range defaults {
			if !set[name] {
				fill()
			}
		}
	}
	cfg.franz.maxBytes, cfg.franz.maxPartitionBytes = int32(franzMax), int32(franzPart)
	cfg.report.lat.loads = []float64{0.5, 0.9}
	var err error
	if cfg.partitions, err = intList(parts); err == nil {
		cfg.classes, err = intList(classes)
	}
	if err == nil {
		cfg.stacks, err = stacksOf(stacks)
	}
	if err == nil {
		err = cfg.check()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func (c *config) check() error {
	if c.n <= 0 || c.slowN <= 0 || c.rounds <= 0 || c.tablePartition <= 0 || c.workers <= 0 {
		return fmt.Errorf("-n, -slow-n, -rounds, -table-partitions and -workers must be > 0")
	}
	if c.memN < 0 {
		return fmt.Errorf("-mem-n must be >= 0")
	}
	if r := c.report; r.any() {
		if r.lat.partitions <= 0 || r.lat.workers <= 0 || r.lat.work <= 0 || r.lat.rounds <= 0 || r.lat.run <= r.lat.warm || r.lat.warm < 0 {
			return fmt.Errorf("-lat-partitions, -lat-workers, -lat-work and -lat-rounds must be > 0, and -lat-run > -lat-warm >= 0")
		}
		if r.deployInstances <= 0 || r.deployPartitions < r.deployInstances || r.deployWorkers <= 0 || r.deployWork <= 0 ||
			r.deployBefore <= time.Second || r.deploySettle <= 0 || r.deployDrain <= 0 || r.deployDown < 0 || r.deployHeartbeat < 0 || r.deployLoad <= 0 || r.deployOver <= 0 {
			return fmt.Errorf("-deploy-instances, -deploy-workers, -deploy-work, -deploy-settle, -deploy-drain and the loads must be > 0, -deploy-partitions at least the instances, -deploy-before over 1s (its warm-up), -deploy-heartbeat not negative")
		}
		if r.cpuN <= 0 {
			return fmt.Errorf("-cpu-n must be > 0")
		}
	}
	if c.batchN < 0 || c.batchN > 0 && c.batchWorkers <= 0 {
		return fmt.Errorf("-batch-n must be >= 0 and -batch-workers > 0")
	}
	for _, p := range c.partitions {
		if p <= 0 || p%3 != 0 {
			return fmt.Errorf("-partitions: %d is not a positive multiple of 3", p)
		}
	}
	for _, k := range c.classes {
		if k <= 0 {
			return fmt.Errorf("-classes: %d must be > 0", k)
		}
	}
	c.sweep = c.sweep || c.plot != ""
	if c.sweep && len(c.partitions) == 0 && len(c.classes) == 0 && !c.rental {
		return fmt.Errorf("sweep: -partitions and -classes are both empty, and -rental is off")
	}
	if c.sweep && len(c.stacks) == 0 {
		return fmt.Errorf("sweep: no -stacks")
	}
	if c.franz.maxBytes <= 0 || c.franz.maxPartitionBytes <= 0 || c.franz.maxWait <= 0 {
		return fmt.Errorf("-franz-fetch-max-bytes, -franz-fetch-max-partition-bytes and -franz-fetch-max-wait must be > 0")
	}
	if c.sweepN == 0 {
		c.sweepN = c.n
	}
	return nil
}

func intList(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("bad number %q in %q", f, s)
		}
		out = append(out, v)
	}
	return out, nil
}

// run runs the table and, with cfg.plot, the sweep. Progress goes to
// log, results to out.
func run(ctx context.Context, cfg config, out, log io.Writer) error {
	if cfg.report.any() {
		return runReport(ctx, cfg, out, log)
	}
	var tableRows []*row
	var tableMem *queued
	if cfg.table {
		rows, mem, stop, err := runTable(ctx, cfg, log)
		if err != nil {
			return err
		}
		printTable(out, cfg, rows, mem, stop)
		tableRows, tableMem = rows, mem
	}
	if cfg.changelogAB {
		ab, err := runChangelogAB(ctx, cfg, log)
		if err != nil {
			return err
		}
		printChangelogAB(out, ab)
	}
	if cfg.batchN > 0 {
		b, err := runBatch(ctx, cfg, log)
		if err != nil {
			return err
		}
		printBatch(out, cfg, b)
	}
	if cfg.sweep {
		sw, err := runSweep(ctx, cfg, log)
		if err != nil {
			return err
		}
		printSweep(out, sw)
		if cfg.goals {
			printGoals(out, goalInputs{rows: tableRows, mem: tableMem, sw: sw})
		}
		if cfg.plot == "" {
			return nil
		}
		if err := writePlot(cfg.plot, sw); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nplot written to %s\n", cfg.plot)
	}
	return nil
}

// sample is one side of one round, per message where it says so.
type sample struct {
	handled, committed float64 // messages/s from the join
	// steady is messages/s from the first message handled to the last:
	// the rate once fetching runs, without the join and the first fetch,
	// which cost every stack the same. The worker ceiling is compared
	// with it.
	steady float64
	// busy is, with the slow handler, the share of the workers' time
	// spent in the handler's sleep during the steady part: the steady rate
	// over workers ÷ the mean sleep as measured in the run. Unlike the
	// ceiling of a sleep timed alone, it does not count how late a sleeping
	// goroutine wakes on a busy machine, which no stack controls. The
	// steady window leaves out the first wave of sleeps, so with few
	// messages per worker (the smoke test) it reads a little over 1.
	busy          float64
	cpuUS, allocs float64 // per message
	// gcUS is the part of cpuUS the garbage collector took, as the Go
	// runtime estimates it (gcCPUMetric); bytes the heap bytes allocated,
	// per message.
	gcUS, bytes float64
	// brokerUS is the broker process's CPU per message over the same
	// time as cpuUS, when brokerOK: the two processes share the cores.
	brokerUS float64
	brokerOK bool
	peakRSS  uint64
	liveHeap uint64 // the largest live heap sampled (see meter)
	stop     time.Duration
	calls    int64 // handler calls (the heartbeats measure)
}

type sideFunc func(context.Context, spec, *meter) (timing, error)

var groups int

// measure runs one side with a fresh group; with prof non-empty it
// writes CPU and allocation profiles of it as prof-cpu.pprof and
// prof-allocs-{before,after}.pprof, and what it held at its live heap's
// peak as prof-heap.pprof.
func measure(ctx context.Context, side sideFunc, s spec, prof string) (sample, error) {
	groups++
	s.group = fmt.Sprintf("bench-%d-%d", os.Getpid(), groups)
	if prof != "" {
		if err := writeProfile("allocs", prof+"-allocs-before.pprof"); err != nil {
			return sample{}, err
		}
		f, err := os.Create(prof + "-cpu.pprof")
		if err != nil {
			return sample{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return sample{}, err
		}
	}
	heapProf := ""
	if prof != "" {
		heapProf = prof + "-heap.pprof"
	}
	m := startMeter(heapProf, s.br.pid)
	tm, err := side(ctx, s, m)
	m.end() // a side that failed did not
	if prof != "" {
		pprof.StopCPUProfile()
		if err == nil {
			err = writeProfile("allocs", prof+"-allocs-after.pprof")
		}
	}
	if err != nil {
		return sample{}, err
	}
	n := float64(s.n)
	steady := (n - 1) / tm.handled.Sub(tm.first).Seconds()
	return sample{
		handled:   n / tm.handled.Sub(tm.began).Seconds(),
		committed: n / tm.committed.Sub(tm.began).Seconds(),
		steady:    steady,
		busy:      busy(s, tm, steady),
		cpuUS:     float64((m.endUse.cpu - m.start.cpu).Microseconds()) / n,
		gcUS:      float64((m.endUse.gc - m.start.gc).Microseconds()) / n,
		bytes:     float64(m.endUse.bytes-m.start.bytes) / n,
		brokerUS:  float64((m.endUse.broker - m.start.broker).Microseconds()) / n,
		brokerOK:  m.start.brokerOK && m.endUse.brokerOK,
		allocs:    float64(m.endUse.mallocs-m.start.mallocs) / n,
		peakRSS:   m.peak,
		liveHeap:  m.liveHeap,
		stop:      tm.stop,
		calls:     tm.calls,
	}, nil
}

// busy returns the workers' busy share for a slow-handler side with the
// given steady rate (see sample.busy), zero otherwise.
func busy(s spec, tm timing, steady float64) float64 {
	workers := s.workers * len(s.classes)
	if s.work == 0 || workers == 0 || tm.slept == 0 {
		return 0
	}
	return steady * (tm.slept.Seconds() / float64(s.n)) / float64(workers)
}

// writeProfile writes the named runtime/pprof profile to path.
func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = pprof.Lookup(name).WriteTo(f, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// row is one line of the table: medians over the rounds.
type row struct {
	name    string
	key     string // what printGoals finds it by: goalNoop/goalSlow + "-" + raw, rawq, kafka-go, franz-go
	ref     string // the row it is compared with; "" for a reference
	ceiling float64
	med     sample
	ratios  []float64 // handled rate / ref's, per round
	cratios []float64 // committed rate / ref's, per round
	// sameQueue is the handled rate over raw kafka-go's with the same
	// reader queue, per round (the no-op runtime row only).
	sameQueue []float64
}

func runTable(ctx context.Context, cfg config, log io.Writer) ([]*row, *queued, *fullStop, error) {
	slept := sleepTime(cfg.work)
	noop := []string{"noop-a", "noop-b", "noop-c"}
	slow := []string{"slow-a", "slow-b", "slow-c"}
	const memTopic = "mem"
	stopTopics := []string{"stop-a", "stop-b", "stop-c"}
	br, err := startBroker(slices.Concat(noop, slow, []string{memTopic}, stopTopics), cfg.tablePartition)
	if err != nil {
		return nil, nil, nil, err
	}
	defer br.close()
	fmt.Fprintf(log, "broker process %d on %s; producing %d + %d messages of %d bytes\n",
		br.cmd.Process.Pid, br.addr, cfg.n, cfg.slowN, valueSize)
	if err := br.produce(ctx, noop, cfg.n, valueSize); err != nil {
		return nil, nil, nil, err
	}
	if err := br.produce(ctx, slow, cfg.slowN, valueSize); err != nil {
		return nil, nil, nil, err
	}
	var mem *queued
	if cfg.memN > 0 {
		if err := br.produce(ctx, []string{memTopic}, cfg.memN, memValueSize); err != nil {
			return nil, nil, nil, err
		}
		q, err := queuedMemory(ctx, br, memTopic, cfg.memN)
		if err != nil {
			return nil, nil, nil, err
		}
		mem = &q
		fmt.Fprintf(log, "queued memory: %.0f bytes per queued message, payload %.0f bytes\n", q.perMsg, q.payload)
	}
	var stop *fullStop
	if cfg.fullStop {
		if err := br.produce(ctx, stopTopics, 3000, valueSize); err != nil {
			return nil, nil, nil, err
		}
		f, err := stopFullPools(ctx, br, stopTopics, hrt.DefaultWorkers)
		if err != nil {
			return nil, nil, nil, err
		}
		stop = &f
		fmt.Fprintf(log, "full-pools stop: %s, snapshot %s, rest %s\n", f.took.Round(time.Millisecond),
			f.rep.Snapshot.Round(time.Millisecond), f.rest().Round(time.Millisecond))
	}
	one := func(ts []string) [][]string {
		var cs [][]string
		for _, t := range ts {
			cs = append(cs, []string{t})
		}
		return cs
	}
	// A variant is raw kafka-go (kafka-go's defaults, the reference) and
	// the runtime on the same topics, and for the no-op one also raw
	// kafka-go with the runtime's reader queue (rawq), to tell what that
	// setting alone gives.
	type variant struct {
		raw, rt, rtf, rawq *row
		s                  spec
	}
	total := cfg.workers * len(slow)
	ceiling := float64(total) / slept.Seconds()
	vs := []variant{
		{raw: &row{name: "raw kafka-go, one committer, no-op", key: "noop-raw"},
			rt:   &row{name: "handoff runtime on kafka-go, no-op", ref: "raw", key: "noop-kafka-go"},
			rtf:  &row{name: "handoff runtime on franz-go, no-op", ref: "raw", key: "noop-franz-go"},
			rawq: &row{name: fmt.Sprintf("raw kafka-go, one committer, reader queue %d (as the runtime's), no-op", hrt.DefaultFetchQueue), ref: "raw", key: "noop-rawq"},
			s:    spec{br: br, classes: one(noop), n: cfg.n, commitInterval: cfg.commitInterval}},
		{raw: &row{name: fmt.Sprintf("raw kafka-go + pond (%d workers), %s handler", total, cfg.work), ceiling: ceiling, key: "slow-raw"},
			rt:  &row{name: fmt.Sprintf("handoff runtime on kafka-go (3 × %d workers), %s handler", cfg.workers, cfg.work), ref: "raw", ceiling: ceiling, key: "slow-kafka-go"},
			rtf: &row{name: fmt.Sprintf("handoff runtime on franz-go (3 × %d workers), %s handler", cfg.workers, cfg.work), ref: "raw", ceiling: ceiling, key: "slow-franz-go"},
			s:   spec{br: br, classes: one(slow), n: cfg.slowN, work: cfg.work, workers: cfg.workers, commitInterval: cfg.commitInterval}},
	}
	fmt.Fprintf(log, "time.Sleep(%s) takes %s here: worker ceiling %.0f msgs/s\n", cfg.work, slept, ceiling)
	// One untimed read of the no-op topics first: the first side to read
	// them after they were produced ran at about 0.6 of the rounds after
	// it, whichever side it was. The broker process's heap grows to its
	// GC target the first time its records are served: at 3 M records,
	// about 600 MB of pages the kernel faults in, at 0.9 of a core for a
	// second and more.
	warm, err := measure(ctx, runRaw, vs[0].s, "")
	if err != nil {
		return nil, nil, nil, err
	}
	fmt.Fprintf(log, "warm-up (not counted): raw kafka-go %.0f msgs/s\n", warm.handled)
	raws := make([][]sample, len(vs))
	rts := make([][]sample, len(vs))
	rtfs := make([][]sample, len(vs))
	rawqs := make([][]sample, len(vs))
	for r := range cfg.rounds {
		for i, v := range vs {
			type side struct {
				name string
				fn   sideFunc
				s    spec
				out  *[]sample
			}
			kg, fg := v.s, v.s
			kg.client, fg.client = hrt.ClientKafkaGo, hrt.ClientFranzGo
			sides := []side{{"raw", runRaw, v.s, &raws[i]}, {"handoff", runHandoff, kg, &rts[i]}, {"handoff-franz", runHandoff, fg, &rtfs[i]}}
			if v.rawq != nil {
				sq := v.s
				sq.readerQueue = hrt.DefaultFetchQueue
				sides = append(sides, side{"raw-q", runRaw, sq, &rawqs[i]})
			}
			// Each side goes first in turn.
			k := r % len(sides)
			sides = append(sides[k:], sides[:k]...)
			for _, sd := range sides {
				prof := ""
				if cfg.profileDir != "" && r == 0 && i == 0 {
					prof = filepath.Join(cfg.profileDir, sd.name)
				}
				smp, err := measure(ctx, sd.fn, sd.s, prof)
				if err != nil {
					return nil, nil, nil, err
				}
				*sd.out = append(*sd.out, smp)
				fmt.Fprintf(log, "round %d %-8s %-13s %9.0f msgs/s handled, %9.0f committed, %9.0f steady, %.2f busy, %.2f µs CPU/msg, %.2f allocs/msg, stop %s\n",
					r, []string{"no-op", "slow"}[i], sd.name, smp.handled, smp.committed, smp.steady, smp.busy, smp.cpuUS, smp.allocs, smp.stop.Round(time.Millisecond))
			}
		}
		for i, v := range vs {
			v.rt.ratios = append(v.rt.ratios, rts[i][r].handled/raws[i][r].handled)
			v.rt.cratios = append(v.rt.cratios, rts[i][r].committed/raws[i][r].committed)
			v.rtf.ratios = append(v.rtf.ratios, rtfs[i][r].handled/raws[i][r].handled)
			v.rtf.cratios = append(v.rtf.cratios, rtfs[i][r].committed/raws[i][r].committed)
			if v.rawq != nil {
				v.rawq.ratios = append(v.rawq.ratios, rawqs[i][r].handled/raws[i][r].handled)
				v.rawq.cratios = append(v.rawq.cratios, rawqs[i][r].committed/raws[i][r].committed)
				v.rt.sameQueue = append(v.rt.sameQueue, rts[i][r].handled/rawqs[i][r].handled)
			}
		}
	}
	var rows []*row
	for i, v := range vs {
		v.raw.med, v.rt.med, v.rtf.med = medianSample(raws[i]), medianSample(rts[i]), medianSample(rtfs[i])
		rows = append(rows, v.raw, v.rt, v.rtf)
		if v.rawq != nil {
			v.rawq.med = medianSample(rawqs[i])
			rows = append(rows, v.rawq)
		}
	}
	return rows, mem, stop, nil
}

func medianSample(ss []sample) sample {
	pick := func(f func(sample) float64) float64 {
		xs := make([]float64, len(ss))
		for i, s := range ss {
			xs[i] = f(s)
		}
		return median(xs)
	}
	return sample{
		handled:   pick(func(s sample) float64 { return s.handled }),
		committed: pick(func(s sample) float64 { return s.committed }),
		steady:    pick(func(s sample) float64 { return s.steady }),
		busy:      pick(func(s sample) float64 { return s.busy }),
		cpuUS:     pick(func(s sample) float64 { return s.cpuUS }),
		gcUS:      pick(func(s sample) float64 { return s.gcUS }),
		bytes:     pick(func(s sample) float64 { return s.bytes }),
		brokerUS:  pick(func(s sample) float64 { return s.brokerUS }),
		brokerOK:  !slices.ContainsFunc(ss, func(s sample) bool { return !s.brokerOK }),
		allocs:    pick(func(s sample) float64 { return s.allocs }),
		peakRSS:   uint64(pick(func(s sample) float64 { return float64(s.peakRSS) })),
		liveHeap:  uint64(pick(func(s sample) float64 { return float64(s.liveHeap) })),
		stop:      time.Duration(pick(func(s sample) float64 { return float64(s.stop) })),
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func printTable(w io.Writer, cfg config, rows []*row, mem *queued, stop *fullStop) {
	fmt.Fprintf(w, "\n%d interleaved rounds, medians; 3 topics × %d partitions, %d-byte values; no-op n=%d, slow n=%d; commit every %s\n\n",
		cfg.rounds, cfg.tablePartition, valueSize, cfg.n, cfg.slowN, cfg.commitInterval)
	fmt.Fprintln(w, "| stack | handled msgs/s | committed msgs/s | vs raw (handled) | vs raw (committed) | of ceiling (steady) | workers busy | CPU µs/msg | allocs/msg | peak RSS MiB | stop |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		ratio, cratio, ceil, busy := "1.00", "1.00", "–", "–"
		if r.ref != "" {
			ratio = fmt.Sprintf("%.2f (%.2f–%.2f)", median(r.ratios), slices.Min(r.ratios), slices.Max(r.ratios))
			cratio = fmt.Sprintf("%.2f (%.2f–%.2f)", median(r.cratios), slices.Min(r.cratios), slices.Max(r.cratios))
		}
		if r.ceiling > 0 {
			ceil = fmt.Sprintf("%.2f", r.med.steady/r.ceiling)
			busy = fmt.Sprintf("%.2f", r.med.busy)
		}
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %s | %s | %s | %s | %.2f | %.2f | %.0f | %s |\n",
			r.name, r.med.handled, r.med.committed, ratio, cratio, ceil, busy, r.med.cpuUS, r.med.allocs,
			float64(r.med.peakRSS)/(1<<20), r.med.stop.Round(time.Millisecond))
	}
	for _, r := range rows {
		if len(r.sameQueue) > 0 {
			fmt.Fprintf(w, "\n%s vs raw kafka-go with the same reader queue: %.2f (%.2f–%.2f)\n",
				r.name, median(r.sameQueue), slices.Min(r.sameQueue), slices.Max(r.sameQueue))
		}
	}
	if mem != nil {
		fmt.Fprintf(w, "\nMemory per queued message (%d messages of %d-byte values queued behind a blocked worker, live heap after GC): %.0f bytes for a %.0f-byte payload, %.2f× the payload\n",
			mem.n, memValueSize, mem.perMsg, mem.payload, mem.perMsg/mem.payload)
	}
	if stop != nil {
		r := stop.rep
		fmt.Fprintf(w, "\nStop with full pools (3 classes × %d workers that ignore their context, queues full; DrainTimeout %s, HardStopGrace %s): %s = DrainTimeout + HardStopGrace + snapshot %s (%d messages) + %s (goal: at most 1s); unstarted %d, interrupted %d, stragglers %d\n",
			hrt.DefaultWorkers, stop.drainTimeout, stop.grace, stop.took.Round(time.Millisecond), r.Snapshot.Round(time.Millisecond),
			r.Snapshotted, stop.rest().Round(time.Millisecond), r.Unstarted, r.Interrupted, r.Stragglers)
	}
}
