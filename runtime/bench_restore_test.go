package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
)

// restoreTimes is what one start of a restoring instance took: from Run's
// call to Ready, and to its class's first handler call.
type restoreTimes struct {
	ready, first time.Duration
	repushed     int
}

// clRunTimed is clRun that also times the start: Run's call to Ready and
// to the first handler call.
func clRunTimed(b *testing.B, addrs []string, group, topic, state string, n int) restoreTimes {
	b.Helper()
	var first atomic.Int64
	start := time.Now()
	cfg := Config{
		Brokers: addrs, Group: group, StatePath: state,
		CommitInterval: 100 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond,
		DrainTimeout: 10 * time.Millisecond, HardStopGrace: time.Second,
		Logger: slog.New(slog.DiscardHandler),
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
	var out restoreTimes
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if out.ready == 0 && rt.Ready() {
			out.ready = time.Since(start)
		}
		s := rt.classes.order[0].pool.Stats()
		if out.ready != 0 && first.Load() != 0 && s.Running+s.Queued >= n {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-ran
			b.Fatalf("pool holds %d of %d, ready %v", s.Running+s.Queued, n, out.ready)
		}
		time.Sleep(time.Millisecond) // polls the start, not a wait for an event
	}
	cancel()
	rep := <-ran
	if rep == nil {
		b.Fatal("no report")
	}
	out.first = time.Duration(first.Load())
	out.repushed = rep.Repushed
	return out
}

// BenchmarkRestoreReady100k: one partition holding 100k saved records of
// 1 KiB (a stop of instance A with 100k messages queued). Instance B
// starts on an empty disk and restores them (new_disk_*: from Run's call
// to Ready and to the first handler call); then A starts again on its
// old file, after B owned the partition (after_break_*). Medians over
// the rounds, each round a new group on the same records. Run it with
// one client:
//
//	HANDOFF_TEST_CLIENT=franz-go go test -run='^$' -bench=RestoreReady100k -benchtime=3x ./runtime/
func BenchmarkRestoreReady100k(b *testing.B) {
	const n, size, topic = 100_000, 1024, "restore"
	broker, err := devbroker.Start(devbroker.Config{Topics: []string{topic}, Partitions: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(broker.Close)
	produceSized(b, broker.Addrs(), topic, n, size)

	var newReady, newFirst, breakReady, breakFirst []time.Duration
	rounds := 0
	round := func() {
		defer func() { rounds++ }()
		group := fmt.Sprintf("restore-ready-%d", clGroups.Add(1))
		dir := b.TempDir()
		a := filepath.Join(dir, "a.db")
		if s := clRun(b, broker.Addrs(), group, topic, a, n, false); s.rep.Snapshotted != n {
			b.Fatalf("snapshotted %d, want %d", s.rep.Snapshotted, n)
		}
		nb := clRunTimed(b, broker.Addrs(), group, topic, filepath.Join(dir, "b.db"), n)
		ab := clRunTimed(b, broker.Addrs(), group, topic, a, n)
		b.Logf("round %d: new disk ready %s first %s (repushed %d); after a break ready %s first %s (repushed %d)",
			rounds, nb.ready, nb.first, nb.repushed, ab.ready, ab.first, ab.repushed)
		newReady, newFirst = append(newReady, nb.ready), append(newFirst, nb.first)
		breakReady, breakFirst = append(breakReady, ab.ready), append(breakFirst, ab.first)
	}
	for b.Loop() {
		round()
	}
	for rounds < clRounds {
		round()
	}
	for _, x := range []struct {
		unit string
		ds   []time.Duration
	}{{"new_disk_ready_s", newReady}, {"new_disk_first_s", newFirst}, {"after_break_ready_s", breakReady}, {"after_break_first_s", breakFirst}} {
		lo, med, hi := spread(x.ds)
		b.ReportMetric(med.Seconds(), x.unit)
		b.Logf("%s: min %.3f median %.3f max %.3f", x.unit, lo.Seconds(), med.Seconds(), hi.Seconds())
	}
	b.ReportMetric(0, "ns/op")
}
