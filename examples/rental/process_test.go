package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/rental"
	"github.com/handoff-go/handoff/internal/testio"
	"github.com/handoff-go/handoff/runtime"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestMain runs the tests for kafka-go, then again for franz-go: every
// process a test starts (startService) and every runtime it makes runs on
// that client (testio.BothClients).
//
// The process tests (but TestProcessStopAndKill, timed against the
// recovery's deletions) run in parallel, four at a time unless -parallel
// says otherwise: they wait on their processes (handlers that sleep,
// drains, restarts), not on the CPU (a run of the package uses about
// half of one core), and GOMAXPROCS, go test's default, is 2 here.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "4")
	}
	os.Exit(testio.BothClients(m).Run())
}

// buildRental builds the example binary once per test binary.
var buildRental = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "rental-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "rental")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// service is one run of the rental binary.
type service struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr testio.SyncBuffer
	done   chan struct{}
}

// rentalBinary skips the test in -short mode and returns the example
// binary, built once per test binary.
func rentalBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the example binary")
	}
	bin, err := buildRental()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// startBroker starts an embedded broker with the rental topics, closed
// when the test ends.
func startBroker(t *testing.T, partitions int) *devbroker.Broker {
	t.Helper()
	broker, err := devbroker.Start(devbroker.Config{Topics: rental.Topics(), Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	return broker
}

func (s *service) stderrText() string { return s.stderr.String() }

// startService starts the rental binary with args, on the Kafka client
// of this run of the tests (-client first, so that a test's own -client
// would win).
func startService(t *testing.T, bin string, args ...string) *service {
	t.Helper()
	args = append([]string{"-client", testio.Client()}, args...)
	s := &service{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	s.cmd.Stdout = &s.stdout
	s.cmd.Stderr = &s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.done
	})
	return s
}

// wait waits for the process to exit and returns its exit code.
func (s *service) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("service did not exit\nstderr:\n%s", s.stderr.String())
	}
	return s.cmd.ProcessState.ExitCode()
}

// stopOK sends SIGTERM and waits for the process to exit; it fails the
// test unless the exit code is 0, the failure starting with what.
func (s *service) stopOK(t *testing.T, what string) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.wait(t); code != 0 {
		t.Fatalf("%s: exit %d\nstderr:\n%s", what, code, s.stderrText())
	}
}

// report parses the "report {json}" line the service prints at exit.
func (s *service) report(t *testing.T) runtime.Report {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(s.stdout.Bytes()))
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "report "); ok {
			var rep runtime.Report
			if err := json.Unmarshal([]byte(line), &rep); err != nil {
				t.Fatal(err)
			}
			return rep
		}
	}
	t.Fatalf("no report line in stdout:\n%s\nstderr:\n%s", s.stdout.String(), s.stderr.String())
	return runtime.Report{}
}

// effectLines returns the complete lines of an effects file's contents.
// A last line without its newline is left out: a running process is
// writing it (one write per line, but a reader can see the part of a
// write that crosses a page boundary before the rest: "hear" of a
// heartbeats line, once in the rolling deploy).
func effectLines(b []byte) []string {
	s := string(b)
	i := strings.LastIndexByte(s, '\n')
	if i <= 0 { // no newline, or nothing before the first
		return nil
	}
	return strings.Split(s[:i], "\n")
}

// effects reads the effects file: handled count per key, and lines.
func readEffects(t *testing.T, path string) (map[string]int, int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	seen := map[string]int{}
	lines := 0
	for _, line := range effectLines(b) {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("effects line %q does not have the form <topic> <partition> <offset> <key>", line)
		}
		seen[f[3]]++
		lines++
	}
	return seen, lines
}

