package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// dep is a simulated dependency of a handler: down or up, with a record
// of every call, in a synctest bubble where the clock is fake.
type dep struct {
	down atomic.Bool
	took time.Duration // each call's fake time

	mu      sync.Mutex
	calls   []depCall
	done    map[string]int // ID -> Attempt when it succeeded
	failSet func(m *handoff.Message) bool
}

type depCall struct {
	id       string
	at, end  time.Time
	failed   bool
	attempts int
}

func newDep(took time.Duration) *dep { return &dep{took: took, done: map[string]int{}} }

func (d *dep) handle(ctx context.Context, m *handoff.Message) error {
	// The call fails if the dependency is down when it starts: a call in
	// flight when the outage ends still fails, as a request sent to a
	// database that is down does, so that a call's outcome follows from
	// when it started (TestSuspendOutage's probes).
	start := time.Now()
	fail := d.down.Load() || (d.failSet != nil && d.failSet(m))
	if d.took > 0 {
		time.Sleep(d.took)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, depCall{id: m.ID, at: start, end: time.Now(), failed: fail, attempts: m.Attempt})
	if fail {
		return errors.New("database down")
	}
	d.done[m.ID] = m.Attempt
	return nil
}

func (d *dep) snapshot() ([]depCall, map[string]int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	done := make(map[string]int, len(d.done))
	for k, v := range d.done {
		done[k] = v
	}
	return append([]depCall(nil), d.calls...), done
}

// dbConfig returns a Config with one Kafka-less class "db".
func dbConfig(t *testing.T, state string, h handoff.HandlerFunc, mod func(*Class)) Config {
	c := Class{Name: "db", Handler: h, Workers: 4, QueueSize: 64}
	if mod != nil {
		mod(&c)
	}
	return Config{StatePath: state, Logger: testLogger(t), Classes: []Class{c}, DrainTimeout: time.Second}
}

