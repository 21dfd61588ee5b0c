package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/handoff-go/handoff/internal/rental"
	"github.com/handoff-go/handoff/internal/testio"
)

// TestProcessRollingDeployClients is the rolling deploy of three rental
// processes (each with its own -instance and state file, one group) on
// each Kafka client side by side: while messages are produced, the
// instances are restarted in turn with SIGTERM (StopSnapshot), 5
// restarts, each down for restartDown, well within the 10s session
// timeout; then everything drains. From the processes' logs ("partitions assigned" and "partitions
// revoked") and the effects file it reports, one line per client: the
// group generations the restarts cost, partitions that changed owner,
// partitions the members that were not restarting revoked, restarted
// instances that got exactly their partitions back, duplicates, per-key
// order inversions in the ordered class (orders) and lost messages.
//
// On both clients nothing is lost. franz-go's members are static
// (group.instance.id = -instance): a restart changes no partition's
// owner, the others revoke nothing, the restarted instance gets exactly
// its partitions back, so nothing is handled twice or out of order.
// kafka-go's figures (eager rebalancing, dynamic members) are reported,
// not asserted. (Without -instance, franz-go's members are dynamic: each
// restart then cost 3 generations, 40 owner changes over the 5 restarts,
// 0 of 5 got their partitions back, 4 and 27 inversions in two runs.)
func TestProcessRollingDeployClients(t *testing.T) {
	if c := testio.Client(); c != testio.KafkaGo {
		// It runs each client itself, with its own -client flags.
		t.Skipf("compares both clients side by side: it runs in the %s run of the suite, not again in this %s run", testio.KafkaGo, c)
	}
	bin := rentalBinary(t)
	clients := []string{"kafka-go", "franz-go"}
	figs := make([]*deployFigures, len(clients))
	t.Run("client", func(t *testing.T) {
		for i, client := range clients {
			t.Run(client, func(t *testing.T) {
				t.Parallel()
				figs[i] = clientRollingDeploy(t, bin, client)
			})
		}
	})
	t.Log("client   | restarts | generations | owner changes (partitions) | revoked elsewhere (revocations) | lost sessions | got own back | back after (mean) | saved (interrupted) | produced | duplicates | inversions (orders) | lost | took")
	for _, f := range figs {
		if f != nil {
			t.Log(f)
		}
	}
}

// deployFigures are one client's figures of a rolling deploy.
type deployFigures struct {
	client   string
	restarts int
	group    groupFigures
	// saved is what the SIGTERMs snapshotted, interrupted the handlers
	// they cut short.
	saved, interrupted int
	// away is the time from the SIGTERMs to the restarted instances'
	// first assignments, in all.
	away             time.Duration
	produced, unique int
	duplicates       int
	inversions       int // per key, in the ordered class's topic
	took             time.Duration
}

func (f *deployFigures) String() string {
	return fmt.Sprintf("%-8s | %8d | %11d | %16d (%d) | %20d (%d) | %13d | %8d of %d | %17s | %10d (%d) | %8d | %10d | %19d | %4d | %s",
		f.client, f.restarts, f.group.generations, f.group.ownerChanges, f.group.moved, f.group.revokedElsewhere, f.group.revocationsElsewhere,
		f.group.lostSessions, f.group.back, f.restarts, (f.away / time.Duration(f.restarts)).Round(10*time.Millisecond), f.saved, f.interrupted, f.produced, f.duplicates, f.inversions, f.produced-f.unique,
		f.took.Round(100*time.Millisecond))
}

// rollingPartitions is the partitions of each rental topic in the
// rolling deploys: 12 over three instances.
const rollingPartitions = 4

// restartDown is how long a restarted instance stays down between its
// exit and its new start, as a pod being replaced would: well within the
// session timeout (10s), but long enough for the group to react to a
// dynamic member's leave. (Restarted at once, a dynamic franz-go member
// rejoins before the other members have rejoined after its leave, and
// the cooperative-sticky assignment gives it back the very partitions
// nobody owns: restarts that quick do not tell static from dynamic.)
const restartDown = time.Second

