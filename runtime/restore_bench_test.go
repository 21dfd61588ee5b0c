package runtime

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/handoff-go/handoff/devbroker"
)

// BenchmarkRestoreCost measures what a partition's restore costs the
// start, in milliseconds from Run's call: one partition holding 100k
// saved records of 1 KiB (instance A stopped with 100k messages queued,
// all saved). Each iteration is a new group on the same input:
//
//   - new disk: instance B starts on an empty state directory and
//     restores the partition from its changelog (ms-to-ready: Ready;
//     ms-to-first: its handler's first call, which needs the partition's
//     saved messages re-pushed);
//   - after a break: A starts again on its old file after B owned the
//     partition (B's owner marker is the latest), so the restore reads
//     the whole changelog and rebuilds the partition's records.
//
// restore-ms is the partition's restore alone (the "took" of its
// "partition state restored" log record: the changelog's read, the
// apply to the file, the owner marker and the re-push), without the
// group's join. cpu-ms is the process's CPU time (user and system) over
// the iteration: the three runs, their stops of 100k and the two
// restores, the figure least moved by other processes on a shared
// machine. It reports the
// figures of the last iteration (run it with -count and
// compare with benchstat, or read the logged ones):
//
//	HANDOFF_TEST_CLIENT=franz-go go test -run='^$' -bench=RestoreCost -benchtime=1x -count=3 ./runtime/
//
// It uses the runtime's public face and the changelog benchmarks'
// helpers only, so that the same file measures an older build too.
func BenchmarkRestoreCost(b *testing.B) {
	const n, size, topic = 100_000, 1024, "restore-cost"
	broker, err := devbroker.Start(devbroker.Config{Topics: []string{topic}, Partitions: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(broker.Close)
	produceSized(b, broker.Addrs(), topic, n, size)

	var nb, ab clStop
	var cpu time.Duration
	for b.Loop() {
		before := cpuTime(b)
		group := fmt.Sprintf("restore-cost-%d", clGroups.Add(1))
		dir := b.TempDir()
		a := filepath.Join(dir, "a.db")
		if s := clRun(b, broker.Addrs(), group, topic, a, n, false); s.rep.Snapshotted != n {
			b.Fatalf("first stop saved %d, want %d", s.rep.Snapshotted, n)
		}
		nb = clRun(b, broker.Addrs(), group, topic, filepath.Join(dir, "b.db"), n, false)
		if nb.rep.Repushed != n {
			b.Fatalf("new disk: repushed %d, want %d", nb.rep.Repushed, n)
		}
		ab = clRun(b, broker.Addrs(), group, topic, a, n, false)
		if ab.rep.Repushed != n {
			b.Fatalf("after a break: repushed %d, want %d", ab.rep.Repushed, n)
		}
		cpu = cpuTime(b) - before
		b.Logf("new disk: ready %s, first %s, restore %s; after a break: ready %s, first %s, restore %s",
			nb.ready, nb.first, took(nb), ab.ready, ab.first, took(ab))
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(nb.ready), "new-disk-ms-to-ready")
	b.ReportMetric(ms(nb.first), "new-disk-ms-to-first")
	b.ReportMetric(ms(ab.ready), "break-ms-to-ready")
	b.ReportMetric(ms(ab.first), "break-ms-to-first")
	b.ReportMetric(ms(cpu), "cpu-ms")
	b.ReportMetric(ms(took(nb)), "new-disk-restore-ms")
	b.ReportMetric(ms(took(ab)), "break-restore-ms")
	b.ReportMetric(0, "ns/op")
}

// took returns the duration of s's one partition restore, from its log
// record; 0 when it restored none.
func took(s clStop) time.Duration {
	if len(s.restores) != 1 {
		return 0
	}
	return s.restores[0]["took"].Duration()
}

// cpuTime returns the CPU time (user and system) the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