// runBubble starts rt in the bubble and returns a function that stops it
// and returns the report.
func runBubble(t *testing.T, rt *Runtime) func() *Report {
	t.Helper()
	var rep *Report
	var err error
	done := make(chan struct{})
	go func() { rep, err = rt.Run(context.Background()); close(done) }()
	for !rt.Ready() {
		time.Sleep(time.Millisecond)
	}
	return func() *Report {
		t.Helper()
		if err := rt.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-done
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
}

func submitDB(t *testing.T, rt *Runtime, n int) {
	t.Helper()
	for i := range n {
		if err := rt.Submit(context.Background(), "db", &handoff.Message{ID: fmt.Sprintf("m%03d", i), Key: []byte("k")}); err != nil {
			t.Fatal(err)
		}
	}
}

func holdOf(rt *Runtime) ClassHold { return rt.Stats()[0].Hold }

// TestSuspendOutage drives a 20 s outage through the default policy in
// fake time: the class is suspended after 10 distinct failures, the
// probes follow the documented schedule one at a time, nothing becomes a
// dead letter or counts an attempt, and the class flows again within one
// probe cap of the outage's end.
func TestSuspendOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(10 * time.Millisecond)
		d.down.Store(true)
		rt, err := newRuntime(dbConfig(t, filepath.Join(t.TempDir(), "state.db"), d.handle, nil))
		if err != nil {
			t.Fatal(err)
		}
		stop := runBubble(t, rt)
		began := time.Now()
		submitDB(t, rt, 50)
		time.Sleep(time.Second)
		h := holdOf(rt)
		if h.State != HoldSuspended || h.Suspensions != 1 || h.LastError != "database down" {
			t.Fatalf("after 1s of outage: %+v", h)
		}
		time.Sleep(began.Add(20 * time.Second).Sub(time.Now()))
		d.down.Store(false)
		up := time.Now()
		for holdOf(rt).State != HoldRunning {
			time.Sleep(time.Millisecond)
		}
		resumed := time.Now()
		time.Sleep(time.Second)
		rep := stop()

		calls, done := d.snapshot()
		if len(done) != 50 {
			t.Fatalf("%d of 50 messages done", len(done))
		}
		for id, a := range done {
			if a != 0 {
				t.Errorf("%s succeeded with Attempt %d, want 0: outage failures counted", id, a)
			}
		}
		if rep.DeadLettered != 0 || rep.Redelivered != 0 || rep.Snapshotted != 0 {
			t.Errorf("report: dead %d, redelivered %d, snapshotted %d", rep.DeadLettered, rep.Redelivered, rep.Snapshotted)
		}
		if late := resumed.Sub(up); late > DefaultProbeMaxBackoff+d.took {
			t.Errorf("class resumed %s after the outage ended, want <= %s", late, DefaultProbeMaxBackoff+d.took)
		}
		// Calls that started after the trip are the probes: one at a time,
		// each after the documented backoff from the previous one's end.
		var probes []depCall
		for _, c := range calls {
			if c.at.After(h.Since) {
				probes = append(probes, c)
				if !c.failed {
					break // the first success resumed the class
				}
			}
		}
		if len(probes) < 5 {
			t.Fatalf("%d probes in 20s", len(probes))
		}
		prevEnd := h.Since
		for i, p := range probes {
			want := min(DefaultProbeBackoff<<i, DefaultProbeMaxBackoff)
			if gap := p.at.Sub(prevEnd); gap < want/2 || gap > want {
				t.Errorf("probe %d started %s after the previous one ended, want in [%s, %s]", i+1, gap, want/2, want)
			}
			if p.attempts != 0 {
				t.Errorf("probe %d saw Attempt %d", i+1, p.attempts)
			}
			prevEnd = p.end
		}
		if !probes[len(probes)-1].at.After(up) || probes[len(probes)-1].failed {
			t.Errorf("the last probe before the resume did not succeed after the outage")
		}
		// Every call that started after the trip and before the outage
		// ended was a probe; the others that ran into the suspension were
		// in flight when it began.
		after, inflight := 0, 0
		for _, c := range calls {
			switch {
			case c.at.After(h.Since) && c.at.Before(up):
				after++
			case !c.at.After(h.Since) && c.end.After(h.Since):
				inflight++
			}
		}
		if after != len(probes)-1 {
			t.Errorf("%d handler calls started during the outage, %d of them probes", after, len(probes)-1)
		}
		t.Logf("outage 20s: %d handler calls in all, %d in flight at the trip, %d probes, resumed %s after the outage ended",
			len(calls), inflight, len(probes), resumed.Sub(up))
	})
}

// TestSuspendPoisonDeadLetters: one message that always fails among
// healthy ones fails alone, so it becomes a dead letter after its three
// attempts and the class is never suspended.
func TestSuspendPoisonDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(5 * time.Millisecond)
		d.failSet = func(m *handoff.Message) bool { return m.ID == "m017" }
		rt, err := newRuntime(dbConfig(t, filepath.Join(t.TempDir(), "state.db"), d.handle, nil))
		if err != nil {
			t.Fatal(err)
		}
		stop := runBubble(t, rt)
		submitDB(t, rt, 200)
		time.Sleep(5 * time.Second)
		h := holdOf(rt)
		rep := stop()
		if h.Suspensions != 0 || rep.DeadLettered != 1 {
			t.Fatalf("suspensions %d, dead letters %d; want 0 and 1", h.Suspensions, rep.DeadLettered)
		}
		_, done := d.snapshot()
		if len(done) != 199 {
			t.Fatalf("%d done, want 199", len(done))
		}
	})
}

// TestSuspendSteadyFailureRate: 5% of attempts failing at random causes
// no suspension.
func TestSuspendSteadyFailureRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(time.Millisecond)
		rnd := rand.New(rand.NewPCG(1, 2))
		var mu sync.Mutex
		d.failSet = func(*handoff.Message) bool { mu.Lock(); defer mu.Unlock(); return rnd.IntN(100) < 5 }
		rt, err := newRuntime(dbConfig(t, filepath.Join(t.TempDir(), "state.db"), d.handle, nil))
		if err != nil {
			t.Fatal(err)
		}
		stop := runBubble(t, rt)
		submitDB(t, rt, 3000)
		time.Sleep(5 * time.Second)
		h := holdOf(rt)
		rep := stop()
		calls, done := d.snapshot()
		failed := 0
		for _, c := range calls {
			if c.failed {
				failed++
			}
		}
		t.Logf("3000 messages, %d attempts, %d failed; dead letters %d", len(calls), failed, rep.DeadLettered)
		if h.Suspensions != 0 {
			t.Fatalf("a steady 5%% failure rate suspended the class %d times", h.Suspensions)
		}
		if failed < 100 || len(done)+int(rep.DeadLettered) != 3000 {
			t.Fatalf("%d failures, %d done, %d dead", failed, len(done), rep.DeadLettered)
		}
	})
}

