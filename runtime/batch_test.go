package runtime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/goleak"

	"github.com/handoff-go/handoff"
)

// submitOnly returns a Config with one Submit-fed batch class "beats" on
// a state file in dir.
func submitOnly(t *testing.T, state string, c Class) Config {
	c.Name = "beats"
	return Config{StatePath: state, Classes: []Class{c}, Logger: testLogger(t),
		DrainTimeout: 5 * time.Second, HardStopGrace: 2 * time.Second}
}

// startWarmed starts a runtime on cfg, waits for it to run, submits warm
// to class "beats" and waits for warmed to close (the test's handler
// closes it once it has warm).
func startWarmed(t *testing.T, cfg Config, warm *handoff.Message, warmed <-chan struct{}) (*Runtime, func() (*Report, error)) {
	t.Helper()
	rt, wait := startNew(t, cfg)
	waitFor(t, "running", rt.Ready)
	if err := rt.Submit(context.Background(), "beats", warm); err != nil {
		t.Fatal(err)
	}
	<-warmed
	return rt, wait
}

// holdWarm, called first in a batch handler, holds the batch that starts
// with message "warm" until release closes, closing warm once it holds it.
func holdWarm(ms []*handoff.Message, warm chan<- struct{}, release <-chan struct{}) {
	if ms[0].ID == "warm" {
		close(warm)
		<-release
	}
}

// submitN submits n messages m-0.. with keys k-(i%keys) to class beats.
func submitN(t *testing.T, rt *Runtime, n, keys int) {
	t.Helper()
	for i := range n {
		m := &handoff.Message{ID: fmt.Sprintf("m-%d", i), Key: fmt.Appendf(nil, "k-%d", i%keys), Value: fmt.Appendf(nil, "%d", i)}
		if err := rt.Submit(context.Background(), "beats", m); err != nil {
			t.Fatal(err)
		}
	}
}

