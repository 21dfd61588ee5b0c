package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/deadop"
	"github.com/handoff-go/handoff/internal/testio"
	"github.com/handoff-go/handoff/kafkasec"
	"github.com/handoff-go/handoff/runtime"
)

// e2eHandled records the handling of the end-to-end test's messages.
type e2eHandled struct {
	mu    sync.Mutex
	count map[string]int       // handled without failing, by value
	at    map[string]time.Time // the last handling's time
}

func (h *e2eHandled) add(v string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count[v]++
	h.at[v] = time.Now()
}

func (h *e2eHandled) snapshot() (map[string]int, []time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int, len(h.count))
	var at []time.Time
	for v, n := range h.count {
		out[v] = n
		at = append(at, h.at[v])
	}
	slices.SortFunc(at, time.Time.Compare)
	return out, at
}

// e2eLogs keeps the instances' log lines, each prefixed by its
// instance's name. Safe for concurrent use.
type e2eLogs struct {
	mu sync.Mutex
	b  strings.Builder
}

// writer returns a writer of name's log lines.
func (l *e2eLogs) writer(name string) io.Writer {
	return e2eLogWriter{l, name}
}

func (l *e2eLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type e2eLogWriter struct {
	l    *e2eLogs
	name string
}

func (w e2eLogWriter) Write(p []byte) (int, error) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	w.l.b.WriteString(w.name + ": ")
	w.l.b.Write(p)
	return len(p), nil
}

// waitUntil polls cond every 20ms until it holds, failing the test after
// d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond) // polling the condition, not synchronising
	}
}

// e2eGroup is two running instances, a and b, of group consuming
// orders (4 partitions), whose handler fails every "poison-" message
// permanently until fixed is set, and counts the messages it handled.
type e2eGroup struct {
	t        *testing.T
	addr     string
	addrs    []string
	group    string
	a, b     *runtime.Runtime
	fixed    atomic.Bool
	failed   atomic.Int64
	handled  *e2eHandled
	produced int
}

const e2eParts = 4

func newE2EGroup(t *testing.T, group string) *e2eGroup {
	t.Helper()
	b, err := devbroker.Start(devbroker.Config{Topics: []string{"orders"}, Partitions: e2eParts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	g := &e2eGroup{t: t, addr: b.Addr(), addrs: b.Addrs(), group: group,
		handled: &e2eHandled{count: map[string]int{}, at: map[string]time.Time{}}}
	// The instances' logs, shown when the test fails.
	logs := &e2eLogs{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the instances' logs:\n%s", logs.String())
		}
	})
	handler := func(_ context.Context, m *handoff.Message) error {
		v := string(m.Value)
		if strings.HasPrefix(v, "poison-") && !g.fixed.Load() {
			g.failed.Add(1)
			return handoff.Permanent(fmt.Errorf("dependency down for %s", v))
		}
		g.handled.add(v)
		return nil
	}
	start := func(name string) *runtime.Runtime {
		rt, err := runtime.New(runtime.Config{
			Client:         runtime.Client(testio.Client()),
			Brokers:        b.Addrs(),
			Group:          group,
			Instance:       name,
			StatePath:      filepath.Join(t.TempDir(), name+".db"),
			DrainTimeout:   time.Second,
			HardStopGrace:  5 * time.Second,
			CommitInterval: 100 * time.Millisecond,
			SessionTimeout: 6 * time.Second,
			FetchMaxWait:   100 * time.Millisecond,
			Logger:         slog.New(slog.NewTextHandler(logs.writer(name), &slog.HandlerOptions{Level: slog.LevelDebug})),
			Classes:        []runtime.Class{{Name: "orders", Topics: []string{"orders"}, Handler: handler, Workers: 2, QueueSize: 8}},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := rt.Run(ctx); done <- err }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("instance %s: %v", name, err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("instance %s did not stop", name)
			}
		})
		return rt
	}
	g.a = start("a")
	waitUntil(t, 30*time.Second, "a ready", g.a.Ready)
	g.b = start("b")
	waitUntil(t, 30*time.Second, "b ready", g.b.Ready)
	// Both own partitions (as the group describes it) before the poison
	// comes, so that each instance has dead letters of its own.
	cf := clusterFlags{brokers: b.Addrs(), group: group}
	waitUntil(t, 30*time.Second, "a and b each owning partitions", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := newChangelogReader(ctx, &cf, &kafkasec.Dialer{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		owners, err := r.owners(ctx)
		if err != nil {
			return false
		}
		var a, bb int
		for _, o := range owners {
			switch o {
			case "a":
				a++
			case "b":
				bb++
			}
		}
		return a > 0 && bb > 0 && a+bb == e2eParts
	})
	return g
}

