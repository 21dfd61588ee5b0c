package runtime

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/kclient"
)

// TestStuckEpisodes: how a partition's episode of failures opens, turns
// stuck, and ends, on the fake clock. A fetch episode ends with a
// success or after fetchErrorGap without a failure (franz-go's idle
// partition); a restore episode only with the restore's success, not
// with the fetches a kafka-go reader makes ahead; any episode with the
// partition leaving; a partition not owned has none.
func TestStuckEpisodes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		log, stuckLines := countLogs(t, "partition stuck: its fetch has failed for longer than StuckAfter with no success since; the instance is not ready until it succeeds")
		s := newStuckParts(time.Minute, log)
		p := kclient.Partition{Topic: "orders", Partition: 3}
		boom := errors.New("boom")

		s.fetched(p, boom) // not owned: not kept
		if s.failingN.Load() != 0 {
			t.Fatal("a failure of a partition not owned was kept")
		}
		s.own(p)
		for range 13 { // failures 5 s apart for 60 s
			s.fetched(p, boom)
			time.Sleep(5 * time.Second)
		}
		if !s.any() {
			t.Fatal("not stuck after 65 s of failures")
		}
		if n := stuckLines.Load(); n != 1 {
			t.Errorf("%d stuck lines, want 1", n)
		}
		s.fetched(p, nil)
		if s.any() || s.failingN.Load() != 0 {
			t.Fatal("still failing after a successful fetch")
		}

		// Failures that stop: the episode lapses after fetchErrorGap.
		for range 14 {
			s.fetched(p, boom)
			time.Sleep(5 * time.Second)
		}
		if !s.any() {
			t.Fatal("not stuck after 70 s of failures")
		}
		time.Sleep(fetchErrorGap)
		if s.any() {
			t.Fatal("still stuck fetchErrorGap after the last failure")
		}
		if n := stuckLines.Load(); n != 2 {
			t.Errorf("%d stuck lines after two episodes, want 2", n)
		}

		// A restore's failures 30 s apart, with fetches between.
		for range 3 {
			s.restoreFailed(p, boom)
			s.fetched(p, nil)
			s.fetched(p, boom)
			time.Sleep(restoreRetryMax)
		}
		if !s.any() {
			t.Fatal("the restore's episode is not stuck after 90 s")
		}
		s.restored(p)
		if s.any() {
			t.Fatal("stuck after the restore succeeded")
		}

		// The partition leaving ends its episode.
		for range 14 {
			s.fetched(p, boom)
			time.Sleep(5 * time.Second)
		}
		s.disown(p)
		if s.any() || s.failingN.Load() != 0 {
			t.Fatal("an episode outlived its partition")
		}
	})
}
