package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/rental"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// produceAtRate writes perSec messages a second to each rental topic,
// with unique keys, until ctx ends, and returns the keys by topic.
func produceAtRate(ctx context.Context, t *testing.T, addrs []string, perSec int) map[string][]string {
	w := devbroker.NewWriter(addrs)
	defer devbroker.CloseWriter(w)
	keys := map[string][]string{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; {
		var batch []kafka.Message
		for _, topic := range rental.Topics() {
			for range perSec / 10 {
				k := fmt.Sprintf("%s-%06d", topic, n)
				n++
				batch = append(batch, kafka.Message{Topic: topic, Key: []byte(k), Value: []byte("v")})
			}
		}
		// A write under way when ctx ends still completes.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err := w.WriteMessages(wctx, batch...)
		cancel()
		if err != nil {
			t.Errorf("produce: %v", err)
			return keys
		}
		for _, m := range batch {
			keys[m.Topic] = append(keys[m.Topic], string(m.Key))
		}
		select {
		case <-ctx.Done():
			return keys
		case <-tick.C:
		}
	}
}

// topicLines counts the effects file's lines per topic.
func topicLines(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range effectLines(b) {
		if f := strings.Fields(line); len(f) == 4 {
			out[f[0]]++
		}
	}
	return out
}

// waitLog waits until the service's log matches re and returns the
// submatches.
func (s *service) waitLog(t *testing.T, re *regexp.Regexp, limit time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if m := re.FindStringSubmatch(s.stderrText()); m != nil {
			return m
		}
		select {
		case <-s.done:
			t.Fatalf("service exited before logging %s\nstderr:\n%s", re, s.stderrText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line %s within %s\nstderr:\n%s", re, limit, s.stderrText())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stateCheck reads the state file: dead letters (and those the outage
// caused), parked records, and the pending records of class with their
// highest attempt count.
type stateCheck struct {
	dead, outageDead, parked, pending, maxAttempt int
	deadKeys                                      map[string]bool
}

func checkState(t *testing.T, path, class string) stateCheck {
	t.Helper()
	c := stateCheck{deadKeys: map[string]bool{}}
	for _, d := range snapshottest.Dead(t, path) {
		c.dead++
		c.deadKeys[string(d.Record.Message.Key)] = true
		if strings.Contains(d.Record.Err, rental.ErrOutage.Error()) {
			c.outageDead++
		}
	}
	c.parked = snapshottest.Counts(t, path)[snapshot.BucketParked]
	for _, e := range snapshottest.Pending(t, path) {
		if e.Record.Message.Class == class {
			c.pending++
			c.maxAttempt = max(c.maxAttempt, e.Record.Message.Attempt)
		}
	}
	return c
}

// lostKeys returns how many of keys the effects file has no line for and
// are not dead letters.
func lostKeys(t *testing.T, effects string, keys map[string][]string, dead map[string]bool) int {
	seen, _ := readEffects(t, effects)
	lost := 0
	for _, ks := range keys {
		lost += lostOf(seen, dead, ks)
	}
	return lost
}

// outageLoad is what the outage tests start with: the binary, a broker
// of 4 partitions a topic, the effects and state files of a fresh folder,
// and a producer writing 100 messages a second to each topic until
// stopProducing (also called at the test's end), which then sends the
// keys it wrote, by topic, on produced.
type outageLoad struct {
	bin            string
	broker         *devbroker.Broker
	effects, state string
	stopProducing  context.CancelFunc
	produced       chan map[string][]string
}

func startOutageLoad(t *testing.T) *outageLoad {
	t.Helper()
	r := &outageLoad{bin: rentalBinary(t), broker: startBroker(t, 4), produced: make(chan map[string][]string, 1)}
	dir := t.TempDir()
	r.effects, r.state = filepath.Join(dir, "effects.log"), filepath.Join(dir, "rental.db")
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	r.stopProducing = stop
	go func() { r.produced <- produceAtRate(ctx, t, r.broker.Addrs(), 100) }()
	return r
}

var (
	reRunning   = regexp.MustCompile(`msg=running `)
	reBegins    = regexp.MustCompile(`msg="simulated outage begins" class=orders`)
	reEnds      = regexp.MustCompile(`msg="simulated outage ends" class=orders duration=\S+ attempts_failed=(\d+)`)
	reSuspended = regexp.MustCompile(`level=WARN msg="class suspended: [^"]*" component=runtime class=orders`)
	reResumed   = regexp.MustCompile(`msg="class resumed after a suspension" component=runtime class=orders why="a handler succeeded" suspended_for=(\S+) probes=(\d+)`)
)

// TestProcessOutage runs the real binary with a 20 s outage of orders
// under a steady load of 100 messages a second per topic: nothing is
// lost, the outage makes no dead letter and parks nothing, orders'
// handler attempts during the outage are its detection streak, the
// handlers in flight and the probes, users and heartbeats keep their
// rate (outage window against the window before it, same run), and
// orders catches up after. It takes about 35 s and runs in parallel.
func TestProcessOutage(t *testing.T) {
	t.Parallel()
	load := startOutageLoad(t)
	bin, broker, effects, state, stopProducing, produced := load.bin, load.broker, load.effects, load.state, load.stopProducing, load.produced

	s := startService(t, bin, "-brokers", broker.Addr(), "-group", "rental-outage", "-state", state,
		"-work", "5ms", "-effects", effects, "-outage", "orders:8s:20s")
	s.waitLog(t, reRunning, 30*time.Second)
	waitLines(t, effects, 1, s)
	time.Sleep(2 * time.Second) // the group settles: the window before starts here
	before0, t0 := topicLines(t, effects), time.Now()
	s.waitLog(t, reBegins, 30*time.Second)
	before1, t1 := topicLines(t, effects), time.Now()
	s.waitLog(t, reSuspended, 5*time.Second)
	during0, t2 := topicLines(t, effects), time.Now()
	// The window during the outage closes 2s before its end is due (it
	// began by t1 and lasts 20s), not once its end's line is seen: a
	// probe that succeeds just after the end writes its effect before the
	// line is found in the log, and was counted as handled during it.
	time.Sleep(time.Until(t1.Add(18 * time.Second)))
	during1, t3 := topicLines(t, effects), time.Now()
	m := s.waitLog(t, reEnds, 30*time.Second)
	ended := time.Now()
	attempts, _ := strconv.Atoi(m[1])
	r := s.waitLog(t, reResumed, 30*time.Second)
	suspendedFor, _ := time.ParseDuration(r[1])
	probes, _ := strconv.Atoi(r[2])

	rate := func(a, b map[string]int, from, to time.Time, topic string) float64 {
		return float64(b[topic]-a[topic]) / to.Sub(from).Seconds()
	}
	for _, topic := range []string{rental.TopicUsers, rental.TopicHeartbeats} {
		without, with := rate(before0, before1, t0, t1, topic), rate(during0, during1, t2, t3, topic)
		t.Logf("%s: %.1f msg/s before the outage (%.1fs), %.1f msg/s during it (%.1fs): %.2f", topic, without, t1.Sub(t0).Seconds(),
			with, t3.Sub(t2).Seconds(), with/without)
		// Half, not 0.9: the rates are of one run on a shared machine
		// (0.89 in a loaded full suite, the classes unhindered); a class
		// held up by the outage falls far below.
		if with < 0.5*without {
			t.Errorf("%s handled %.1f msg/s during the outage, below half its %.1f msg/s before", topic, with, without)
		}
	}
	if n := during1[rental.TopicOrders] - during0[rental.TopicOrders]; n != 0 {
		t.Errorf("orders handled %d messages while its database was down", n)
	}
	// The detection needs SuspendAfter (10) distinct failures; orders has 8
	// workers in flight; every other attempt is a probe (probes failed,
	// the last one is outside the outage).
	if limit := 10 + 8 + probes; attempts > limit {
		t.Errorf("%d orders attempts failed in the outage, more than 10 to detect it + 8 in flight + %d probes", attempts, probes)
	}

	// Orders catches up: producing stops, everything produced is handled.
	time.Sleep(2 * time.Second)
	stopProducing()
	keys := <-produced
	waitAllHandled(t, effects, keys, 60*time.Second)
	caughtUp := time.Since(ended)
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.wait(t); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, s.stderrText())
	}
	rep := s.report(t)
	st := checkState(t, state, "orders")
	lost := lostKeys(t, effects, keys, st.deadKeys)
	total := keyCount(keys)
	t.Logf("produced %d; lost %d; dead letters %d (by the outage %d); parked %d (report %d); orders attempts failed in the outage %d, "+
		"probes %d failed + 1; suspended for %s; all handled %s after the outage ended",
		total, lost, st.dead, st.outageDead, st.parked, rep.Parked, attempts, probes, suspendedFor, caughtUp.Round(time.Millisecond))
	if lost != 0 || st.outageDead != 0 || st.parked != 0 || rep.Parked != 0 || rep.DeadLettered != 0 {
		t.Errorf("lost %d, outage dead letters %d, parked %d (report %d), dead-lettered %d: want all 0",
			lost, st.outageDead, st.parked, rep.Parked, rep.DeadLettered)
	}
	if m := missingAll(t, effects, keys); m != 0 {
		t.Errorf("%d messages not handled 60s after the outage", m)
	}
	// The suspension begins once the outage is detected (a loaded
	// machine takes longer), so it may be a little shorter than the
	// outage; most of it must be covered, and the class must flow again
	// within 30s of its start.
	if suspendedFor < 15*time.Second || suspendedFor > 30*time.Second {
		t.Errorf("suspended for %s; the outage lasted 20s and the class must flow within 30s of its start", suspendedFor)
	}
}

// waitAllHandled waits up to limit for the effects file to have a line
// for each of keys; it does not fail the test (the callers count what
// is missing or lost after).
func waitAllHandled(t *testing.T, effects string, keys map[string][]string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for missingAll(t, effects, keys) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
}

// keyCount is the number of keys of all topics.
func keyCount(keys map[string][]string) int {
	total := 0
	for _, ks := range keys {
		total += len(ks)
	}
	return total
}

func missingAll(t *testing.T, effects string, keys map[string][]string) int {
	var all []string
	for _, ks := range keys {
		all = append(all, ks...)
	}
	m, _ := missingKeys(t, effects, all)
	return m
}

// TestProcessOutageStop: SIGTERM in the middle of an outage of orders
// exits 0 and saves what orders holds with no outage attempt counted
// and no dead letter; the restart (no outage) handles everything: lost 0.
// It takes about 15 s and runs in parallel.
func TestProcessOutageStop(t *testing.T) {
	t.Parallel()
	load := startOutageLoad(t)
	bin, broker, effects, state, stopProducing, produced := load.bin, load.broker, load.effects, load.state, load.stopProducing, load.produced
	args := []string{"-brokers", broker.Addr(), "-group", "rental-outage-stop", "-state", state, "-work", "5ms",
		"-effects", effects, "-drain-timeout", "2s"}

	s := startService(t, bin, append(args, "-outage", "orders:3s:60s")...)
	s.waitLog(t, reSuspended, 30*time.Second)
	time.Sleep(3 * time.Second) // mid-outage
	stopProducing()
	keys := <-produced
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.wait(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM mid-outage\nstderr:\n%s", code, s.stderrText())
	}
	rep := s.report(t)
	st := checkState(t, state, "orders")
	t.Logf("SIGTERM mid-outage: snapshotted %d (orders pending %d, highest attempt %d), dead letters %d, drain %s, stop %s",
		rep.Snapshotted, st.pending, st.maxAttempt, st.dead, rep.Drain, rep.Stop)
	if rep.DeadLettered != 0 || st.dead != 0 || st.pending == 0 || st.maxAttempt != 0 {
		t.Errorf("stop mid-outage: dead %d/%d, orders pending %d with highest attempt %d; want 0 dead, some pending, attempt 0",
			rep.DeadLettered, st.dead, st.pending, st.maxAttempt)
	}

	s = startService(t, bin, args...)
	waitAllHandled(t, effects, keys, 60*time.Second)
	s.stopOK(t, "restart")
	if strings.Contains(s.stderrText(), "class suspended") {
		t.Error("the restart began suspended or suspended again without an outage")
	}
	st = checkState(t, state, "orders")
	lost := lostKeys(t, effects, keys, st.deadKeys)
	total := keyCount(keys)
	t.Logf("after the restart: produced %d, lost %d, dead letters %d, re-pushed %d", total, lost, st.dead, s.report(t).Repushed)
	if lost != 0 || st.dead != 0 {
		t.Errorf("lost %d, dead letters %d; want 0", lost, st.dead)
	}
}
