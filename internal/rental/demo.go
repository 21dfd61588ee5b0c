package rental

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/runtime"
)

// demo sizes: a burst that takes a few seconds to handle with demoWork per
// message, stopped once demoStopAfter messages are handled.
const (
	demoOrders     = 3000
	demoUsers      = 3000
	demoHeartbeats = 6000
	demoWork       = 5 * time.Millisecond
	demoStopAfter  = 3000
	demoDrain      = 20 * time.Millisecond
	// demoFailRate of attempts fail recoverably (retried in place);
	// every demoPoisonEvery-th order and user message is poison until the
	// "operator" cures it and requeues the dead letters.
	demoFailRate    = 0.02
	demoPoisonEvery = 700
	// In run 2 the database behind orders is down for demoOutageFor,
	// from demoOutageAt after the run's start.
	demoOutageAt  = 300 * time.Millisecond
	demoOutageFor = 2 * time.Second
)

// tally counts handled messages by ID.
type tally struct {
	mu      sync.Mutex
	seen    map[string]int
	total   int
	waiters []waiter
}

type waiter struct {
	unique bool
	n      int
	ch     chan struct{}
}

func (t *tally) done(m *handoff.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen[m.ID]++
	t.total++
	kept := t.waiters[:0]
	for _, w := range t.waiters {
		if (w.unique && len(t.seen) >= w.n) || (!w.unique && t.total >= w.n) {
			close(w.ch)
			continue
		}
		kept = append(kept, w)
	}
	t.waiters = kept
}

// when returns a channel closed once n messages (unique ones, if unique)
// have been handled.
func (t *tally) when(n int, unique bool) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := waiter{unique: unique, n: n, ch: make(chan struct{})}
	if (unique && len(t.seen) >= n) || (!unique && t.total >= n) {
		close(w.ch)
	} else {
		t.waiters = append(t.waiters, w)
	}
	return w.ch
}

func (t *tally) counts() (unique, total int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.seen), t.total
}

