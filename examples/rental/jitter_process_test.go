package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/handoff-go/handoff/devbroker"
)

// TestProcessKillWithJitter: with -work-jitter, handlers finish out of
// offset order, as real ones do. A SIGKILL under load then loses nothing
// only if the committed offset never passes a message that is not done:
// a service that committed each offset as its message finished would lose
// the slower messages behind it here (with every message taking exactly
// -work, completions stay nearly in order and such a service could not be
// told from a correct one).
func TestProcessKillWithJitter(t *testing.T) {
	t.Parallel() // its own broker, directory and processes
	bin := rentalBinary(t)
	broker := startBroker(t, 4)
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects.log")
	args := []string{"-brokers", broker.Addr(), "-group", "rental-jitter", "-state", filepath.Join(dir, "rental.db"),
		"-drain-timeout", "100ms", "-work", "20ms", "-work-jitter", "20ms", "-effects", effects}

	const total = 6000
	keys := produceSteadily(context.Background(), t, broker.Addrs(), total)
	if len(keys) != total {
		t.Fatalf("produced %d of %d", len(keys), total)
	}
	s := startService(t, bin, args...)
	waitLines(t, effects, total/3, s)
	// Kill right after a commit lands: the handlers that were still
	// running when it was made are still running now.
	groupTopics := map[string]int{"orders": 4, "users": 4, "heartbeats": 4}
	offsets := devbroker.NewOffsets(broker.Addrs())
	defer offsets.Close()
	committedSum := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := offsets.Committed(ctx, "rental-jitter", groupTopics)
		if err != nil {
			t.Fatal(err)
		}
		return devbroker.Sum(c)
	}
	for last := committedSum(); committedSum() == last; {
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.wait(t)
	_, atKill := readEffects(t, effects)

	// The commit rule, seen from outside: every offset below a
	// partition's committed offset was handled.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	committed, err := devbroker.Committed(ctx, broker.Addrs(), "rental-jitter", groupTopics)
	if err != nil {
		t.Fatal(err)
	}
	done := handledOffsets(t, effects)
	below, uncovered := 0, 0
	for topic, parts := range committed {
		for p, off := range parts {
			for o := int64(0); o < off; o++ {
				below++
				if !done[fmt.Sprintf("%s %d %d", topic, p, o)] {
					uncovered++
				}
			}
		}
	}
	if below == 0 {
		t.Fatalf("nothing was committed before the kill (after %d handled): the test saw no commit", atKill)
	}
	if uncovered > 0 {
		t.Errorf("%d of %d offsets below the committed ones were never handled before the kill: the commit passed unfinished messages", uncovered, below)
	}

	// The restart handles the rest (it rejoins once the killed member's
	// session has expired).
	s = startService(t, bin, args...)
	waitHandled(t, effects, keys, s, 90*time.Second, fmt.Sprintf(" (killed after %d lines)", atKill))
	s.stopOK(t, "stop")
	seen, lines := readEffects(t, effects)
	t.Logf("produced %d, killed after %d handled (%d committed), handled %d unique, lost 0, duplicates %d (redelivered from the last commit)",
		total, atKill, below, len(seen), lines-len(seen))
}

// handledOffsets returns the "<topic> <partition> <offset>" of every line
// of the effects file.
func handledOffsets(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range effectLines(b) {
		if f := strings.Fields(line); len(f) == 4 {
			out[strings.Join(f[:3], " ")] = true
		}
	}
	return out
}