// poison produces n poison messages (poison-<i>, keys spread over the
// partitions) and waits until they are all dead letters, on both
// instances. It returns how many each holds.
func (g *e2eGroup) poison(n int) (deadA, deadB int) {
	t := g.t
	t.Helper()
	w := devbroker.NewWriter(g.addrs)
	w.Balancer = &kafka.Hash{}
	var msgs []kafka.Message
	for i := g.produced; i < g.produced+n; i++ {
		msgs = append(msgs, kafka.Message{Topic: "orders", Key: fmt.Appendf(nil, "key-%d", i), Value: fmt.Appendf(nil, "poison-%d", i)})
	}
	g.produced += n
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := devbroker.CloseWriter(w); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "every poison message dead-lettered", func() bool { return g.dead() == n })
	deadA, deadB = g.ownDead(g.a), g.ownDead(g.b)
	if deadA == 0 || deadB == 0 {
		t.Fatalf("dead letters: a %d, b %d; want some on both", deadA, deadB)
	}
	return deadA, deadB
}

func (g *e2eGroup) ownDead(rt *runtime.Runtime) int {
	dl, _, err := rt.DeadLetters("orders", "", 1000)
	if err != nil {
		g.t.Fatal(err)
	}
	return len(dl)
}

// dead is how many dead letters both instances hold.
func (g *e2eGroup) dead() int { return g.ownDead(g.a) + g.ownDead(g.b) }

// listed waits until the CLI lists deadA dead letters of a and deadB of
// b through the group: once their changelog writes are acknowledged (the
// instances hold them before), which an operation's selection needs.
func (g *e2eGroup) listed(t *testing.T, deadA, deadB int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := run(t, "dead", "list", "--brokers", g.addr, "--group", g.group, "--limit", "100")
		if r.code == 0 && strings.Count(r.stdout, " a ") == deadA && strings.Count(r.stdout, " b ") == deadB {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead list --brokers: exit %d, want %d of a and %d of b:\n%s%s", r.code, deadA, deadB, r.stdout, r.stderr)
		}
		time.Sleep(100 * time.Millisecond) // polling the changelogs, not synchronising
	}
}

