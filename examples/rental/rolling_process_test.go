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
	"github.com/handoff-go/handoff/internal/testio"
)

// TestProcessRollingDeploy runs three rental processes in one consumer
// group, each with its own state file, and while 60k messages are produced
// restarts them one by one (5 rolling restarts) and kills one with
// SIGKILL, for each stop policy. All write one effects file (O_APPEND, one
// write per line), so its order is the global handling order. It asserts
// lost = 0 and reports duplicates and per-key order inversions.
//
// On franz-go the snapshot policy runs again with -group-protocol
// consumer (consumer/snapshot): the group of KIP-848's protocol, whose
// broker assigns, on the embedded broker's session timeout and heartbeat
// interval of the tests (testio.ConsumerGroupTimers).
func TestProcessRollingDeploy(t *testing.T) {
	t.Parallel() // its own broker, directory and processes
	bin := rentalBinary(t)
	for _, policy := range []string{"snapshot", "redeliver"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			rollingDeploy(t, bin, policy, testio.Classic)
		})
	}
	if testio.Client() == testio.FranzGo {
		t.Run("consumer/snapshot", func(t *testing.T) {
			t.Parallel()
			rollingDeploy(t, bin, "snapshot", testio.Consumer)
		})
	}
}

func rollingDeploy(t *testing.T, bin, policy, protocol string) {
	broker := startBroker(t, 4)
	if protocol == testio.Consumer {
		testio.ConsumerGroupTimers(t, broker.Addrs())
	}
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects.log")
	args := func(i int) []string {
		return []string{"-brokers", broker.Addr(), "-group", "rolling", "-state", filepath.Join(dir, fmt.Sprintf("state-%d.db", i)),
			"-drain-timeout", "50ms", "-work", "10ms", "-effects", effects, "-stop-policy", policy, "-group-protocol", protocol}
	}
	const total = 60_000
	produced := make(chan int, 1)
	go func() { produced <- produceKeyed(t, broker.Addrs(), total, 600) }()

	procs := make([]*service, 3)
	for i := range procs {
		procs[i] = startService(t, bin, args(i)...)
	}
	began := time.Now()
	// joined waits until instance i has been assigned partitions, so each
	// stop lands on an instance that owns partitions and has work in
	// flight.
	joined := func(i int) { procs[i].waitLog(t, reAssigned, 60*time.Second) }
	for i := range procs {
		joined(i)
	}
	step := func(what string, i int, sig syscall.Signal) {
		_, before := readEffects(t, effects)
		waitLines(t, effects, before+1000, procs[(i+1)%3])
		procs[i].cmd.Process.Signal(sig)
		code := procs[i].wait(t)
		if sig == syscall.SIGTERM && code != 0 {
			t.Fatalf("%s %d: exit %d\n%s", what, i, code, procs[i].stderrText())
		}
		var rep string
		if sig == syscall.SIGTERM {
			r := procs[i].report(t)
			rep = fmt.Sprintf("saved %d, given back %d, drain %s", r.Snapshotted, r.GivenBack, r.Drain.Round(time.Millisecond))
		}
		t.Logf("%s: %s instance %d %s", time.Since(began).Round(time.Millisecond), what, i, rep)
		procs[i] = startService(t, bin, args(i)...)
		if sig == syscall.SIGTERM {
			joined(i) // after a kill the rejoin waits out the session: go on
		}
	}
	for round := range 5 {
		step("rolling restart", round%3, syscall.SIGTERM)
	}
	step("kill -9", 2, syscall.SIGKILL)
	n := <-produced

	waitDrained(t, effects, n, 3*time.Minute, 20*time.Second)
	for i, p := range procs {
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Errorf("final stop of instance %d: exit %d\n%s", i, code, p.stderrText())
		}
	}
	for i, p := range procs {
		if want := "group_protocol=" + protocol; !strings.Contains(p.stderrText(), want) {
			t.Errorf("instance %d's log does not say %s", i, want)
		}
		if strings.Contains(p.stderrText(), "joined with the classic protocol") {
			t.Errorf("instance %d fell back to the classic protocol", i)
		}
	}
	st := effectStats(t, effects)
	t.Logf("policy %s, group protocol %s: produced %d, handled %d unique, lost %d, duplicates %d, per-key order inversions %d (5 rolling restarts, 1 kill, 3 instances)",
		policy, protocol, n, st.unique, n-st.unique, st.lines-st.unique, st.inversions)
	if st.unique != n {
		t.Errorf("lost %d messages", n-st.unique)
	}
}

// waitDrained waits until the effects file holds n unique records, or
// nothing was written to it for quiet, or limit has passed; it does not
// fail the test (the caller counts what is lost).
func waitDrained(t *testing.T, effects string, n int, limit, quiet time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	lastLines, lastMove := -1, time.Now()
	for {
		st := effectStats(t, effects)
		if st.unique == n || time.Now().After(deadline) {
			return
		}
		if st.lines != lastLines {
			lastLines, lastMove = st.lines, time.Now()
		} else if time.Since(lastMove) > quiet {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reAssigned matches the line both clients log when the group assigns
// partitions to the process.
var reAssigned = regexp.MustCompile(`msg="partitions assigned"`)

type effStats struct {
	lines, unique, inversions int
	// topicInversions are the inversions of each topic (those of an
	// ordered class's topic are the ones that count).
	topicInversions map[string]int
}

// effectStats reads the shared effects file: lines, unique records, and
// per-key inversions (a record handled for the first time after a later
// offset of its key was), in all and per topic.
func effectStats(t *testing.T, path string) effStats {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	st := effStats{topicInversions: map[string]int{}}
	seen := map[string]bool{}
	maxOff := map[string]int64{}
	for _, line := range effectLines(b) {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		st.lines++
		id := f[0] + "/" + f[1] + "/" + f[2]
		if seen[id] {
			continue
		}
		seen[id] = true
		st.unique++
		off, _ := strconv.ParseInt(f[2], 10, 64)
		k := f[0] + "/" + f[3]
		if m, ok := maxOff[k]; ok && off < m {
			st.inversions++
			st.topicInversions[f[0]]++
		} else {
			maxOff[k] = off
		}
	}
	return st
}

// produceKeyed writes total messages over the three topics with keys
// reused (keys per topic), in batches, and returns how many it wrote.
func produceKeyed(t *testing.T, addrs []string, total, keys int) int {
	return producePaced(context.Background(), t, addrs, total, keys, 1000, 100*time.Millisecond)
}

// producePaced is produceKeyed in batches of size, gap apart, until total
// are written or ctx ends.
func producePaced(ctx context.Context, t *testing.T, addrs []string, total, keys, size int, gap time.Duration) int {
	w := devbroker.NewWriter(addrs)
	defer devbroker.CloseWriter(w)
	n := 0
	for n < total && ctx.Err() == nil {
		var batch []kafka.Message
		for j := 0; j < size && n < total; j++ {
			batch = append(batch, kafka.Message{Topic: rental.Topics()[n%3], Key: fmt.Appendf(nil, "key-%d", n%keys), Value: []byte("v")})
			n++
		}
		// A batch begun is written whole, so n counts what was written.
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := w.WriteMessages(wctx, batch...)
		cancel()
		if err != nil {
			t.Errorf("produce: %v", err)
			return n - len(batch)
		}
		select {
		case <-ctx.Done():
		case <-time.After(gap):
		}
	}
	return n
}