// A batch of 100 in which the handler fails message 37 recoverably once
// and message 63 permanently: the other 98 are done by the call, 37 runs
// again (Attempt 1) in a later batch and is done, 63 becomes a dead
// letter with its own error. A first message holds the one call slot
// until the 100 have filled the next batch.
func TestBatchOneFails(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sizes []int
	handled := map[string]int{}
	attempts := map[string]int{}
	all := make(chan struct{})
	warm, release := make(chan struct{}), make(chan struct{})
	errFlaky := errors.New("flaky row")
	errBad := errors.New("bad row")
	cfg := submitOnly(t, filepath.Join(t.TempDir(), "state.db"), Class{
		BatchHandler: func(ctx context.Context, ms []*handoff.Message) error {
			holdWarm(ms, warm, release)
			mu.Lock()
			defer mu.Unlock()
			sizes = append(sizes, len(ms))
			var be handoff.BatchError
			for i, m := range ms {
				switch {
				case m.ID == "m-37" && m.Attempt == 0:
					be.Fail(i, errFlaky)
				case m.ID == "m-63":
					be.Fail(i, handoff.Permanent(errBad))
				default:
					handled[m.ID]++
					attempts[m.ID] = m.Attempt
				}
			}
			if len(handled) == 100 {
				close(all)
			}
			return be.Err()
		},
		MaxBatch: 100, MaxWait: time.Millisecond, Workers: 1, QueueSize: 100,
		Retry: RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
	})
	rt, wait := startWarmed(t, cfg, &handoff.Message{ID: "warm"}, warm)
	submitN(t, rt, 100, 100)
	// The pool's one worker is in the warm call: the 100 wait in its
	// queue, and its next call takes them at once.
	waitFor(t, "a full batch", func() bool {
		s := rt.Stats()[0]
		return s.Running == 1 && s.Queued == 100 // warm and the 100
	})
	close(release)
	waitClosed(t, all, func() string { return "not all handled" })
	// A result is counted once its ResultFunc (the dead letter's write)
	// has returned.
	waitFor(t, "the results", func() bool { s := rt.Stats()[0]; return s.Succeeded == 100 && s.Failed == 1 })
	dls, _, err := rt.DeadLetters("beats", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	rep := shutdownAndWait(t, rt, wait)
	mu.Lock()
	defer mu.Unlock()
	if sizes[0] != 1 || sizes[1] != 100 {
		t.Errorf("batch sizes %v, want 1 (warm), 100, ...", sizes)
	}
	for id, n := range handled {
		if n != 1 {
			t.Errorf("%s handled %d times", id, n)
		}
	}
	if _, ok := handled["m-63"]; ok {
		t.Error("m-63 was handled")
	}
	if attempts["m-37"] != 1 {
		t.Errorf("m-37 done at attempt %d, want 1", attempts["m-37"])
	}
	if len(dls) != 1 || dls[0].Message.ID != "m-63" || dls[0].Message.Attempt != 1 || dls[0].Err != "permanent: bad row" {
		t.Fatalf("dead letters %+v, want m-63 after 1 attempt with its error", dls)
	}
	if rep.Succeeded != 100 || rep.DeadLettered != 1 || rep.Retried != 1 {
		t.Errorf("report: %d succeeded, %d dead-lettered, %d retried; want 100, 1, 1", rep.Succeeded, rep.DeadLettered, rep.Retried)
	}
}

// An ordered batch class: no batch holds two messages of a key, every
// key's messages are done in submission order, and when k-3's third
// message is a dead letter its later ones are parked, not run; the
// other keys flow.
func TestBatchOrderedParks(t *testing.T) {
	t.Parallel()
	const keys, perKey = 10, 10
	var mu sync.Mutex
	done := map[string][]int{} // key -> values in handling order
	var badBatch atomic.Bool
	cfg := submitOnly(t, filepath.Join(t.TempDir(), "state.db"), Class{
		Ordered: true,
		BatchHandler: func(ctx context.Context, ms []*handoff.Message) error {
			mu.Lock()
			defer mu.Unlock()
			seen := map[string]bool{}
			var be handoff.BatchError
			for i, m := range ms {
				k := string(m.Key)
				if seen[k] {
					badBatch.Store(true)
				}
				seen[k] = true
				var v int
				fmt.Sscan(string(m.Value), &v)
				if k == "k-3" && v/keys == 2 {
					be.Fail(i, handoff.Permanent(errors.New("bad order")))
					continue
				}
				done[k] = append(done[k], v)
			}
			return be.Err()
		},
		MaxBatch: 8, MaxWait: time.Millisecond, Workers: 2,
	})
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "running", rt.Ready)
	submitN(t, rt, keys*perKey, keys)
	waitFor(t, "keys handled and parked", func() bool {
		mu.Lock()
		n := 0
		for _, vs := range done {
			n += len(vs)
		}
		mu.Unlock()
		pk, err := rt.ParkedKeys()
		return err == nil && n == (keys-1)*perKey+2 && len(pk) == 1 && pk[0].Count == perKey-3
	})
	pk, _ := rt.ParkedKeys()
	shutdownAndWait(t, rt, wait)
	if badBatch.Load() {
		t.Error("a batch held two messages of one key")
	}
	if pk[0].Class != "beats" || string(pk[0].Key) != "k-3" {
		t.Errorf("parked %+v, want k-3 of beats", pk)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, vs := range done {
		if !slices.IsSorted(vs) {
			t.Errorf("key %s done out of order: %v", k, vs)
		}
	}
	if got := done["k-3"]; !slices.Equal(got, []int{3, 13}) {
		t.Errorf("k-3 done %v, want [3 13] (23 dead, the rest parked)", got)
	}
}

// A stop in the middle of a batch: the handler writes each message of a
// batch in turn and, once the hard stop cancels it part-way, returns a
// BatchError naming the messages it did not write. Those are saved, not
// counted as an attempt, and re-pushed by the next start; no message is
// handled twice, and every produced message is committed.
func TestBatchStopMidBatch(t *testing.T) {
	before := goleak.IgnoreCurrent()
	b := setup(t, 2, "beats")
	produced := b.produce(400)
	var runs atomic.Int32
	var stuck sync.Once
	inBatch := make(chan struct{})
	var firstRun, secondRun atomic.Int64
	var nonZeroAttempt atomic.Int64
	batchHandler := func(ctx context.Context, ms []*handoff.Message) error {
		var be handoff.BatchError
		for i, m := range ms {
			if runs.Load() == 1 && firstRun.Load() >= 150 {
				// Part-way through a batch: wait for the hard stop.
				stuck.Do(func() { close(inBatch) })
				<-ctx.Done()
				for j := i; j < len(ms); j++ {
					be.Fail(j, context.Cause(ctx))
				}
				return be.Err()
			}
			if m.Attempt != 0 {
				nonZeroAttempt.Add(1)
			}
			b.record(m)
			if runs.Load() == 1 {
				firstRun.Add(1)
			} else {
				secondRun.Add(1)
			}
		}
		return nil
	}
	mod := func(c *Class) {
		c.Handler, c.BatchHandler = nil, batchHandler
		c.MaxBatch, c.MaxWait, c.Workers, c.QueueSize = 50, 5*time.Millisecond, 2, 100
	}
	cfg := b.config(nil, mod)
	cfg.DrainTimeout = 50 * time.Millisecond
	cfg.HardStopGrace = 5 * time.Second
	runs.Store(1)
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait := start(t, rt, ctx)
	waitClosed(t, inBatch, func() string { return "no batch got stuck" })
	cancel()
	rep1, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if rep1.Interrupted == 0 {
		t.Error("the stuck batch's unfinished messages were not interrupted")
	}
	if int64(rep1.Succeeded) != firstRun.Load() {
		t.Errorf("first run: %d succeeded, handler wrote %d", rep1.Succeeded, firstRun.Load())
	}
	// The commit passes no saved message: Kafka keeps them too.
	committed1 := b.committed()
	if committed1 > firstRun.Load() {
		t.Errorf("first run committed %d, more than the %d handled", committed1, firstRun.Load())
	}
	b.checkSavedUncommitted(t, rep1.Snapshotted)

	runs.Store(2)
	rt2, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait2 := start(t, rt2, context.Background())
	// The commit passes the saved messages once the fetch has passed
	// their offsets too (their fetched copies settle with the re-pushed
	// ones), which can be after they were handled.
	waitFor(t, "the rest handled and committed", func() bool {
		u, _ := b.counts()
		return u == produced && b.committed() == int64(produced)
	})
	if err := rt2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep2, err := wait2()
	if err != nil {
		t.Fatal(err)
	}
	unique, total := b.counts()
	committed := b.committed()
	t.Logf("produced %d; run 1: handled %d, saved %d (interrupted %d, unstarted %d); run 2: re-pushed %d, handled %d; committed %d",
		produced, firstRun.Load(), rep1.Snapshotted, rep1.Interrupted, rep1.Unstarted, rep2.Repushed, secondRun.Load(), committed)
	if unique != produced || total != produced {
		t.Errorf("handled %d messages %d times, want each of %d once", unique, total, produced)
	}
	if rep2.Repushed != rep1.Snapshotted {
		t.Errorf("run 2 re-pushed %d, run 1 saved %d", rep2.Repushed, rep1.Snapshotted)
	}
	if n := nonZeroAttempt.Load(); n != 0 {
		t.Errorf("%d messages came back with an attempt counted", n)
	}
	if committed != int64(produced) {
		t.Errorf("committed %d, produced %d", committed, produced)
	}
	b.broker.Close()
	goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction("github.com/segmentio/kafka-go.(*connPool).discover"))
}