func clientRollingDeploy(t *testing.T, bin, client string) *deployFigures {
	began := time.Now()
	broker := startBroker(t, rollingPartitions)
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects.log")
	args := func(i int) []string {
		// A drain of 10ms leaves most running handlers to be
		// interrupted: every stop saves work of each class, which the
		// restart re-pushes.
		return []string{"-brokers", broker.Addr(), "-group", "rolling-" + client, "-client", client, "-instance", fmt.Sprintf("rental-%d", i),
			"-state", filepath.Join(dir, fmt.Sprintf("state-%d.db", i)), "-drain-timeout", "10ms", "-work", "15ms", "-effects", effects}
	}
	// About 2000 messages a second over 600 keys per topic (the ordered
	// class sees each key's offsets in turn), until the last restart is
	// done: every SIGTERM finds work running and queued.
	ctx, stopProducing := context.WithCancel(context.Background())
	defer stopProducing()
	produced := make(chan int, 1)
	go func() { produced <- producePaced(ctx, t, broker.Addrs(), 1<<30, 600, 200, 100*time.Millisecond) }()

	var runs []*service
	var runInstance []int
	live := make([]int, 3) // the run of each instance
	start := func(i int) {
		runs = append(runs, startService(t, bin, args(i)...))
		runInstance = append(runInstance, i)
		live[i] = len(runs) - 1
	}
	members := func() []memberRun {
		out := make([]memberRun, len(runs))
		for r, s := range runs {
			evs, err := parseGroupEvents(s.stderrText())
			if err != nil {
				t.Fatalf("instance %d: %v", runInstance[r], err)
			}
			for _, ev := range evs {
				if ev.client != client {
					t.Fatalf("instance %d logs client=%s, want %s", runInstance[r], ev.client, client)
				}
			}
			out[r] = memberRun{instance: runInstance[r], events: evs}
		}
		return out
	}
	for i := range 3 {
		start(i)
	}
	// Wait for the group to settle (see groupSettled).
	deadline := time.Now().Add(60 * time.Second)
	for {
		ms := members()
		var held []map[string]bool
		for _, r := range live {
			held = append(held, ms[r].held(time.Now().Add(time.Second)))
		}
		if groupSettled(client, held, len(rental.Topics())*rollingPartitions) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the three instances did not share the partitions within 60s\n%s", runs[live[0]].stderrText())
		}
		time.Sleep(20 * time.Millisecond)
	}

	f := &deployFigures{client: client, restarts: 5}
	first := time.Now()
	var restarts []restart
	for k := range f.restarts {
		i := k % 3
		_, before := readEffects(t, effects)
		waitLines(t, effects, before+500, runs[live[(i+1)%3]]) // under load
		old := live[i]
		at := time.Now()
		runs[old].stopOK(t, fmt.Sprintf("restart %d, instance %d", k, i))
		rep := runs[old].report(t)
		f.saved += rep.Snapshotted
		f.interrupted += rep.Interrupted
		time.Sleep(restartDown)
		start(i)
		runs[live[i]].waitLog(t, reAssigned, 60*time.Second)
		restarts = append(restarts, restart{instance: i, at: at, old: old, new: live[i]})
		f.away += time.Since(at)
		t.Logf("%s: %s restart %d of instance %d: saved %d, interrupted %d, drain %s; partitions back %s after the SIGTERM",
			time.Since(began).Round(time.Millisecond), client, k, i, rep.Snapshotted, rep.Interrupted, rep.Drain.Round(time.Millisecond),
			time.Since(at).Round(time.Millisecond))
	}
	stopProducing()
	f.produced = <-produced

	waitDrained(t, effects, f.produced, 90*time.Second, 15*time.Second)
	end := time.Now()
	ms := members() // before the final stops, whose rebalances are not the deploy's
	for _, r := range live {
		runs[r].cmd.Process.Signal(syscall.SIGTERM)
		if code := runs[r].wait(t); code != 0 {
			t.Errorf("final stop of instance %d: exit %d\n%s", runInstance[r], code, runs[r].stderrText())
		}
	}
	st := effectStats(t, effects)
	f.unique, f.duplicates, f.inversions = st.unique, st.lines-st.unique, st.topicInversions[rental.TopicOrders]
	f.group = analyzeDeploy(ms, first, restarts, end)
	f.took = time.Since(began)

	if lost := f.produced - f.unique; lost != 0 {
		t.Errorf("lost %d of %d messages", lost, f.produced)
	}
	if client == "franz-go" {
		// Static members restarted within the session timeout.
		g := f.group
		if g.ownerChanges != 0 || g.revokedElsewhere != 0 || g.back != f.restarts {
			t.Errorf("static membership: %d owner changes of %d partitions, %d partitions revoked elsewhere, %d of %d restarted instances got exactly their partitions back; want 0, 0, all",
				g.ownerChanges, g.moved, g.revokedElsewhere, g.back, f.restarts)
		}
		if f.inversions != 0 {
			t.Errorf("%d per-key order inversions in the ordered class, want 0", f.inversions)
		}
		// An interrupted handler returned an error before writing its
		// effect, and the messages saved were committed past: a SIGTERM
		// handles nothing twice.
		if f.duplicates != 0 {
			t.Errorf("%d duplicates after SIGTERMs only", f.duplicates)
		}
	}
	if t.Failed() {
		// What each run logged about the group, and its warnings.
		for r, s := range runs {
			var b strings.Builder
			for line := range strings.Lines(s.stderrText()) {
				if groupEventMsg.MatchString(line) || strings.Contains(line, "level=WARN") && !strings.Contains(line, "would not drain") ||
					strings.Contains(line, "level=ERROR") || strings.Contains(line, `msg="signal received`) {
					b.WriteString(line)
				}
			}
			t.Logf("run %d (instance %d):\n%s", r, runInstance[r], b.String())
		}
	}
	return f
}