// TestDeadOpEndToEnd: two running instances hold dead letters of
// partitions of their own; 'dead requeue --brokers --group --class
// --rate' through the group has each owner requeue its own, at the rate:
// every dead letter is handled once again (the dependency came back), no
// dead letter is left, nothing is handled twice, and the command
// printed progress and the end.
func TestDeadOpEndToEnd(t *testing.T) {
	t.Parallel()
	const (
		n    = 24   // poison messages, 6 a partition
		rate = 20.0 // dead letters a second, for the group
	)
	g := newE2EGroup(t, "e2e")
	deadA, deadB := g.poison(n)
	g.listed(t, deadA, deadB)

	g.fixed.Store(true)
	began := time.Now()
	r := run(t, "dead", "requeue", "--brokers", g.addr, "--group", g.group, "--class", "orders", "--rate", fmt.Sprint(rate), "--wait", "2m")
	took := time.Since(began)
	t.Logf("requeue --brokers took %s:\n%s%s", took, r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("requeue: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !regexp.MustCompile(fmt.Sprintf(`(?m)^operation \S+: requeue %d dead letters of class "orders" of group %s`, n, g.group)).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^requeue: done \d+, failed again \d+, left \d+ of \d+$`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, fmt.Sprintf("requeue: over: done %d, failed again 0, left 0 of %d\n", n, n)) {
		t.Errorf("requeue's output lacks the operation, a progress line or the end")
	}

	// Every poison message handled once more, none twice, no dead letter
	// left.
	waitUntil(t, 30*time.Second, "every requeued message handled", func() bool {
		count, _ := g.handled.snapshot()
		return len(count) == n
	})
	waitUntil(t, 10*time.Second, "no dead letter left", func() bool { return g.dead() == 0 })
	count, at := g.handled.snapshot()
	for i := range n {
		if v := fmt.Sprintf("poison-%d", i); count[v] != 1 {
			t.Errorf("%s handled %d times after the requeue, want 1", v, count[v])
		}
	}
	if got := g.failed.Load(); got != n {
		t.Errorf("%d failures, want %d (each poison message once, before the fix)", got, n)
	}
	// The rate: n dead letters at rate a second take about (n-1)/rate
	// from the first to the last; a limiter's burst lets a few go at once.
	span := at[len(at)-1].Sub(at[0])
	t.Logf("handled %d requeued messages in %s: %.1f/s at --rate %g", n, span, float64(n-1)/span.Seconds(), rate)
	if minSpan := time.Duration(float64(n-1-4) / rate * float64(time.Second)); span < minSpan {
		t.Errorf("the %d requeued messages were handled within %s, faster than --rate %g allows (at least %s)", n, span, rate, minSpan)
	}

	r = run(t, "dead", "ops", "--brokers", g.addr, "--group", g.group)
	if r.code != 0 || !regexp.MustCompile(fmt.Sprintf(`(?m)^\S+ +requeue +done +%s +cli .* %d +20/s +%d +0 +0 +0 +0 +class="orders"$`,
		regexp.QuoteMeta(osUser()), n, n)).MatchString(r.stdout) {
		t.Errorf("dead ops: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestDeadOpEndToEndCancel: Ctrl-C in the middle of a slow requeue
// through the group cancels it: the owners stop taking its dead letters
// and end their part as canceled; what they requeued was handled once,
// the rest are still dead letters, none lost; dead ops shows it canceled
// by the CLI's user.
func TestDeadOpEndToEndCancel(t *testing.T) {
	t.Parallel()
	const n = 24
	g := newE2EGroup(t, "e2e-cancel")
	// The requeue selects what the changelogs hold when it is asked.
	deadA, deadB := g.poison(n)
	g.listed(t, deadA, deadB)
	g.fixed.Store(true)
	meta := metaTopicName(g.group)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- runWith(t, ctx, nil, "dead", "requeue", "--brokers", g.addr, "--group", g.group, "--all", "--rate", "2", "--wait", "2m")
	}()
	// Interrupt once both owners reported some done.
	var op string
	waitUntil(t, 60*time.Second, "both owners having requeued some", func() bool {
		started := map[string]bool{}
		for _, rec := range metaRecords(t, g.addr, meta) {
			p, _, err := deadop.Parse(rec.Key, rec.Value)
			if err != nil {
				t.Fatal(err)
			}
			if p.Kind == deadop.KindStatus && p.Status != nil && p.Status.Done > 0 {
				op, started[p.Instance] = p.Op, true
			}
		}
		return started["a"] && started["b"]
	})
	cancel()
	r := <-done
	if r.code != exitFailure || !strings.Contains(r.stderr, "interrupted: canceled operation "+op) {
		t.Fatalf("Ctrl-C: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Both owners end their part: canceled, or done when it ended before
	// the cancel reached the owner (a slow run); at least one canceled.
	var statuses map[string]deadop.Status
	var seen string
	waitUntil(t, 30*time.Second, "both owners' parts ended, one at least canceled", func() bool {
		statuses = map[string]deadop.Status{}
		for _, rec := range metaRecords(t, g.addr, meta) {
			p, _, _ := deadop.Parse(rec.Key, rec.Value)
			if p.Kind == deadop.KindStatus && p.Op == op && p.Status != nil {
				statuses[p.Instance] = *p.Status
			}
		}
		a, b := statuses["a"].State, statuses["b"].State
		ok := a != "" && a != deadop.Running && b != "" && b != deadop.Running && (a == deadop.Canceled || b == deadop.Canceled)
		if s := fmt.Sprintf("%+v", statuses); !ok && s != seen {
			t.Logf("statuses of %s: %s", op, s) // what a failure stopped at
			seen = s
		}
		return ok
	})
	for _, s := range statuses {
		if s.State == deadop.Done && s.Left != 0 {
			t.Errorf("%s's part done with %d left: %+v", s.Instance, s.Left, s)
		}
	}
	acted := statuses["a"].Done + statuses["b"].Done
	if acted >= n {
		t.Fatalf("the owners requeued %d of %d before the cancel took: nothing left to see", acted, n)
	}
	// What they requeued is handled once, the rest stay dead letters.
	waitUntil(t, 30*time.Second, "the requeued handled", func() bool {
		count, _ := g.handled.snapshot()
		return len(count) == acted
	})
	count, _ := g.handled.snapshot()
	for v, c := range count {
		if c != 1 {
			t.Errorf("%s handled %d times", v, c)
		}
	}
	if d := g.dead(); d != n-acted {
		t.Errorf("%d dead letters left, want %d (%d requeued of %d)", d, n-acted, acted, n)
	}
	r = run(t, "dead", "ops", "--brokers", g.addr, "--group", g.group, op)
	if r.code != 0 || !strings.Contains(r.stdout, "canceled by "+osUser()) || !strings.Contains(r.stdout, fmt.Sprintf("requeue of %d dead letters, canceled", n)) {
		t.Errorf("dead ops %s: exit %d\n%s%s", op, r.code, r.stdout, r.stderr)
	}
	t.Logf("canceled after %d of %d:\n%s", acted, n, r.stdout)
}