// Demo runs the rental service twice on an embedded broker, stopping the
// first run mid-load, and prints what happened to every message. It
// returns the exit status: 0 only when no message was lost.
func Demo(out io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "rental demo: %v\n", err)
		return 1
	}
	broker, err := devbroker.Start(devbroker.Config{Topics: Topics(), Partitions: 4})
	if err != nil {
		return fail(err)
	}
	defer broker.Close()
	dir, err := os.MkdirTemp("", "rental-demo-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)

	produced, poison, err := produceBurst(broker.Addrs())
	if err != nil {
		return fail(err)
	}
	printIntro(out, produced, poison)

	t := &tally{seen: map[string]int{}}
	h, err := New(Options{Work: demoWork, OnDone: t.done, FailRate: demoFailRate})
	if err != nil {
		return fail(err)
	}
	defer h.Close()
	cfg := demoConfig(broker.Addrs(), dir, h)

	// Run 1: stop mid-load, with a drain too short to finish.
	rep1, err := demoRun1(cfg, t)
	if err != nil {
		return fail(err)
	}
	u1, _ := t.counts()
	fmt.Fprintf(out, "run 1: stopped after %d handled; %s; %d saved to the state file (%d unstarted, %d interrupted, %d waiting out a retry)\n",
		u1, drainSays(rep1.DrainTimedOut), rep1.Snapshotted, rep1.Unstarted, rep1.Interrupted, rep1.Waiting)

	// Run 2 is a new pod: a new instance on a new, empty state directory
	// (run 1's file is left alone), as a Deployment's replacement would
	// start on an emptyDir. What run 1 saved comes back from the
	// changelog, written to Kafka beside every write to run 1's file.
	dir2, err := os.MkdirTemp("", "rental-demo-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir2)
	files, err := os.ReadDir(dir2)
	if err != nil {
		return fail(err)
	}
	cfg.Instance = "rental-demo-2"
	cfg.StatePath = filepath.Join(dir2, "rental.db")

	// Run 2: re-push what was saved, then consume the rest. The poison
	// messages become dead letters, and later changes of a poison order
	// are parked behind it; then the "operator" fixes the bug and
	// requeues the dead letters, which releases the parked ones.
	// In run 2 the database behind orders is down for a while: the class
	// is suspended and waits, instead of dead-lettering its backlog.
	outage := Outage{Class: "orders", Start: demoOutageAt, Duration: demoOutageFor}
	// The outage's clock starts once run 2 is running (recovered and
	// joined), so that it meets orders' flow and not a class still waiting
	// for its partitions on a loaded machine: a quiet class can use up a
	// message's attempts before enough fail to suspend it.
	h2, err := New(Options{Work: demoWork, OnDone: t.done, FailRate: demoFailRate, Outages: []Outage{outage}, DeferOutages: true})
	if err != nil {
		return fail(err)
	}
	defer h2.Close()
	cfg.Classes = shareBeats(h2.Classes())
	rep2, orders, dead, err := demoRun2(cfg, t, produced, h2)
	if err != nil {
		return fail(err)
	}
	printRun2(out, cfg.Instance, len(files), rep2, orders, h2.OutageFailed(0), dead, poison)

	return demoSummary(out, produced, t, rep1, rep2, dead, orders)
}

// printIntro prints what the demo is about to do with the produced
// messages, poison of them poison.
func printIntro(out io.Writer, produced, poison int) {
	fmt.Fprintf(out, "handoff demo: %d messages (orders %d, users %d, heartbeats %d) on an embedded broker, %s of work each,\n"+
		"  %.0f%% of attempts fail and are retried (a message out of attempts becomes a dead letter: heartbeats get %d,\n"+
		"  orders 3, users 3 and 2 delayed redeliveries), %d poison messages fail for good until an operator fixes the bug;\n"+
		"  heartbeats run on a Kafka share group (%s): what a stop leaves goes back to the broker, not to the state file\n",
		produced, demoOrders, demoUsers, demoHeartbeats, demoWork, demoFailRate*100, demoBeatAttempts, poison, demoShareGroup)
}

// demoConfig returns the runtime configuration of the demo's first run:
// the service h on the brokers addrs, its state file in dir.
func demoConfig(addrs []string, dir string, h *Service) runtime.Config {
	return runtime.Config{
		Brokers:       addrs,
		Group:         "rental-demo",
		Instance:      "rental-demo-1",
		StatePath:     filepath.Join(dir, "rental.db"),
		DrainTimeout:  demoDrain,
		HardStopGrace: time.Second,
		Classes:       shareBeats(h.Classes()),
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
}

// printRun2 prints what the second run (the new pod, instance on a state
// directory that held files files at its start) restored, re-pushed and
// requeued, and what the orders outage (outageFailed failed attempts)
// did; poison is the number of poison messages produced.
func printRun2(out io.Writer, instance string, files int, rep2 *runtime.Report, orders runtime.ClassHold, outageFailed int64, dead deadCounts, poison int) {
	fmt.Fprintf(out, "new pod: instance %s on an empty state directory (%d files before its start; run 1's file unused)\n"+
		"  restored from the changelog: %d records of %d partitions; re-pushed %d\n",
		instance, files, rep2.Restored, rep2.RestoredPartitions, rep2.Repushed)
	fmt.Fprintf(out, "run 2: re-pushed %d saved messages before fetching, then consumed the rest;\n"+
		"  orders' database was down for %s: the class was suspended %d time(s) for %.1fs in all, %d attempts failed,\n"+
		"  and the outage made %d dead letters;\n"+
		"  %d dead letters requeued after the fix (%d poison, %d out of attempts: %s), %d parked messages released behind them%s\n\n",
		rep2.Repushed, demoOutageFor, orders.Suspensions, orders.SuspendedSeconds, outageFailed, dead.outage,
		dead.total, dead.poison, dead.exhausted(), dead.exhaustedByClass(), rep2.Released, parkedPoison(poison-dead.poison))
}

// demoRun1 runs the service with cfg until t counts demoStopAfter
// handled messages (at most 30s), then stops it and returns its report.
func demoRun1(cfg runtime.Config, t *tally) (*runtime.Report, error) {
	rt, err := runtime.New(cfg)
	if err != nil {
		return nil, err
	}
	res := make(chan runResult, 1)
	go func() { rep, err := rt.Run(context.Background()); res <- runResult{rep, err} }()
	select {
	case <-t.when(demoStopAfter, false):
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("run 1 handled only %d messages in 30s", t.total)
	}
	rt.Shutdown(context.Background())
	r1 := <-res
	if r1.err != nil {
		return nil, fmt.Errorf("run 1 stop: %w", r1.err)
	}
	return r1.rep, nil
}

// demoRun2 runs the service h2 with cfg: it starts h2's outages once the
// runtime is ready, requeues the dead letters through healAfter, waits
// (at most 45s) until t counts every one of the produced messages
// handled, then stops it. It returns its report, the orders class's
// hold and the requeued dead letters.
func demoRun2(cfg runtime.Config, t *tally, produced int, h2 *Service) (*runtime.Report, runtime.ClassHold, deadCounts, error) {
	var orders runtime.ClassHold
	rt2, err := runtime.New(cfg)
	if err != nil {
		return nil, orders, deadCounts{}, err
	}
	res := make(chan runResult, 1)
	go func() { rep, err := rt2.Run(context.Background()); res <- runResult{rep, err} }()
	readyCtx, readyDone := context.WithCancel(context.Background())
	go func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for !rt2.Ready() {
			select {
			case <-readyCtx.Done():
				return
			case <-t.C:
			}
		}
		h2.StartOutages()
	}()
	dead, err := healAfter(rt2, t, produced, h2)
	readyDone()
	if err != nil {
		rt2.Shutdown(context.Background())
		<-res
		return nil, orders, dead, err
	}
	select {
	case <-t.when(produced, true):
	case <-time.After(45 * time.Second):
	}
	rt2.Shutdown(context.Background())
	r2 := <-res
	if r2.err != nil {
		return nil, orders, dead, fmt.Errorf("run 2 stop: %w", r2.err)
	}
	for _, cs := range rt2.Stats() {
		if cs.Name == "orders" {
			orders = cs.Hold
		}
	}
	return r2.rep, orders, dead, nil
}

// demoSummary prints the table of what happened to the produced
// messages over both runs, then the verdict, and returns the exit
// status: 0 only when no message was lost.
func demoSummary(out io.Writer, produced int, t *tally, rep1, rep2 *runtime.Report, dead deadCounts, orders runtime.ClassHold) int {
	unique, total := t.counts()
	lost := produced - unique
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, row := range []struct {
		name string
		v    any
	}{
		{"produced", produced},
		{"handled", unique},
		{"snapshotted at stop", rep1.Snapshotted},
		{"restored from changelog", rep2.Restored},
		{"re-pushed at start", rep2.Repushed},
		{"released to the share group", rep1.ShareReleased + rep2.ShareReleased},
		{"lost", lost},
		{"duplicates", total - unique},
		{"retried in place", rep1.Retried + rep2.Retried},
		{"dead-lettered", rep1.DeadLettered + rep2.DeadLettered},
		{"  poison", dead.poison},
		{"  out of attempts", dead.exhausted()},
		{"  by the outage", dead.outage},
		{"suspended (orders)", time.Duration(orders.SuspendedSeconds * float64(time.Second)).Round(time.Millisecond)},
		{"redelivered later", rep1.Redelivered + rep2.Redelivered},
		{"parked", rep1.Parked + rep2.Parked},
		{"requeued", rep2.Requeued},
		{"drain phase took", rep1.Drain.Round(time.Millisecond)},
		{"snapshot time", rep1.Snapshot.Round(time.Microsecond)},
		{"stop time", rep1.Stop.Round(time.Millisecond)},
	} {
		fmt.Fprintf(tw, "%s\t%v\t\n", row.name, row.v)
	}
	tw.Flush()
	if lost != 0 {
		fmt.Fprintf(out, "\nFAIL: %d messages lost\n", lost)
		return 1
	}
	fmt.Fprintln(out, "\nok: nothing lost")
	return 0
}

// drainSays tells how run 1's drain ended, against its bound: the
// configured DrainTimeout, not the phase's measured time (the report's
// Drain, printed as "drain phase took"), which ends once every pool has
// returned from its drain and so may pass the timeout on a busy machine.
func drainSays(timedOut bool) string {
	if timedOut {
		return fmt.Sprintf("the drain, bounded by DrainTimeout %s, ran out with work left", demoDrain)
	}
	return fmt.Sprintf("the drain finished within its DrainTimeout of %s", demoDrain)
}

// demoShareGroup is the share group the demo's heartbeats run on, and
// demoBeatAttempts their attempts there. A share class's dead letters
// stay in its instance's state file (no instance owns a partition of a
// share group, so they have no changelog): the demo's new pod, on an
// empty directory, would not find one that run 1 made. So the demo gives
// heartbeats attempts enough (at a 2% failure rate, 5 attempts all fail
// about once in 300 million messages) and has no poison heartbeats.
const (
	demoShareGroup   = "rental-demo.heartbeats"
	demoBeatAttempts = 5
)

// shareBeats returns classes with heartbeats on the demo's share group
// (see demoShareGroup).
func shareBeats(classes []runtime.Class) []runtime.Class {
	for i := range classes {
		if c := &classes[i]; c.Name == "heartbeats" {
			c.ShareGroup = demoShareGroup
			c.Retry.MaxAttempts = demoBeatAttempts
		}
	}
	return classes
}

type runResult struct {
	rep *runtime.Report
	err error
}

// deadCounts are the dead letters healAfter requeued, by cause.
type deadCounts struct {
	total, poison, outage int
	byClass               map[string]int // out of attempts
}

func (d deadCounts) exhausted() int { return d.total - d.poison - d.outage }

func (d deadCounts) exhaustedByClass() string {
	var s []string
	for _, c := range []string{"orders", "users", "heartbeats"} {
		s = append(s, fmt.Sprintf("%s %d", c, d.byClass[c]))
	}
	return strings.Join(s, ", ")
}

// healAfter waits until every message is handled but the poison ones,
// which are dead letters (with their keys' later messages parked), then
// cures the service and requeues every dead letter. It returns them by
// cause: poison, the outage, or out of attempts.
func healAfter(rt *runtime.Runtime, t *tally, produced int, h *Service) (deadCounts, error) {
	deadline := time.Now().Add(45 * time.Second)
	for {
		u, _ := t.counts()
		dead, _, err := rt.DeadLetters("", "", 1000)
		// Settled: every message handled, a dead letter, or parked behind
		// one (two poison orders may share a key), each counted once: a
		// released parked message is handled before its record is
		// deleted, and a message still retrying must not be taken for
		// settled by counting that one twice.
		if err == nil && len(dead) > 0 && accounted(rt, t, dead) >= produced {
			h.Cure()
			dc := deadCounts{total: len(dead), byClass: map[string]int{}}
			for _, dl := range dead {
				switch {
				case strings.Contains(dl.Err, ErrPoison.Error()):
					dc.poison++
				case strings.Contains(dl.Err, ErrOutage.Error()):
					dc.outage++
				default:
					dc.byClass[dl.Message.Class]++
				}
				if err := rt.Requeue(context.Background(), dl.Key); err != nil {
					return dc, fmt.Errorf("requeue dead letter %s: %w", dl.Key, err)
				}
			}
			return dc, nil
		}
		if time.Now().After(deadline) {
			return deadCounts{}, fmt.Errorf("run 2: %d handled, %d dead letters after 45s", u, len(dead))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// parkedPoison says where the poison messages that are not dead letters
// were: parked behind a poison order of the same key.
func parkedPoison(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(";\n  the other %d poison message(s) were orders parked behind a poison order with the same key, not dead letters", n)
}

// accounted is how many distinct messages are handled (t), dead letters
// (dead) or parked in rt.
func accounted(rt *runtime.Runtime, t *tally, dead []runtime.DeadLetter) int {
	ids := map[string]bool{}
	for _, dl := range dead {
		ids[dl.Message.ID] = true
	}
	if keys, err := rt.ParkedKeys(); err == nil {
		for _, k := range keys {
			msgs, err := rt.Parked(k.Class, k.Key)
			if err != nil {
				continue
			}
			for _, m := range msgs {
				ids[m.ID] = true
			}
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.seen)
	for id := range ids {
		if t.seen[id] == 0 {
			n++
		}
	}
	return n
}

// produceBurst writes the demo's messages and returns how many, and how
// many of them are poison.
func produceBurst(addrs []string) (produced, poison int, err error) {
	w := devbroker.NewWriter(addrs)
	defer devbroker.CloseWriter(w)
	var msgs []kafka.Message
	add := func(topic, keyFmt string, n, keys int, poisoned bool) {
		for i := range n {
			v := fmt.Appendf(nil, `{"seq":%d}`, i)
			if poisoned && i%demoPoisonEvery == demoPoisonEvery/2 {
				v = fmt.Appendf(nil, `{"seq":%d,"poison":true}`, i)
				poison++
			}
			msgs = append(msgs, kafka.Message{Topic: topic, Key: fmt.Appendf(nil, keyFmt, i%keys), Value: v})
		}
	}
	add(TopicOrders, "order-%d", demoOrders, 200, true)
	add(TopicUsers, "user-%d", demoUsers, 500, true)
	add(TopicHeartbeats, "device-%d", demoHeartbeats, 100, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		return 0, 0, fmt.Errorf("produce demo messages: %w", err)
	}
	return len(msgs), poison, nil
}
