package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
)

// The state changelog's costs, each measured with the changelog and with
// LocalStateOnly side by side in one run, the two modes alternating
// round after round (at least 3 rounds). Run them with the default
// client only (the figures do not depend on it, and the suite's second
// run would double the time):
//
//	HANDOFF_TEST_CLIENT=franz-go go test -run='^$' -bench='ChangelogStop100k|ChangelogDeadLetters' -benchtime=3x ./runtime/

// clRounds is how many rounds each changelog benchmark runs at least.
const clRounds = 3

// clGroups numbers the consumer groups of the changelog benchmarks.
var clGroups atomic.Int64

// produceSized writes n records of size-byte values to topic, keys
// spread over 1,000 values.
func produceSized(b *testing.B, addrs []string, topic string, n, size int) {
	b.Helper()
	w := devbroker.NewWriter(addrs)
	defer devbroker.CloseWriter(w)
	value := make([]byte, size)
	const chunk = 5_000
	for i := 0; i < n; i += chunk {
		msgs := make([]kafka.Message, 0, chunk)
		for j := i; j < min(i+chunk, n); j++ {
			msgs = append(msgs, kafka.Message{Topic: topic, Key: fmt.Appendf(nil, "key-%d", j%1000), Value: value})
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := w.WriteMessages(ctx, msgs...)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
}

// restoreLog keeps the attributes of the runtime's "partition state
// restored" records.
type restoreLog struct {
	mu   *sync.Mutex
	recs *[]map[string]slog.Value
}

func newRestoreLog() restoreLog {
	return restoreLog{mu: &sync.Mutex{}, recs: &[]map[string]slog.Value{}}
}

func (h restoreLog) Enabled(context.Context, slog.Level) bool { return true }

func (h restoreLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "partition state restored" {
		return nil
	}
	m := map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Resolve(); return true })
	h.mu.Lock()
	*h.recs = append(*h.recs, m)
	h.mu.Unlock()
	return nil
}

func (h restoreLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h restoreLog) WithGroup(string) slog.Handler      { return h }

// take returns the records logged since the last take.
func (h restoreLog) take() []map[string]slog.Value {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := *h.recs
	*h.recs = nil
	return out
}

// clStop is one run of clRun: its stop's report and, for each partition
// it restored, the restore's log record.
type clStop struct {
	rep      *Report
	restores []map[string]slog.Value
	// ready and first are how long after Run's call the runtime was
	// Ready and its class's handler was first called.
	ready, first time.Duration
}

// clRun runs a runtime of group on state with one class on topic whose 8
// handlers block until the stop, its queue holding all n messages, until
// every one of them is running or queued (fetched, or re-pushed from the
// state file); then it stops it and returns the report.
func clRun(b *testing.B, addrs []string, group, topic, state string, n int, local bool) clStop {
	b.Helper()
	logs := newRestoreLog()
	var first atomic.Int64
	start := time.Now()
	cfg := Config{
		Brokers: addrs, Group: group, StatePath: state, LocalStateOnly: local,
		CommitInterval: 100 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond,
		DrainTimeout: 10 * time.Millisecond, HardStopGrace: time.Second,
		Logger: slog.New(logs),
		Classes: []Class{{Name: "c", Topics: []string{topic}, Workers: 8, QueueSize: n,
			Handler: func(ctx context.Context, _ *handoff.Message) error {
				first.CompareAndSwap(0, int64(time.Since(start)))
				<-ctx.Done()
				return context.Cause(ctx)
			}}},
	}
	rt, err := newRuntime(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan *Report, 1)
	go func() {
		rep, err := rt.Run(ctx)
		if err != nil {
			b.Error(err)
		}
		ran <- rep
	}()
	var ready time.Duration
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if ready == 0 && rt.Ready() {
			ready = time.Since(start)
		}
		s := rt.classes.order[0].pool.Stats()
		if ready != 0 && s.Running+s.Queued >= n && (n == 0 || first.Load() != 0) {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-ran
			b.Fatalf("pool holds %d of %d", s.Running+s.Queued, n)
		}
		time.Sleep(time.Millisecond) // polls the start and the fetch, not a wait for an event
	}
	cancel()
	rep := <-ran
	if rep == nil {
		b.Fatal("no report")
	}
	return clStop{rep: rep, restores: logs.take(), ready: ready, first: time.Duration(first.Load())}
}

