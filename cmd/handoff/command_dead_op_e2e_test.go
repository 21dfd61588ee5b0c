package main

import (
	"context"
	"fmt"
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

// TestDeadOpEndToEnd: two running instances hold dead letters of
// partitions of their own; 'dead requeue --brokers --group --class
// --rate' through the group has each owner requeue its own, at the rate:
// every dead letter is handled once again (the dependency came back), no
// dead letter is left, nothing is handled twice, and the command
// printed progress and the end.
func TestDeadOpEndToEnd(t *testing.T) {
	t.Parallel()
	const (
		group = "e2e"
		parts = 4
		n     = 24   // poison messages, 6 a partition
		rate  = 20.0 // dead letters a second, for the group
	)
	b, err := devbroker.Start(devbroker.Config{Topics: []string{"orders"}, Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)

	var fixed atomic.Bool // the dependency is back: poison succeeds
	var failed atomic.Int64
	handled := &e2eHandled{count: map[string]int{}, at: map[string]time.Time{}}
	handler := func(_ context.Context, m *handoff.Message) error {
		v := string(m.Value)
		if strings.HasPrefix(v, "poison-") && !fixed.Load() {
			failed.Add(1)
			return handoff.Permanent(fmt.Errorf("dependency down for %s", v))
		}
		handled.add(v)
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
			Logger:         slog.New(slog.DiscardHandler),
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
	rtA := start("a")
	waitUntil(t, 30*time.Second, "a ready", rtA.Ready)
	rtB := start("b")
	waitUntil(t, 30*time.Second, "b ready", rtB.Ready)
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
		return a > 0 && bb > 0 && a+bb == parts
	})

	w := devbroker.NewWriter(b.Addrs())
	w.Balancer = &kafka.Hash{}
	var msgs []kafka.Message
	for i := range n {
		msgs = append(msgs, kafka.Message{Topic: "orders", Key: fmt.Appendf(nil, "key-%d", i), Value: fmt.Appendf(nil, "poison-%d", i)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := devbroker.CloseWriter(w); err != nil {
		t.Fatal(err)
	}
	ownDead := func(rt *runtime.Runtime) int {
		dl, _, err := rt.DeadLetters("orders", "", 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(dl)
	}
	waitUntil(t, 30*time.Second, "every poison message dead-lettered", func() bool {
		return ownDead(rtA)+ownDead(rtB) == n
	})
	deadA, deadB := ownDead(rtA), ownDead(rtB)
	if deadA == 0 || deadB == 0 {
		t.Fatalf("dead letters: a %d, b %d; want some on both", deadA, deadB)
	}
	// The CLI sees them all, each with its owner.
	r := run(t, "dead", "list", "--brokers", b.Addr(), "--group", group, "--limit", "100")
	if r.code != 0 || strings.Count(r.stdout, " a ") != deadA || strings.Count(r.stdout, " b ") != deadB {
		t.Fatalf("dead list --brokers: exit %d, want %d of a and %d of b:\n%s%s", r.code, deadA, deadB, r.stdout, r.stderr)
	}

	fixed.Store(true)
	began := time.Now()
	r = run(t, "dead", "requeue", "--brokers", b.Addr(), "--group", group, "--class", "orders", "--rate", fmt.Sprint(rate), "--wait", "2m")
	took := time.Since(began)
	t.Logf("requeue --brokers took %s:\n%s%s", took, r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("requeue: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !regexp.MustCompile(fmt.Sprintf(`(?m)^operation \S+: requeue %d dead letters of class "orders" of group %s`, n, group)).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^requeue: done \d+, failed again \d+, left \d+ of \d+$`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, fmt.Sprintf("requeue: over: done %d, failed again 0, left 0 of %d\n", n, n)) {
		t.Errorf("requeue's output lacks the operation, a progress line or the end")
	}

	// Every poison message handled once more, none twice, no dead letter
	// left.
	waitUntil(t, 30*time.Second, "every requeued message handled", func() bool {
		count, _ := handled.snapshot()
		return len(count) == n
	})
	waitUntil(t, 10*time.Second, "no dead letter left", func() bool { return ownDead(rtA)+ownDead(rtB) == 0 })
	count, at := handled.snapshot()
	for i := range n {
		if v := fmt.Sprintf("poison-%d", i); count[v] != 1 {
			t.Errorf("%s handled %d times after the requeue, want 1", v, count[v])
		}
	}
	if got := failed.Load(); got != n {
		t.Errorf("%d failures, want %d (each poison message once, before the fix)", got, n)
	}
	// The rate: n dead letters at rate a second take about (n-1)/rate
	// from the first to the last; a limiter's burst lets a few go at once.
	span := at[len(at)-1].Sub(at[0])
	t.Logf("handled %d requeued messages in %s: %.1f/s at --rate %g", n, span, float64(n-1)/span.Seconds(), rate)
	if minSpan := time.Duration(float64(n-1-4) / rate * float64(time.Second)); span < minSpan {
		t.Errorf("the %d requeued messages were handled within %s, faster than --rate %g allows (at least %s)", n, span, rate, minSpan)
	}

	r = run(t, "dead", "ops", "--brokers", b.Addr(), "--group", group)
	if r.code != 0 || !regexp.MustCompile(fmt.Sprintf(`(?m)^\S+ +requeue +done +%s +cli .* %d +20/s +%d +0 +0 +0 +0 +class="orders"$`,
		regexp.QuoteMeta(osUser()), n, n)).MatchString(r.stdout) {
		t.Errorf("dead ops: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