// groupEvent is one "partitions assigned" or "partitions revoked" line of
// a rental process's log.
type groupEvent struct {
	at         time.Time
	revoked    bool
	client     string
	generation int
	partitions []string // topic/partition
	lost       bool     // a revocation because the session was lost
}

var groupEventMsg = regexp.MustCompile(`msg="partitions (assigned|revoked)"`)

// parseGroupEvents returns the group events of a rental process's stderr
// (slog's text format), in order.
func parseGroupEvents(text string) ([]groupEvent, error) {
	var out []groupEvent
	for line := range strings.Lines(text) {
		if !groupEventMsg.MatchString(line) {
			continue
		}
		kv, err := logfmt(strings.TrimSuffix(line, "\n"))
		if err != nil {
			return nil, err
		}
		ev := groupEvent{revoked: kv["msg"] == "partitions revoked", client: kv["client"]}
		if ev.at, err = time.Parse(time.RFC3339Nano, kv["time"]); err != nil {
			return nil, fmt.Errorf("log line %q: time: %v", line, err)
		}
		if ev.generation, err = strconv.Atoi(kv["generation"]); err != nil {
			return nil, fmt.Errorf("log line %q: generation: %v", line, err)
		}
		if p := kv["partitions"]; p != "" {
			ev.partitions = strings.Split(p, ",")
		}
		if ev.revoked {
			if ev.lost, err = strconv.ParseBool(kv["lost"]); err != nil {
				return nil, fmt.Errorf("log line %q: lost: %v", line, err)
			}
		}
		out = append(out, ev)
	}
	return out, nil
}

// logfmt splits one line of slog's text format into its keys and values
// (quoted values unquoted).
func logfmt(line string) (map[string]string, error) {
	kv := map[string]string{}
	for s := strings.TrimSpace(line); s != ""; s = strings.TrimLeft(s, " ") {
		key, rest, ok := strings.Cut(s, "=")
		if !ok || key == "" || strings.Contains(key, " ") {
			return nil, fmt.Errorf("log line %q: no key=value at %q", line, s)
		}
		var val string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return nil, fmt.Errorf("log line %q: value of %s: %v", line, key, err)
			}
			val, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			val, rest, _ = strings.Cut(rest, " ")
		}
		kv[key] = val
		s = rest
	}
	return kv, nil
}

// memberRun is one run of a rental process: the instance it ran as and
// its group events.
type memberRun struct {
	instance int
	events   []groupEvent
}

// logTime is t as the log has it (milliseconds), so an event logged
// after t is not before it.
func logTime(t time.Time) time.Time { return t.Truncate(time.Millisecond) }

// held returns the partitions the run held before at: those assigned and
// not revoked since.
func (m memberRun) held(at time.Time) map[string]bool {
	out := map[string]bool{}
	for _, ev := range m.events {
		if !ev.at.Before(logTime(at)) {
			break
		}
		for _, p := range ev.partitions {
			if ev.revoked {
				delete(out, p)
			} else {
				out[p] = true
			}
		}
	}
	return out
}