// A panicking batch handler fails every message of its batch with the
// *handoff.PanicError (each then retried and made a dead letter by the
// policy); the next batch runs, and a Goexit fails its batch too without
// leaving the other messages waiting.
func TestBatchPanicAndGoexit(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	cfg := submitOnly(t, filepath.Join(t.TempDir(), "state.db"), Class{
		BatchHandler: func(ctx context.Context, ms []*handoff.Message) error {
			calls.Add(1)
			switch string(ms[0].Value) {
			case "panic":
				panic("bulk insert exploded")
			case "goexit":
				goruntime.Goexit()
			}
			return nil
		},
		MaxBatch: 10, MaxWait: time.Millisecond, Workers: 1,
		Retry: RetryPolicy{MaxAttempts: 1},
	})
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "running", rt.Ready)
	for i, v := range []string{"panic", "goexit", "ok"} {
		if err := rt.Submit(context.Background(), "beats", &handoff.Message{ID: fmt.Sprint(i), Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the batch's result", func() bool { s := rt.Stats()[0]; return s.Succeeded+s.Failed == uint64(i+1) })
	}
	dls, _, err := rt.DeadLetters("beats", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	rep := shutdownAndWait(t, rt, wait)
	// The batch is reported by its pool (the worker's goroutine is gone),
	// the error naming the Goexit.
	if len(dls) != 2 || dls[0].Err != "handoff: handler panicked: bulk insert exploded" || !strings.Contains(dls[1].Err, "runtime.Goexit") {
		t.Errorf("dead letters %+v, want the panic's and the Goexit's", dls)
	}
	if rep.Succeeded != 1 || calls.Load() != 3 {
		t.Errorf("%d succeeded in %d calls, want 1 in 3", rep.Succeeded, calls.Load())
	}
}

func TestBatchConfig(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *handoff.Message) error { return nil }
	bh := func(context.Context, []*handoff.Message) error { return nil }
	_, err := newRuntime(Config{StatePath: "x", Classes: []Class{
		{Name: "both", Handler: h, BatchHandler: bh},
		{Name: "single", Handler: h, MaxBatch: 10},
		{Name: "neg", BatchHandler: bh, MaxBatch: -1, MaxWait: -time.Second},
	}})
	for _, want := range []string{
		`class "both" has both Handler and BatchHandler`,
		`class "single": MaxBatch and MaxWait need a BatchHandler`,
		`class "neg": MaxBatch must be > 0, got -1`,
		`class "neg": MaxWait must not be negative, got -1s`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New: %v; want an error containing %q", err, want)
		}
	}
	cfg, err := Config{StatePath: "x", Classes: []Class{{Name: "b", BatchHandler: bh, Workers: 3}}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Classes[0]; c.MaxBatch != DefaultMaxBatch || c.MaxWait != DefaultMaxWait || c.QueueSize != 3*DefaultMaxBatch {
		t.Errorf("defaults: MaxBatch %d, MaxWait %s, QueueSize %d", c.MaxBatch, c.MaxWait, c.QueueSize)
	}
}

// Counts of a batch class are per message: handoff_messages_total counts
// each message, handoff_batch_messages observes each call's size.
func TestBatchMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	release, warm := make(chan struct{}), make(chan struct{})
	cfg := submitOnly(t, filepath.Join(t.TempDir(), "state.db"), Class{
		BatchHandler: func(ctx context.Context, ms []*handoff.Message) error {
			holdWarm(ms, warm, release)
			return nil
		},
		MaxBatch: 20, MaxWait: time.Millisecond, Workers: 1, QueueSize: 40,
	})
	cfg.Registerer = reg
	rt, wait := startWarmed(t, cfg, &handoff.Message{ID: "warm"}, warm)
	submitN(t, rt, 40, 40)
	// The pool's one worker is in the first call, the 40 wait in its
	// queue: two full batches behind it.
	waitFor(t, "two batches behind the first", func() bool {
		s := rt.Stats()[0]
		return s.Running == 1 && s.Queued == 40
	})
	close(release)
	waitFor(t, "all handled", func() bool { return rt.Stats()[0].Succeeded == 41 })
	shutdownAndWait(t, rt, wait)
	out, err := testutil.CollectAndFormat(reg, expfmt.TypeTextPlain, "handoff_batch_messages", "handoff_messages_total")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`handoff_batch_messages_sum{class="beats"} 41`,
		`handoff_batch_messages_count{class="beats"} 3`,
		`handoff_messages_total{class="beats",outcome="succeeded"} 41`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
}