// TestSuspendUnavailable: handoff.Unavailable suspends at once, and the
// first success resumes.
func TestSuspendUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		h := func(ctx context.Context, m *handoff.Message) error {
			if calls.Add(1) <= 3 {
				return handoff.Unavailable(errors.New("pool exhausted"))
			}
			return nil
		}
		rt, err := newRuntime(dbConfig(t, filepath.Join(t.TempDir(), "state.db"), h, func(c *Class) { c.Workers = 1 }))
		if err != nil {
			t.Fatal(err)
		}
		stop := runBubble(t, rt)
		submitDB(t, rt, 1)
		synctest.Wait()
		if h := holdOf(rt); h.State != HoldSuspended || h.LastError != "unavailable: pool exhausted" {
			t.Fatalf("after one Unavailable: %+v", h)
		}
		time.Sleep(2 * time.Second)
		h2 := holdOf(rt)
		rep := stop()
		if h2.State != HoldRunning || h2.Suspensions != 1 || calls.Load() != 4 || rep.Succeeded != 1 {
			t.Fatalf("hold %+v, calls %d, succeeded %d", h2, calls.Load(), rep.Succeeded)
		}
	})
}

// TestSuspendStopSaves: a stop during a suspension saves what the class
// holds with no outage attempt counted; the next start begins unsuspended
// and handles them.
func TestSuspendStopSaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		state := filepath.Join(t.TempDir(), "state.db")
		d := newDep(10 * time.Millisecond)
		d.down.Store(true)
		rt, err := newRuntime(dbConfig(t, state, d.handle, nil))
		if err != nil {
			t.Fatal(err)
		}
		stop := runBubble(t, rt)
		submitDB(t, rt, 40)
		time.Sleep(3 * time.Second)
		if h := holdOf(rt); h.State != HoldSuspended {
			t.Fatalf("not suspended: %+v", h)
		}
		rep := stop()
		if rep.Snapshotted != 40 || rep.DeadLettered != 0 {
			t.Fatalf("snapshotted %d, dead %d; want 40 and 0", rep.Snapshotted, rep.DeadLettered)
		}
		pending := snapshottest.Pending(t, state)
		for _, e := range pending {
			if e.Record.Message.Attempt != 0 {
				t.Errorf("%s saved with Attempt %d", e.Record.Message.ID, e.Record.Message.Attempt)
			}
		}

		d.down.Store(false)
		rt2, err := newRuntime(dbConfig(t, state, d.handle, nil))
		if err != nil {
			t.Fatal(err)
		}
		stop2 := runBubble(t, rt2)
		if h := holdOf(rt2); h.State != HoldRunning {
			t.Fatalf("restart begins %s", h.State)
		}
		time.Sleep(time.Second)
		stop2()
		if _, done := d.snapshot(); len(done) != 40 {
			t.Fatalf("%d of 40 done after the restart", len(done))
		}
	})
}