// groupSettled reports whether the members' holdings (one set of
// partitions per member) are a settled assignment of the total
// partitions: they hold all of them between them, none twice, each at
// least one. On franz-go the shares must also differ by at most one,
// which is what cooperative-sticky assigns: its first generation after a
// join gives the newcomers only the partitions nobody holds, and until
// the member that must give some up has logged their revocation the
// holdings look like a settled cover (6, 3 and 3 of 12), with the owner
// changes still to come. (kafka-go's eager rebalancing revokes everything
// before it assigns, so a cover is settled; its range assignor gives 6,
// 3 and 3 of 12 for good.)
func groupSettled(client string, held []map[string]bool, total int) bool {
	owned := map[string]bool{}
	least, most := total, 0
	for _, h := range held {
		for p := range h {
			if owned[p] {
				return false
			}
			owned[p] = true
		}
		least, most = min(least, len(h)), max(most, len(h))
	}
	if len(owned) != total || least == 0 {
		return false
	}
	return client != "franz-go" || most-least <= 1
}

// restart is one restart of an instance: the SIGTERM's time and the runs
// before and after.
type restart struct {
	instance int
	at       time.Time
	old, new int
}

// groupFigures are what the restarts of a rolling deploy did to the group.
type groupFigures struct {
	// generations is how many generations the group went through from
	// the first restart to the end: the last generation a member logged
	// less the last one before the first restart.
	generations int
	// ownerChanges counts assignments of a partition to another instance
	// than its owner before; moved is how many partitions changed owner.
	ownerChanges, moved int
	// revokedElsewhere is the partitions revoked by the instances that
	// were not the one restarting, in revocationsElsewhere revocations.
	revokedElsewhere, revocationsElsewhere int
	// lostSessions counts revocations because a session was lost.
	lostSessions int
	// back counts the restarted instances whose first assignment was
	// exactly the partitions they held before the SIGTERM, and who still
	// held exactly those at the next restart (or the end).
	back int
}

// analyzeDeploy reads the group figures from the runs' events between
// first (just before the first restart) and end.
func analyzeDeploy(runs []memberRun, first time.Time, restarts []restart, end time.Time) groupFigures {
	var g groupFigures
	in := func(ev groupEvent) bool { return !ev.at.Before(logTime(first)) && ev.at.Before(logTime(end)) }

	// Owners: every assignment of a partition, in generation order.
	type assignment struct {
		gen      int
		at       time.Time
		instance int
		during   bool
	}
	byPartition := map[string][]assignment{}
	genBefore, genLast := 0, 0
	for _, m := range runs {
		for _, ev := range m.events {
			if in(ev) {
				genLast = max(genLast, ev.generation)
			} else if ev.at.Before(logTime(first)) {
				genBefore = max(genBefore, ev.generation)
			}
			if ev.revoked {
				continue
			}
			for _, p := range ev.partitions {
				byPartition[p] = append(byPartition[p], assignment{ev.generation, ev.at, m.instance, in(ev)})
			}
		}
	}
	if genLast > genBefore {
		g.generations = genLast - genBefore
	}
	for _, as := range byPartition {
		slices.SortStableFunc(as, func(a, b assignment) int {
			if a.gen != b.gen {
				return a.gen - b.gen
			}
			return a.at.Compare(b.at)
		})
		owner, changed := -1, false
		for _, a := range as {
			if a.during && owner >= 0 && a.instance != owner {
				g.ownerChanges++
				changed = true
			}
			owner = a.instance
		}
		if changed {
			g.moved++
		}
	}

	// Revocations, each in the window of the restart it follows.
	for _, m := range runs {
		for _, ev := range m.events {
			if !ev.revoked || !in(ev) {
				continue
			}
			if ev.lost {
				g.lostSessions++
			}
			k := len(restarts) - 1
			for k > 0 && ev.at.Before(logTime(restarts[k].at)) {
				k--
			}
			if m.instance != restarts[k].instance {
				g.revokedElsewhere += len(ev.partitions)
				g.revocationsElsewhere++
			}
		}
	}

	for k, r := range restarts {
		next := end
		if k+1 < len(restarts) {
			next = restarts[k+1].at
		}
		before := runs[r.old].held(r.at)
		firstSet := map[string]bool{}
		for _, ev := range runs[r.new].events {
			if !ev.revoked {
				for _, p := range ev.partitions {
					firstSet[p] = true
				}
				break
			}
		}
		if len(before) > 0 && sameSet(firstSet, before) && sameSet(runs[r.new].held(next), before) {
			g.back++
		}
	}
	return g
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