// waitLines waits until the effects file has at least n lines or the
// process exits.
func waitLines(t *testing.T, path string, n int, s *service) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, lines := readEffects(t, path); lines >= n {
			return
		}
		select {
		case <-s.done:
			t.Fatalf("service exited early\nstderr:\n%s", s.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("effects file did not reach %d lines", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProcessStopAndKill runs the real binary against a broker held by
// the test, produces under load with 5% of handler attempts failing, and
// stops it with SIGTERM three times and SIGKILL once, restarting with the
// same state file. From the effects file and the state file: every
// produced message was handled at least once or is a dead letter; graceful
// stops duplicate nothing but interrupted handlers.
func TestProcessStopAndKill(t *testing.T) {
	// Not parallel: its SIGKILL must land during the recovery, before the
	// re-pushed messages' records are deleted (every 200ms), 50 lines
	// after the start; beside the parallel process tests the lines came
	// slower than the deletions (1 of 4 runs: 0 records pending).
	bin := rentalBinary(t)
	broker := startBroker(t, 4)
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects.log")
	const failRate = "0.05"
	args := []string{"-brokers", broker.Addr(), "-group", "rental-proc", "-state", filepath.Join(dir, "rental.db"),
		"-drain-timeout", "100ms", "-work", "20ms", "-effects", effects, "-fail-rate", failRate}

	// The producer runs through all rounds: the service is stopped under load.
	const total = 12000
	produced := make(chan []string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { produced <- produceSteadily(ctx, t, broker.Addrs(), total) }()

	interrupted, lastSnapshot := 0, 0
	began := time.Now()
	for round := range 3 {
		s := startService(t, bin, args...)
		_, before := readEffects(t, effects)
		waitLines(t, effects, before+600, s)
		s.cmd.Process.Signal(syscall.SIGTERM)
		if code := s.wait(t); code != 0 {
			t.Fatalf("round %d: exit %d after SIGTERM\nstderr:\n%s", round, code, s.stderr.String())
		}
		rep := s.report(t)
		interrupted += rep.Interrupted
		lastSnapshot = rep.Snapshotted
		seen, lines := readEffects(t, effects)
		t.Logf("%s SIGTERM round %d: snapshotted %d (unstarted %d, interrupted %d), re-pushed at start %d, drain %s, snapshot %s, stop %s; effects %d lines, %d unique",
			time.Since(began).Round(time.Millisecond), round, rep.Snapshotted, rep.Unstarted, rep.Interrupted, rep.Repushed, rep.Drain, rep.Snapshot, rep.Stop, lines, len(seen))
		if dups := lines - len(seen); dups > interrupted {
			t.Errorf("after graceful stops: %d duplicates, but only %d handlers were interrupted", dups, interrupted)
		}
	}

	// SIGKILL early in a run that starts by re-pushing a snapshot.
	s := startService(t, bin, args...)
	_, before := readEffects(t, effects)
	waitLines(t, effects, before+50, s)
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.wait(t)
	_, afterKill := readEffects(t, effects)
	t.Logf("%s SIGKILL after %d new lines", time.Since(began).Round(time.Millisecond), afterKill-before)
	// The killed run started by re-pushing the last snapshot and died
	// before it had deleted the records of the re-pushed messages it
	// finished (done records are deleted in batches every 200ms): a crash
	// during recovery, which re-pushes them again. (Counting lines instead
	// does not tell: the heartbeats batch class writes dozens at once.)
	pending := pendingRecords(t, filepath.Join(dir, "rental.db"))
	if lastSnapshot == 0 || pending == 0 {
		t.Errorf("the kill did not land during recovery: snapshot %d, %d records still pending after the kill", lastSnapshot, pending)
	}
	t.Logf("the kill left %d of the %d re-pushed records pending", pending, lastSnapshot)

	// Run to the end: everything produced must be handled.
	// The catch-up run works faster; the flags are otherwise the same.
	keys := <-produced
	fast := append([]string(nil), args...)
	fast[slices.Index(fast, "-work")+1] = "1ms"
	s = startService(t, bin, fast...)
	waitLines(t, effects, afterKill+1, s)
	t.Logf("%s first message handled after the restart", time.Since(began).Round(time.Millisecond))
	// Run until every message is handled, or until nothing moves for 15s
	// (the rest must then be dead letters).
	deadline := time.Now().Add(90 * time.Second)
	lastLines, lastMove := -1, time.Now()
	for {
		missing, lines := missingKeys(t, effects, keys)
		if missing == 0 {
			break
		}
		if lines != lastLines {
			lastLines, lastMove = lines, time.Now()
		} else if time.Since(lastMove) > 15*time.Second { // a rejoin after SIGKILL waits out the 10s session
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d produced messages never handled\nstderr:\n%s", missing, len(keys), s.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.stopOK(t, "final stop")
	seen, lines := readEffects(t, effects)
	dead := deadKeys(t, filepath.Join(dir, "rental.db"))
	lost := lostOf(seen, dead, keys)
	t.Logf("produced %d, handled %d unique, dead letters %d, lost %d, duplicates %d (fail rate %s, after 3 SIGTERM and 1 SIGKILL)",
		len(keys), len(seen), len(dead), lost, lines-len(seen), failRate)
	if lost != 0 {
		t.Errorf("lost %d messages: neither handled nor dead letters", lost)
	}
}

// lostOf returns how many of keys are neither handled (seen, from
// readEffects) nor dead letters (dead, from deadKeys).
func lostOf(seen map[string]int, dead map[string]bool, keys []string) int {
	lost := 0
	for _, k := range keys {
		if seen[k] == 0 && !dead[k] {
			lost++
		}
	}
	return lost
}

// waitHandled waits up to limit for the effects file to have a line for
// each of keys; past it, it fails the test with how many are missing,
// note (appended to the count) and s's stderr.
func waitHandled(t *testing.T, effects string, keys []string, s *service, limit time.Duration, note string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		missing, _ := missingKeys(t, effects, keys)
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d produced messages never handled%s\nstderr:\n%s", missing, len(keys), note, s.stderrText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// missingKeys returns how many of keys the effects file has no line for,
// and its number of lines.
func missingKeys(t *testing.T, effects string, keys []string) (missing, lines int) {
	t.Helper()
	seen, lines := readEffects(t, effects)
	for _, k := range keys {
		if seen[k] == 0 {
			missing++
		}
	}
	return missing, lines
}

// deadKeys returns the keys of the state file's dead letters.
func deadKeys(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	// A dead letter that does not decode fails the test.
	for _, d := range snapshottest.Dead(t, path) {
		out[string(d.Record.Message.Key)] = true
	}
	return out
}

// pendingRecords returns how many records the state file's pending
// bucket holds.
func pendingRecords(t *testing.T, path string) int {
	t.Helper()
	return snapshottest.Counts(t, path)[snapshot.BucketPending]
}

// produceSteadily writes total messages with unique keys across the three
// topics, in small batches, and returns the keys.
func produceSteadily(ctx context.Context, t *testing.T, addrs []string, total int) []string {
	return produceSteadilyWith(ctx, t, devbroker.NewWriter(addrs), total)
}

// produceSteadilyWith is produceSteadily through w, which it closes.
func produceSteadilyWith(ctx context.Context, t *testing.T, w *kafka.Writer, total int) []string {
	defer devbroker.CloseWriter(w)
	var keys []string
	for i := 0; i < total; {
		var batch []kafka.Message
		for j := 0; j < 300 && i < total; j++ {
			k := fmt.Sprintf("k%06d", i)
			batch = append(batch, kafka.Message{Topic: rental.Topics()[i%3], Key: []byte(k), Value: []byte("v")})
			keys = append(keys, k)
			i++
		}
		if err := w.WriteMessages(ctx, batch...); err != nil {
			t.Errorf("produce: %v", err)
			return keys
		}
		select {
		case <-ctx.Done():
			return keys
		case <-time.After(50 * time.Millisecond):
		}
	}
	return keys
}

// TestProcessSecondSignal: with a drain that would take a minute, a second
// SIGTERM skips the rest of it; the service still saves what is left,
// commits and exits 0, and the next start handles the saved messages.
func TestProcessSecondSignal(t *testing.T) {
	t.Parallel() // its own broker, directory and processes
	bin := rentalBinary(t)
	broker := startBroker(t, 2)
	keys := produceSteadily(context.Background(), t, broker.Addrs(), 600)
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects.log")
	args := []string{"-brokers", broker.Addr(), "-state", filepath.Join(dir, "rental.db"),
		"-drain-timeout", "1m", "-work", "500ms", "-effects", effects}
	s := startService(t, bin, args...)
	waitLines(t, effects, 1, s)
	s.cmd.Process.Signal(syscall.SIGTERM)
	// The stop has begun once the service logs it; then signal again.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.stderrText(), "stop begins") {
		if time.Now().After(deadline) {
			t.Fatalf("no stop logged\n%s", s.stderrText())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.wait(t); code != 0 {
		t.Fatalf("exit %d\n%s", code, s.stderrText())
	}
	rep := s.report(t)
	if !rep.DrainTimedOut || rep.Drain > 30*time.Second || rep.Snapshotted == 0 {
		t.Fatalf("second signal did not cut the drain short: %+v", rep)
	}
	t.Logf("second SIGTERM: drain %s, snapshotted %d, stop %s", rep.Drain, rep.Snapshotted, rep.Stop)

	fast := append([]string(nil), args...)
	fast[slices.Index(fast, "-work")+1] = "0s"
	s = startService(t, bin, fast...)
	waitLines(t, effects, len(keys), s)
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.wait(t); code != 0 {
		t.Fatalf("exit %d\n%s", code, s.stderrText())
	}
	if seen, _ := readEffects(t, effects); len(seen) != len(keys) {
		t.Errorf("handled %d of %d", len(seen), len(keys))
	}
}

// TestEffectLines: a last line still being written is not a line.
func TestEffectLines(t *testing.T) {
	for in, want := range map[string][]string{
		"":                            nil,
		"hear":                        nil,
		"orders 0 1 k\n":              {"orders 0 1 k"},
		"orders 0 1 k\nheartbe":       {"orders 0 1 k"},
		"orders 0 1 k\nusers 1 2 j\n": {"orders 0 1 k", "users 1 2 j"},
	} {
		if got := effectLines([]byte(in)); !slices.Equal(got, want) {
			t.Errorf("effectLines(%q) = %q, want %q", in, got, want)
		}
	}
}
