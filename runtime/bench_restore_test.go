package runtime

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/handoff-go/handoff/devbroker"
)

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
		nb := clRun(b, broker.Addrs(), group, topic, filepath.Join(dir, "b.db"), n, false)
		ab := clRun(b, broker.Addrs(), group, topic, a, n, false)
		b.Logf("round %d: new disk ready %s first %s (repushed %d); after a break ready %s first %s (repushed %d)",
			rounds, nb.ready, nb.first, nb.rep.Repushed, ab.ready, ab.first, ab.rep.Repushed)
		newReady, newFirst = append(newReady, nb.ready), append(newFirst, nb.first)
		breakReady, breakFirst = append(breakReady, ab.ready), append(breakFirst, ab.first)
	}
	runRounds(b, &rounds, round)
	reportSpreads(b, []spreadMetric{{"new_disk_ready_s", newReady}, {"new_disk_first_s", newFirst}, {"after_break_ready_s", breakReady}, {"after_break_first_s", breakFirst}})
	b.ReportMetric(0, "ns/op")
}