// BenchmarkChangelogStop100k fills a pool with 100k messages of 1 KiB
// (one partition), stops, and reports the stop's snapshot
// (Report.Snapshot: the save to the state file and, with the changelog,
// the wait for the changelog's acknowledgements), with LocalStateOnly
// and with the changelog, alternating. With the changelog it then starts
// the same group on an empty disk, which restores the partition's 100k
// records (restore_s: the changelog's read, ApplyChangelog and the
// re-push into the pool, the "took" of the restore's log record), stops
// it, and starts it once more on that same, intact file: that restore
// must read no changelog record (second_restore_records).
func BenchmarkChangelogStop100k(b *testing.B) {
	const n, size, topic = 100_000, 1024, "snap"
	broker, err := devbroker.Start(devbroker.Config{Topics: []string{topic}, Partitions: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(broker.Close)
	produceSized(b, broker.Addrs(), topic, n, size)

	var local, changelog, restore []time.Duration
	var restoredRead, secondRead []int64
	rounds := 0
	round := func() {
		defer func() { rounds++ }()
		modes := []bool{true, false}
		if rounds%2 == 1 {
			slices.Reverse(modes)
		}
		for _, lo := range modes {
			group := fmt.Sprintf("cl-stop-%d", clGroups.Add(1))
			dir := b.TempDir()
			s := clRun(b, broker.Addrs(), group, topic, filepath.Join(dir, "a.db"), n, lo)
			if s.rep.Snapshotted != n {
				b.Fatalf("local=%v: snapshotted %d, want %d", lo, s.rep.Snapshotted, n)
			}
			b.Logf("round %d local=%v: snapshot %s of %d", rounds, lo, s.rep.Snapshot, s.rep.Snapshotted)
			if lo {
				local = append(local, s.rep.Snapshot)
				continue
			}
			changelog = append(changelog, s.rep.Snapshot)
			// A new pod on an empty disk restores the partition.
			fresh := filepath.Join(dir, "b.db")
			s2 := clRun(b, broker.Addrs(), group, topic, fresh, n, false)
			if len(s2.restores) != 1 || s2.rep.Repushed != n {
				b.Fatalf("empty disk: %d restores, repushed %d, want 1 and %d", len(s2.restores), s2.rep.Repushed, n)
			}
			took := s2.restores[0]["took"].Duration()
			read := s2.restores[0]["changelog_records"].Int64()
			restore, restoredRead = append(restore, took), append(restoredRead, read)
			// The same pod again, its file intact.
			s3 := clRun(b, broker.Addrs(), group, topic, fresh, n, false)
			if len(s3.restores) != 1 {
				b.Fatalf("intact file: %d restores, want 1", len(s3.restores))
			}
			r3 := s3.restores[0]["changelog_records"].Int64()
			secondRead = append(secondRead, r3)
			b.Logf("round %d: empty-disk restore %s, %d changelog records read (%d restored, %d repushed, its stop's snapshot %s); intact-file restore %s, %d records read, %d repushed",
				rounds, took, read, s2.rep.Restored, s2.rep.Repushed, s2.rep.Snapshot,
				s3.restores[0]["took"].Duration(), r3, s3.rep.Repushed)
		}
	}
	runRounds(b, &rounds, round)
	reportSpreads(b, []spreadMetric{{"local_snapshot_s", local}, {"changelog_snapshot_s", changelog}, {"restore_s", restore}})
	b.ReportMetric(float64(slices.Max(restoredRead)), "restore_records")
	b.ReportMetric(float64(slices.Max(secondRead)), "second_restore_records")
}

// runRounds runs round for every iteration of b.Loop, and then until
// *rounds (which round counts) reaches clRounds.
func runRounds(b *testing.B, rounds *int, round func()) {
	for b.Loop() {
		round()
	}
	for *rounds < clRounds {
		round()
	}
}

// spreadMetric is one benchmark figure: its unit and its durations over
// the rounds.
type spreadMetric struct {
	unit string
	ds   []time.Duration
}

// reportSpreads reports each figure's median as a metric and logs its
// least, median and greatest.
func reportSpreads(b *testing.B, ms []spreadMetric) {
	for _, x := range ms {
		lo, med, hi := spread(x.ds)
		b.ReportMetric(med.Seconds(), x.unit)
		b.Logf("%s: min %.3f median %.3f max %.3f", x.unit, lo.Seconds(), med.Seconds(), hi.Seconds())
	}
}

// spread returns the least, the median and the greatest of ds.
func spread(ds []time.Duration) (lo, med, hi time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[0], median(s), s[len(s)-1]
}

// BenchmarkChangelogDeadLetters measures a dead letter's write with the
// changelog and with LocalStateOnly, alternating: a class on a topic of
// 4 partitions whose handler fails permanently, 8 workers, 20k messages
// of 256 bytes per round and mode, read with a fresh group. ns and
// allocations per dead letter are from the first handler call to the
// last dead letter written (the fetch's share is the same in both
// modes: the difference is the changelog's).
func BenchmarkChangelogDeadLetters(b *testing.B) {
	const n, topic = 20_000, "dead"
	broker, err := devbroker.Start(devbroker.Config{Topics: []string{topic}, Partitions: 4})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(broker.Close)
	produceSized(b, broker.Addrs(), topic, n, 256)
	errPoison := handoff.Permanent(errors.New("poison"))

	type fig struct{ ns, allocs float64 }
	figs := map[bool][]fig{}
	one := func(local bool) fig {
		var first atomic.Bool
		began := make(chan struct{})
		var start time.Time
		var ms0 runtime.MemStats
		rt, err := newRuntime(Config{Brokers: broker.Addrs(), Group: fmt.Sprintf("cl-dead-%d", clGroups.Add(1)),
			StatePath: filepath.Join(b.TempDir(), "s.db"), LocalStateOnly: local,
			CommitInterval: 100 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler),
			Classes: []Class{{Name: "c", Topics: []string{topic}, Workers: 8, QueueSize: 1024,
				Handler: func(context.Context, *handoff.Message) error {
					if first.CompareAndSwap(false, true) {
						runtime.ReadMemStats(&ms0)
						start = time.Now()
						close(began)
					}
					return errPoison
				}}}})
		if err != nil {
			b.Fatal(err)
		}
		wait := benchRun(b, rt)
		waitFor(b, "every dead letter written", func() bool { return rt.tally.total(evDeadLettered) >= n })
		var ms1 runtime.MemStats
		runtime.ReadMemStats(&ms1)
		<-began
		took := time.Since(start)
		rt.Shutdown(context.Background())
		if rep := wait(); rep.DeadLettered != n {
			b.Fatalf("local=%v: dead-lettered %d, want %d", local, rep.DeadLettered, n)
		}
		return fig{ns: float64(took.Nanoseconds()) / n, allocs: float64(ms1.Mallocs-ms0.Mallocs) / n}
	}
	rounds := 0
	round := func() {
		modes := []bool{true, false}
		if rounds%2 == 1 {
			slices.Reverse(modes)
		}
		for _, lo := range modes {
			f := one(lo)
			figs[lo] = append(figs[lo], f)
			b.Logf("round %d local=%v: %.0f ns, %.1f allocs per dead letter", rounds, lo, f.ns, f.allocs)
		}
		rounds++
	}
	runRounds(b, &rounds, round)
	for _, lo := range []bool{true, false} {
		var ns, allocs []float64
		for _, f := range figs[lo] {
			ns, allocs = append(ns, f.ns), append(allocs, f.allocs)
		}
		name := map[bool]string{true: "local", false: "changelog"}[lo]
		b.ReportMetric(median(ns), name+"_ns/dead_letter")
		b.ReportMetric(median(allocs), name+"_allocs/dead_letter")
		b.Logf("%s: ns/dead letter min %.0f median %.0f max %.0f; allocs min %.1f median %.1f max %.1f", name,
			slices.Min(ns), median(ns), slices.Max(ns), slices.Min(allocs), median(allocs), slices.Max(allocs))
	}
}

// BenchmarkReadyPartitions starts a group of one instance on an empty
// disk for 300 partitions (3 topics of 100, nothing produced) and
// reports how long it takes to turn Ready: with the changelog, every
// partition's restore (its changelog read, the write of its checkpoint,
// the recovery of its records) comes first; with LocalStateOnly none
// does. The two alternate, a new group each time.
func BenchmarkReadyPartitions(b *testing.B) {
	topics := []string{"ra", "rb", "rc"}
	broker, err := devbroker.Start(devbroker.Config{Topics: topics, Partitions: 100})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(broker.Close)
	ready := map[bool][]time.Duration{}
	for i := 0; b.Loop(); i++ {
		for _, local := range []bool{i%2 == 0, i%2 == 1} {
			cfg := Config{
				Brokers: broker.Addrs(), Group: fmt.Sprintf("ready-%d", clGroups.Add(1)),
				StatePath: filepath.Join(b.TempDir(), "s.db"), LocalStateOnly: local,
				Logger: slog.New(slog.DiscardHandler),
			}
			for _, topic := range topics {
				cfg.Classes = append(cfg.Classes, Class{Name: topic, Topics: []string{topic},
					Handler: func(context.Context, *handoff.Message) error { return nil }})
			}
			rt, err := newRuntime(cfg)
			if err != nil {
				b.Fatal(err)
			}
			began := time.Now()
			done := make(chan error, 1)
			go func() { _, err := rt.Run(context.Background()); done <- err }()
			for !rt.Ready() {
				select {
				case err := <-done:
					b.Fatalf("run ended before Ready: %v", err)
				case <-time.After(time.Millisecond):
				}
			}
			ready[local] = append(ready[local], time.Since(began))
			rt.Shutdown(context.Background())
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
	}
	med := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2].Seconds() * 1e3
	}
	b.ReportMetric(med(ready[false]), "changelog_ready_ms")
	b.ReportMetric(med(ready[true]), "local_ready_ms")
	b.ReportMetric(0, "ns/op")
}