// A batch class's middleware runs per message and per attempt: each
// message passes through Config.Middleware and Class.Middleware on its
// own, with its own attempt context (OnOutcome tells it its outcome),
// the message a middleware passes on is the one the batch handler gets,
// a middleware that does not call next keeps its message out of the
// batch, and the messages still share batches.
func TestBatchMiddleware(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	outcomes := map[string][]string{}
	var sizes []int
	var values []string
	release := make(chan struct{})
	observe := func(next handoff.HandlerFunc) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error {
			id := m.ID
			if !OnOutcome(ctx, func(o Outcome) {
				mu.Lock()
				outcomes[id] = append(outcomes[id], o.Kind.String())
				mu.Unlock()
			}) {
				t.Errorf("%s: no attempt context", id)
			}
			up := *m
			up.Value = []byte(strings.ToUpper(string(m.Value)))
			return next(ctx, &up)
		}
	}
	skip := func(next handoff.HandlerFunc) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error {
			if m.ID == "dup" {
				return nil // already seen: not handled again
			}
			return next(ctx, m)
		}
	}
	warm := make(chan struct{})
	cfg := submitOnly(t, filepath.Join(t.TempDir(), "state.db"), Class{
		BatchHandler: func(ctx context.Context, ms []*handoff.Message) error {
			holdWarm(ms, warm, release)
			mu.Lock()
			defer mu.Unlock()
			sizes = append(sizes, len(ms))
			var be handoff.BatchError
			for i, m := range ms {
				values = append(values, string(m.Value))
				if m.ID == "m-3" && m.Attempt == 0 {
					be.Fail(i, errors.New("flaky"))
				}
			}
			return be.Err()
		},
		MaxBatch: 10, MaxWait: time.Millisecond, Workers: 1,
		Retry:      RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
		Middleware: []handoff.Middleware{skip},
	})
	cfg.Middleware = []handoff.Middleware{observe}
	rt, wait := startWarmed(t, cfg, &handoff.Message{ID: "warm", Value: []byte("w")}, warm)
	submitN(t, rt, 10, 10)
	bt := rt.classes.byName["beats"].batch
	waitFor(t, "a full batch behind the first", func() bool {
		bt.mu.Lock()
		defer bt.mu.Unlock()
		return bt.added == 11 // warm and the 10, joined (Running counts them a moment before)
	})
	close(release)
	if err := rt.Submit(context.Background(), "beats", &handoff.Message{ID: "dup"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all handled", func() bool { return rt.Stats()[0].Succeeded == 12 })
	shutdownAndWait(t, rt, wait)
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) < 2 || sizes[1] != 10 {
		t.Errorf("batch sizes %v, want 1 (warm), 10, ...", sizes)
	}
	for _, v := range values {
		if v != strings.ToUpper(v) {
			t.Errorf("the batch got %q, not the message the middleware passed on", v)
		}
	}
	if got := strings.Join(outcomes["m-3"], ","); got != "retried,succeeded" {
		t.Errorf("m-3 outcomes %s, want retried,succeeded", got)
	}
	for id, os := range outcomes {
		if id != "m-3" && strings.Join(os, ",") != "succeeded" {
			t.Errorf("%s outcomes %v, want succeeded", id, os)
		}
	}
	if len(outcomes) != 12 {
		t.Errorf("outcomes of %d messages, want 12", len(outcomes))
	}
}

