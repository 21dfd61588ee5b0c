package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff/internal/testio"
)

// TestProcessStopDuringRebalance: three rental instances with
// -stop-policy=redeliver; instance 2 joins the group while the other two
// run, and instance 0 gets SIGTERM while the rebalance waits for a slow
// member (a plain franz-go consumer of the same group, busy with its poll
// for 3s after the SIGTERM). Instance 0 exits 0 and commits what it
// handled, so duplicates stay in the tens. Before, on franz-go, its
// commits waited for the join and failed, its final commit did not finish
// in 2s, it exited 1 ("stop was not clean"), and instances 1 and 2 handled
// again everything it had handled since its last commit (issue 44,
// item 1: about 2,000 duplicates per 30,000 messages in rolling
// restarts).
func TestProcessStopDuringRebalance(t *testing.T) {
	t.Parallel()
	bin := rentalBinary(t)
	broker := startBroker(t, 4)
	cluster := broker.Cluster()
	const group = "stop-rebalance"
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects.log")
	args := func(i int) []string {
		return []string{"-brokers", broker.Addr(), "-group", group, "-state", filepath.Join(dir, fmt.Sprintf("state-%d.db", i)),
			"-drain-timeout", "50ms", "-work", "2ms", "-effects", effects, "-stop-policy", "redeliver"}
	}
	slow := testio.JoinHeldMember(t, broker.Addrs(), group)

	ctx, stopProducing := context.WithCancel(context.Background())
	defer stopProducing()
	produced := make(chan int, 1)
	go func() { produced <- producePaced(ctx, t, broker.Addrs(), 1<<30, 600, 100, 100*time.Millisecond) }()

	procs := []*service{startService(t, bin, args(0)...), startService(t, bin, args(1)...)}
	for _, p := range procs {
		p.waitLog(t, reAssigned, 60*time.Second)
	}
	var before []string // the members but the slow one, before instance 2 joins
	waitUntil(t, "a stable group of instances 0 and 1 and the slow member", func() bool {
		gi := cluster.GroupInfo(group)
		if gi == nil || gi.State != "Stable" || len(gi.Members) != 3 {
			return false
		}
		before = before[:0]
		for _, m := range gi.Members {
			if m.MemberID != slow.MemberID() {
				before = append(before, m.MemberID)
			}
		}
		return true
	})
	var mu sync.Mutex
	var joined []string
	cluster.ControlKey(int16(kmsg.JoinGroup), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if req := kreq.(*kmsg.JoinGroupRequest); req.Group == group {
			mu.Lock()
			joined = append(joined, req.MemberID)
			mu.Unlock()
		}
		return nil, nil, false
	})
	slow.Hold()
	procs = append(procs, startService(t, bin, args(2)...))
	waitUntil(t, "instances 0 and 1 rejoined, the rebalance waiting for the slow member", func() bool {
		mu.Lock()
		defer mu.Unlock()
		gi := cluster.GroupInfo(group)
		return gi != nil && gi.State == "PreparingRebalance" && !slices.ContainsFunc(before, func(id string) bool { return !slices.Contains(joined, id) })
	})
	if testio.Client() == testio.FranzGo {
		// Instances 0 and 1 keep their partitions (cooperative) and
		// handle about a second's messages within the rebalance. (On
		// kafka-go, eager, their generations have ended: they handle
		// nothing until it is over.)
		_, lines := readEffects(t, effects)
		waitLines(t, effects, lines+1000, procs[0])
	}

	procs[0].cmd.Process.Signal(syscall.SIGTERM)
	// The rebalance lasts 3s more: longer than a commit may take.
	release := time.AfterFunc(3*time.Second, slow.Release)
	defer release.Stop()
	code := procs[0].wait(t)
	rep := procs[0].report(t)
	if code != 0 {
		t.Errorf("instance 0 stopped during the rebalance: exit %d\n%s", code, procs[0].stderrText())
	}
	procs[2].waitLog(t, reAssigned, 60*time.Second)
	stopProducing()
	n := <-produced
	waitDrained(t, effects, n, time.Minute, 10*time.Second)
	for i, p := range procs[1:] {
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Errorf("final stop of instance %d: exit %d\n%s", i+1, code, p.stderrText())
		}
	}
	st := effectStats(t, effects)
	t.Logf("produced %d, handled %d unique, lost %d, duplicates %d; instance 0's stop: exit %d, commit %s, leave %s, given back %d",
		n, st.unique, n-st.unique, st.lines-st.unique, code, rep.Commit.Round(time.Millisecond), rep.Leave.Round(time.Millisecond), rep.GivenBack)
	if st.unique != n {
		t.Errorf("lost %d messages", n-st.unique)
	}
	if dup := st.lines - st.unique; dup > 50 {
		t.Errorf("%d duplicates, want tens at most", dup)
	}
}

// waitUntil polls cond every 10ms until it holds, failing the test after
// a minute. It waits on the broker and the processes, not on a timer.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