// TestPauseResume: a paused class starts nothing, survives a restart
// (with more saved messages than its queue holds), and resumes.
func TestPauseResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		state := filepath.Join(t.TempDir(), "state.db")
		d := newDep(time.Millisecond)
		small := func(c *Class) { c.Workers, c.QueueSize = 2, 4 }
		rt, err := newRuntime(dbConfig(t, state, d.handle, small))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := rt.Pause(ctx, "db", "x"); !errors.Is(err, ErrNotRunning) {
			t.Fatalf("Pause before Run: %v", err)
		}
		stop := runBubble(t, rt)
		if err := rt.Pause(ctx, "nope", "x"); !errors.Is(err, ErrUnknownClass) {
			t.Fatalf("Pause of an unknown class: %v", err)
		}
		if err := rt.Pause(ctx, "db", "schema migration"); err != nil {
			t.Fatal(err)
		}
		submitDB(t, rt, 4) // the queue's room
		time.Sleep(time.Second)
		if h := holdOf(rt); h.State != HoldPaused || h.Reason != "schema migration" {
			t.Fatalf("hold %+v", h)
		}
		if _, done := d.snapshot(); len(done) != 0 {
			t.Fatalf("%d handled while paused", len(done))
		}
		stop()

		// Six more saved messages than the queue holds.
		var recs []snapshot.Record
		for i := range 6 {
			recs = append(recs, snapshot.Record{Message: handoff.Message{ID: fmt.Sprintf("extra%d", i), Class: "db"}})
		}
		snapshottest.SeedPending(t, state, recs...)

		rt2, err := newRuntime(dbConfig(t, state, d.handle, small))
		if err != nil {
			t.Fatal(err)
		}
		stop2 := runBubble(t, rt2)
		time.Sleep(time.Second)
		if h := holdOf(rt2); h.State != HoldPaused || h.Reason != "schema migration" {
			t.Fatalf("after restart: %+v", h)
		}
		if _, done := d.snapshot(); len(done) != 0 {
			t.Fatalf("%d handled while paused after the restart", len(done))
		}
		if err := rt2.Resume(ctx, "db"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		stop2()
		if _, done := d.snapshot(); len(done) != 10 {
			t.Fatalf("%d of 10 handled after the resume", len(done))
		}
		rt3, err := newRuntime(dbConfig(t, state, d.handle, small))
		if err != nil {
			t.Fatal(err)
		}
		stop3 := runBubble(t, rt3)
		if h := holdOf(rt3); h.State != HoldRunning {
			t.Fatalf("a resumed class came back %s", h.State)
		}
		stop3()
	})
}

// warnRecorder keeps every record's level and message.
type warnRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *warnRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *warnRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *warnRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnRecorder) WithGroup(string) slog.Handler      { return h }

// count returns how many warnings had a message starting with prefix.
func (h *warnRecorder) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, prefix) {
			n++
		}
	}
	return n
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestSuspendAlerting: a 3.5-minute outage logs a warning when it begins,
// one each minute it lasts (WarnAfter's default) and one when it ends;
// the metrics follow it; readiness stays true.
func TestSuspendAlerting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(10 * time.Millisecond)
		d.down.Store(true)
		logs := &warnRecorder{}
		reg := prometheus.NewRegistry()
		cfg := dbConfig(t, filepath.Join(t.TempDir(), "state.db"), d.handle, nil)
		cfg.Logger, cfg.Registerer = slog.New(logs), reg
		rt, err := newRuntime(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := runBubble(t, rt)
		began := time.Now()
		submitDB(t, rt, 20)
		time.Sleep(30 * time.Second)
		if !rt.Ready() {
			t.Error("a suspension made the runtime not ready")
		}
		if s, n, secs := gauge(t, reg, "handoff_class_suspended"), gauge(t, reg, "handoff_class_suspensions_total"),
			gauge(t, reg, "handoff_class_suspended_seconds"); s != 1 || n != 1 || secs < 29 || secs > 30 {
			t.Errorf("30s into the outage: suspended %v, suspensions %v, seconds %v", s, n, secs)
		}
		time.Sleep(began.Add(210 * time.Second).Sub(time.Now()))
		// Suspended from the trip (a few handler times after began) until
		// the first probe after 210s: 209s at the least (a probe right at
		// the end), 216s at the most (the 5s probe cap, the handler).
		d.down.Store(false)
		time.Sleep(10 * time.Second)
		if s, secs, total := gauge(t, reg, "handoff_class_suspended"), gauge(t, reg, "handoff_class_suspended_seconds"),
			gauge(t, reg, "handoff_class_suspended_seconds_total"); s != 0 || secs != 0 || total < 209 || total > 216 {
			t.Errorf("after the outage: suspended %v, seconds %v, total %v", s, secs, total)
		}
		stop()
		if a, b, c := logs.count("class suspended"), logs.count("class still suspended"), logs.count("class resumed after a suspension"); a != 1 || b != 3 || c != 1 {
			t.Errorf("warnings: %d at the start, %d repeated, %d at the end; want 1, 3, 1", a, b, c)
		}
	})
}

