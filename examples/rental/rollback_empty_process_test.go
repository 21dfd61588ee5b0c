package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/handoff-go/handoff/internal/rental"
)

// TestProcessRollbackEmptyDisk: a rollback by one version as a
// Deployment does it, onto a new, empty state directory. This build runs
// under load with the changelog (the default) and is stopped (SIGTERM)
// with a drain too short to finish, so its stop saves work; then the
// previous version's binary (built from git, as TestProcessRollback
// builds it) starts as a new pod: a new instance name, a new empty state
// directory. It cannot read what this build saved, so it must find the
// saved messages in Kafka: this build's stop commits none of them. Every
// produced message is handled (lost 0); duplicates are allowed (the
// previous version runs again what this build had done past its
// commit).
func TestProcessRollbackEmptyDisk(t *testing.T) {
	t.Parallel()
	newer := rentalBinary(t)
	prev := previousRental()
	if prev.skip != "" {
		t.Skip(prev.skip)
	}
	if prev.err != nil {
		t.Fatal(prev.err)
	}
	broker := startBroker(t, 2)
	effects := filepath.Join(t.TempDir(), "effects.log")
	keys := produceSteadily(context.Background(), t, broker.Addrs(), 3000)
	args := func(instance, work string) []string {
		return []string{"-brokers", broker.Addr(), "-group", "rental-rollback-empty", "-instance", instance,
			"-state", filepath.Join(t.TempDir(), "rental.db"), "-drain-timeout", "50ms", "-work", work, "-effects", effects}
	}

	s := startService(t, newer, args("pod-newer", "20ms")...)
	// Every class busy before the stop, not only the first restored:
	// under load the instant heartbeats wrote 200 lines before the other
	// classes' partitions were restored, and the stop found nothing to
	// save (1 run of a loaded full suite).
	waitLines(t, effects, 200, s)
	waitEveryTopic(t, effects, 20, s)
	s.stopOK(t, "this version, stopped under load")
	saved := s.report(t).Snapshotted
	if saved == 0 {
		t.Fatalf("this version saved nothing at its stop\nstderr:\n%s", s.stderrText())
	}
	_, before := readEffects(t, effects)
	t.Logf("this version handled %d and saved %d at its stop; rolling back to %s on a new, empty state directory", before, saved, prev.commit)

	old := startService(t, prev.bin, args("pod-previous", "1ms")...)
	waitHandled(t, effects, keys, old, 90*time.Second, " after the rollback to "+prev.commit+" on an empty disk")
	old.stopOK(t, "the previous version after the rollback")
	seen, lines := readEffects(t, effects)
	t.Logf("after the rollback to %s: produced %d, handled %d unique, %d lines (duplicates %d), lost %d",
		prev.commit, len(keys), len(seen), lines, lines-len(seen), lostOf(seen, nil, keys))
}

// TestProcessUpgradeSameDisk is the reverse, an upgrade on a StatefulSet:
// the previous version (built from git) runs under load and is stopped
// with a drain too short to finish, so it saves work in its state file
// (and, as that version did, commits past it); then this build starts on
// the same state directory, under the same instance name, and must
// re-push what the older one saved: every produced message is handled
// (lost 0).
func TestProcessUpgradeSameDisk(t *testing.T) {
	t.Parallel()
	newer := rentalBinary(t)
	prev := previousRental()
	if prev.skip != "" {
		t.Skip(prev.skip)
	}
	if prev.err != nil {
		t.Fatal(prev.err)
	}
	broker := startBroker(t, 2)
	dir := t.TempDir()
	state, effects := filepath.Join(dir, "rental.db"), filepath.Join(dir, "effects.log")
	keys := produceSteadily(context.Background(), t, broker.Addrs(), 3000)
	args := func(work string) []string {
		return []string{"-brokers", broker.Addr(), "-group", "rental-upgrade", "-instance", "pod-0",
			"-state", state, "-drain-timeout", "50ms", "-work", work, "-effects", effects}
	}

	old := startService(t, prev.bin, args("20ms")...)
	waitLines(t, effects, 200, old)
	old.stopOK(t, "the previous version, stopped under load")
	saved := old.report(t).Snapshotted
	if saved == 0 {
		t.Fatalf("the previous version saved nothing at its stop\nstderr:\n%s", old.stderrText())
	}
	t.Logf("the previous version (%s) saved %d at its stop; this build starts on its state directory", prev.commit, saved)

	s := startService(t, newer, args("1ms")...)
	waitHandled(t, effects, keys, s, 90*time.Second, " after the upgrade from "+prev.commit)
	s.stopOK(t, "this version after the upgrade")
	if rep := s.report(t); rep.Repushed < saved {
		t.Errorf("this version re-pushed %d of the %d records the previous one saved", rep.Repushed, saved)
	}
	seen, lines := readEffects(t, effects)
	t.Logf("after the upgrade from %s: produced %d, handled %d unique, %d lines (duplicates %d), lost %d",
		prev.commit, len(keys), len(seen), lines, lines-len(seen), lostOf(seen, nil, keys))
}

// waitEveryTopic waits until the effects file at path has at least n
// lines of each of rental's topics, failing if s exits first.
func waitEveryTopic(t *testing.T, path string, n int, s *service) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		per := map[string]int{}
		for line := range strings.Lines(string(b)) {
			if topic, _, ok := strings.Cut(line, " "); ok {
				per[topic]++
			}
		}
		low := false
		for _, topic := range rental.Topics() {
			low = low || per[topic] < n
		}
		if !low {
			return
		}
		select {
		case <-s.done:
			t.Fatalf("service exited early\nstderr:\n%s", s.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("effects file has %v lines per topic, want %d of each", per, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