// The drain estimate of a batch class uses the call's time per message:
// calls of 2ms for up to 50 messages give a rate far above the 500/s one
// call slot would give if each call counted as one message.
func TestBatchDrainRate(t *testing.T) {
	t.Parallel()
	cfg := submitOnly(t, filepath.Join(t.TempDir(), "state.db"), Class{
		BatchHandler: func(ctx context.Context, ms []*handoff.Message) error {
			time.Sleep(2 * time.Millisecond)
			return nil
		},
		MaxBatch: 50, MaxWait: 50 * time.Millisecond, Workers: 1,
	})
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "running", rt.Ready)
	submitN(t, rt, 400, 400)
	waitFor(t, "all handled", func() bool { return rt.Stats()[0].Succeeded == 400 })
	cs := rt.Stats()[0]
	shutdownAndWait(t, rt, wait)
	if cs.Rate < 2000 {
		t.Errorf("rate %.0f messages/s, want the per-message rate of batch calls (~25,000/s for full batches)", cs.Rate)
	}
}

// A batch whose handler calls runtime.Goexit fails every message of the
// call, and only those: a message of the same batch that the ordered
// gate parked (its key blocked by a dead letter) stays parked and is
// neither retried nor made a dead letter.
func TestBatchGoexitKeepsParked(t *testing.T) {
	t.Parallel()
	warm, release := make(chan struct{}), make(chan struct{})
	cfg := submitOnly(t, filepath.Join(t.TempDir(), "state.db"), Class{
		BatchHandler: func(ctx context.Context, ms []*handoff.Message) error {
			holdWarm(ms, warm, release)
			var be handoff.BatchError
			for i, m := range ms {
				switch string(m.Value) {
				case "bad":
					be.Fail(i, handoff.Permanent(errors.New("bad row")))
				case "goexit":
					goruntime.Goexit()
				}
			}
			return be.Err()
		},
		Ordered: true, MaxBatch: 10, MaxWait: time.Millisecond, Workers: 1,
		Retry: RetryPolicy{MaxAttempts: 1},
	})
	rt, wait := startNew(t, cfg)
	waitFor(t, "running", rt.Ready)
	submit := func(id, key, value string) {
		t.Helper()
		if err := rt.Submit(context.Background(), "beats", &handoff.Message{ID: id, Key: []byte(key), Value: []byte(value)}); err != nil {
			t.Fatal(err)
		}
	}
	submit("a", "k", "bad") // a dead letter: key k is blocked
	waitFor(t, "the blocker", func() bool { return rt.Stats()[0].Failed == 1 })
	submit("warm", "w", "")
	<-warm
	submit("b", "k", "")       // parked behind a
	submit("c", "j", "goexit") // the call exits
	waitFor(t, "b and c in one batch", func() bool { s := rt.Stats()[0]; return s.Running == 1 && s.Queued == 2 })
	close(release)
	waitFor(t, "the batch's results", func() bool {
		s := rt.Stats()[0]
		return s.Running == 0 && s.Queued == 0 && s.Parked == 1 && s.Succeeded == 1 && s.Failed >= 2
	})
	dls, _, err := rt.DeadLetters("beats", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	parked, err := rt.Parked("beats", []byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	st := rt.Stats()[0]
	shutdownAndWait(t, rt, wait)
	var ids []string
	for _, d := range dls {
		ids = append(ids, d.Message.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a", "c"}) {
		t.Errorf("dead letters %v, want a and c", ids)
	}
	if len(parked) != 1 || parked[0].ID != "b" {
		t.Errorf("parked behind k: %+v, want b", parked)
	}
	if st.Failed != 2 || st.Retried != 0 {
		t.Errorf("failed %d, retried %d; want 2 (a, c) and 0", st.Failed, st.Retried)
	}
}

// A batch handler that returns a nil *handoff.BatchError (the handler
// made none: no message failed) has every message done, with and without
// middleware. The runtime's spread read the nil error's Failed and
// panicked: every message failed, with the runtime's own nil dereference
// or, with middleware, with an error saying the handler called
// runtime.Goexit, and became a dead letter.
func TestBatchNilBatchError(t *testing.T) {
	t.Parallel()
	pass := func(next handoff.HandlerFunc) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error { return next(ctx, m) }
	}
	for _, mw := range [][]handoff.Middleware{nil, {pass}} {
		cfg := submitOnly(t, filepath.Join(t.TempDir(), "state.db"), Class{
			BatchHandler: func(ctx context.Context, ms []*handoff.Message) error {
				var be *handoff.BatchError // made on the first failure; none failed
				return be
			},
			MaxBatch: 5, MaxWait: time.Millisecond, Workers: 1, Retry: RetryPolicy{MaxAttempts: 1},
			Middleware: mw,
		})
		rt, wait := startNew(t, cfg)
		waitFor(t, "running", rt.Ready)
		submitN(t, rt, 3, 3)
		waitFor(t, "the results", func() bool { s := rt.Stats()[0]; return s.Succeeded+s.Failed == 3 })
		dls, _, err := rt.DeadLetters("beats", "", 10)
		if err != nil {
			t.Fatal(err)
		}
		rep := shutdownAndWait(t, rt, wait)
		if rep.Succeeded != 3 || len(dls) != 0 {
			var errs []string
			for _, d := range dls {
				errs = append(errs, d.Err)
			}
			t.Errorf("%d middleware: %d succeeded, dead letters %q; want 3 and none", len(mw), rep.Succeeded, errs)
		}
	}
}