// TestSuspendRule: the class is suspended by the 10th distinct message
// failing with no success between, not by a message's own retries, and a
// success in between starts the count again.
func TestSuspendRule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(time.Millisecond)
		d.failSet = func(m *handoff.Message) bool { return strings.HasPrefix(m.ID, "bad") }
		rt, err := newRuntime(dbConfig(t, filepath.Join(t.TempDir(), "state.db"), d.handle, func(c *Class) {
			c.Workers = 1
			c.Retry.MaxAttempts = 6
		}))
		if err != nil {
			t.Fatal(err)
		}
		stop := runBubble(t, rt)
		submit := func(ids ...string) {
			for _, id := range ids {
				if err := rt.Submit(context.Background(), "db", &handoff.Message{ID: id}); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(10 * time.Second)
		}
		// Two messages failing their 6 attempts each: 12 failures in a
		// row, but of two messages (poison, not an outage). Both become
		// dead letters.
		submit("bad01", "bad02")
		if h := holdOf(rt); h.Suspensions != 0 {
			t.Fatalf("suspended by two failing messages: %+v", h)
		}
		// A success ends the streak; two more failing messages make 12
		// failures of two messages again: no suspension.
		submit("good1")
		submit("bad03", "bad04")
		if h := holdOf(rt); h.Suspensions != 0 {
			t.Fatalf("suspended by two failing messages after a success: %+v", h)
		}
		// A third message's first failure is the 13th in a row, of three
		// messages: suspended, and that message is held, not dead.
		submit("bad05")
		h := holdOf(rt)
		rep := stop()
		if h.State != HoldSuspended || h.Reason != "13 attempts of 3 messages failed in a row" {
			t.Fatalf("after a third failing message: %+v", h)
		}
		if rep.DeadLettered != 4 || rep.Snapshotted != 1 {
			t.Fatalf("dead letters %d, saved %d; want 4 (before the suspension) and 1 (the one held)", rep.DeadLettered, rep.Snapshotted)
		}
	})
}

// TestSuspendFewMessagesOutage: an outage that meets only five messages
// (a quiet class, or an ordered one whose keys wait behind them) with
// quick retries. Counting distinct messages only, five never make ten:
// each ran out of its attempts and became a dead letter (5 of 5, the
// rental outage test's flake). Counting attempts across three or more
// messages, the tenth failure suspends the class before any message's
// third attempt: no dead letter, all five held.
func TestSuspendFewMessagesOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(time.Millisecond)
		d.down.Store(true)
		rt, err := newRuntime(dbConfig(t, filepath.Join(t.TempDir(), "state.db"), d.handle, func(c *Class) {
			c.Retry.InitialBackoff = time.Millisecond
		}))
		if err != nil {
			t.Fatal(err)
		}
		stop := runBubble(t, rt)
		submitDB(t, rt, 5)
		time.Sleep(10 * time.Second)
		h := holdOf(rt)
		rep := stop()
		if h.State != HoldSuspended || rep.DeadLettered != 0 || rep.Snapshotted != 5 {
			t.Fatalf("after 10s of outage: hold %+v, dead letters %d, saved %d; want suspended, 0, 5", h, rep.DeadLettered, rep.Snapshotted)
		}
	})
}

// TestPauseDelayed: a paused class's due delayed messages stay in the
// state file and hold back no other class's; the resume delivers them.
func TestPauseDelayed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDep(time.Millisecond)
		cfg := dbConfig(t, filepath.Join(t.TempDir(), "state.db"), d.handle, func(c *Class) { c.Workers, c.QueueSize = 1, 1 })
		other := cfg.Classes[0]
		other.Name = "other"
		cfg.Classes = append(cfg.Classes, other)
		rt, err := newRuntime(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := runBubble(t, rt)
		ctx := context.Background()
		if err := rt.Pause(ctx, "db", ""); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(time.Second)
		// More than the paused pool holds, due before the other class's.
		for i := range 3 {
			if err := rt.Schedule(ctx, "db", &handoff.Message{ID: fmt.Sprintf("db%d", i)}, at); err != nil {
				t.Fatal(err)
			}
		}
		if err := rt.Schedule(ctx, "other", &handoff.Message{ID: "other0"}, at.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		if _, done := d.snapshot(); len(done) != 1 {
			t.Fatalf("while db is paused: done %v, want other0 only", done)
		} else if _, ok := done["other0"]; !ok {
			t.Fatalf("while db is paused: done %v, want other0", done)
		}
		if err := rt.Resume(ctx, "db"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		stop()
		if _, done := d.snapshot(); len(done) != 4 {
			t.Fatalf("after the resume: done %v, want all 4", done)
		}
	})
}

// TestSuspendOutcomeHeld: a middleware is told that a failure the
// suspension holds is OutcomeHeld, not counted.
func TestSuspendOutcomeHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		h := func(ctx context.Context, m *handoff.Message) error {
			if calls.Add(1) == 1 {
				return handoff.Unavailable(errors.New("down"))
			}
			return nil
		}
		var mu sync.Mutex
		var got []Outcome
		watch := func(next handoff.HandlerFunc) handoff.HandlerFunc {
			return func(ctx context.Context, m *handoff.Message) error {
				OnOutcome(ctx, func(o Outcome) { mu.Lock(); got = append(got, o); mu.Unlock() })
				return next(ctx, m)
			}
		}
		cfg := dbConfig(t, filepath.Join(t.TempDir(), "state.db"), h, func(c *Class) {
			c.Workers = 1
			c.Middleware = []handoff.Middleware{watch}
		})
		rt, err := newRuntime(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := runBubble(t, rt)
		submitDB(t, rt, 1)
		time.Sleep(2 * time.Second)
		stop()
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 2 || got[0].Kind != OutcomeHeld || got[0].Attempt != 0 || got[1].Kind != OutcomeSucceeded || got[1].Attempt != 0 {
			t.Fatalf("outcomes %+v; want held then succeeded, no attempt counted", got)
		}
		if OutcomeHeld.String() != "held" {
			t.Errorf("OutcomeHeld is %q", OutcomeHeld)
		}
	})
}

// TestSuspendBatchClass: a batch class whose database is down fails
// whole batches; the class is suspended like a class of single messages,
// no message becomes a dead letter or counts an attempt, and every
// message is done once the database is back.
func TestSuspendBatchClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var down atomic.Bool
		down.Store(true)
		var mu sync.Mutex
		done := map[string]int{}
		batch := func(ctx context.Context, ms []*handoff.Message) error {
			time.Sleep(10 * time.Millisecond)
			if down.Load() {
				return errors.New("database down")
			}
			mu.Lock()
			defer mu.Unlock()
			for _, m := range ms {
				done[m.ID] = m.Attempt
			}
			return nil
		}
		cfg := dbConfig(t, filepath.Join(t.TempDir(), "state.db"), nil, func(c *Class) {
			c.Handler, c.BatchHandler, c.MaxBatch, c.Workers = nil, batch, 8, 2
		})
		rt, err := newRuntime(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := runBubble(t, rt)
		submitDB(t, rt, 64)
		time.Sleep(5 * time.Second)
		if h := holdOf(rt); h.State != HoldSuspended || h.Suspensions != 1 {
			t.Fatalf("after 5s of outage: %+v", h)
		}
		down.Store(false)
		for {
			mu.Lock()
			n := len(done)
			mu.Unlock()
			if n == 64 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		rep := stop()
		for id, a := range done {
			if a != 0 {
				t.Errorf("%s done with Attempt %d, want 0", id, a)
			}
		}
		if rep.DeadLettered != 0 || rep.Snapshotted != 0 {
			t.Errorf("report: dead %d, snapshotted %d", rep.DeadLettered, rep.Snapshotted)
		}
	})
}
