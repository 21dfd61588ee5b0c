package runtime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// calls counts the attempts that reach the chain per message value.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) mw(next handoff.HandlerFunc) handoff.HandlerFunc {
	return func(ctx context.Context, m *handoff.Message) error {
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[string(m.Value)]++
		c.mu.Unlock()
		return next(ctx, m)
	}
}

func (c *calls) of(v string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[v]
}

// TestTypedDecodeFailure: a Kafka record whose value does not decode
// becomes a dead letter after exactly one attempt (the class would retry
// a recoverable error 5 times), with an error naming "decode", the class,
// the offset and the decoder's message; the records around it are
// handled with their decoded values.
func TestTypedDecodeFailure(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	b.produceValues("orders", "k", `{"id":"a","cents":100}`, `{"id":`, `{"id":"c","cents":300}`)
	type order struct {
		ID    string `json:"id"`
		Cents int    `json:"cents"`
	}
	var mu sync.Mutex
	var got []order
	var attempts calls
	cfg := b.config(nil, nil)
	cfg.Classes = []Class{{Name: "orders", Topics: []string{"orders"}, Workers: 1,
		Retry:      RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
		Middleware: []handoff.Middleware{attempts.mw},
		Handler: handoff.Typed(handoff.JSON[order]{}, func(_ context.Context, _ *handoff.Message, o order) error {
			mu.Lock()
			got = append(got, o)
			mu.Unlock()
			return nil
		})}}
	rt, wait := startNew(t, cfg)
	waitFor(t, "two handled and one dead letter", func() bool {
		return rt.tally.total(evDeadLettered) == 1 && rt.tally.total(evSucceeded) == 2
	})
	dead, _, err := rt.DeadLetters("orders", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	rt.Shutdown(context.Background())
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if n := attempts.of(`{"id":`); n != 1 {
		t.Errorf("the undecodable record had %d attempts, want 1", n)
	}
	if rep.Retried != 0 || rep.DeadLettered != 1 {
		t.Errorf("retried %d, dead lettered %d; want 0, 1", rep.Retried, rep.DeadLettered)
	}
	if want := []order{{"a", 100}, {"c", 300}}; !reflect.DeepEqual(got, want) {
		t.Errorf("handled %v, want %v", got, want)
	}
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	const want = "permanent: handoff: decode class orders: topic orders partition 0 offset 1: unexpected end of JSON input"
	if dead[0].Err != want || dead[0].Message.Attempt != 1 {
		t.Errorf("dead letter: attempt %d, error %q; want 1, %q", dead[0].Message.Attempt, dead[0].Err, want)
	}
}

// mwConfig is a Config with classes fed by Submit only: no broker.
func mwConfig(t *testing.T, classes ...Class) Config {
	return Config{StatePath: filepath.Join(t.TempDir(), "state.db"), Logger: testLogger(t), Classes: classes,
		DrainTimeout: 100 * time.Millisecond, HardStopGrace: 2 * time.Second}
}

// running starts rt and waits until it takes submissions.
func runningMW(t *testing.T, rt *Runtime, ctx context.Context) func() (*Report, error) {
	wait := start(t, rt, ctx)
	waitFor(t, "ready", rt.Ready)
	return wait
}

// TestMiddlewareOrder: the runtime's middleware wrap the class's, the
// first outermost; every attempt passes through the whole chain once,
// inside the class's Timeout; what the chain returns is what the retry
// policy judges; OnOutcome tells each layer what followed.
func TestMiddlewareOrder(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var trail []string
	note := func(s string) { mu.Lock(); trail = append(trail, s); mu.Unlock() }
	layer := func(name string) handoff.Middleware {
		return func(next handoff.HandlerFunc) handoff.HandlerFunc {
			return func(ctx context.Context, m *handoff.Message) error {
				_, bounded := ctx.Deadline()
				note(fmt.Sprintf("%s>%s#%d bounded=%v", name, m.ID, m.Attempt, bounded))
				if !OnOutcome(ctx, func(o Outcome) { note(fmt.Sprintf("%s:%s %s attempt=%d", name, m.ID, o.Kind, o.Attempt)) }) {
					t.Errorf("%s: OnOutcome found no attempt", name)
				}
				err := next(ctx, m)
				note(fmt.Sprintf("%s<%s", name, m.ID))
				return err
			}
		}
	}
	// swallow turns the handler's "ignore" error into success: the
	// policy judges what the chain returns.
	swallow := func(next handoff.HandlerFunc) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error {
			if err := next(ctx, m); err != nil && err.Error() != "ignore" {
				return err
			}
			return nil
		}
	}
	done := make(chan struct{}, 3)
	cfg := mwConfig(t, Class{Name: "jobs", Workers: 1, Timeout: time.Minute,
		Retry:      RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
		Middleware: []handoff.Middleware{layer("c"), swallow},
		Handler: func(_ context.Context, m *handoff.Message) error {
			note("h:" + m.ID)
			defer func() { done <- struct{}{} }()
			switch {
			case m.ID == "flaky" && m.Attempt == 0:
				return errors.New("flaky")
			case m.ID == "bad":
				return handoff.Permanent(errors.New("bad"))
			case m.ID == "ignored":
				return errors.New("ignore")
			}
			return nil
		}})
	cfg.Middleware = []handoff.Middleware{layer("a"), layer("b")}
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := runningMW(t, rt, context.Background())
	for _, id := range []string{"flaky", "bad", "ignored"} {
		if err := rt.Submit(context.Background(), "jobs", &handoff.Message{ID: id}); err != nil {
			t.Fatal(err)
		}
		// One at a time, so that the trail has one order; the flaky
		// message has two attempts.
		for range map[bool]int{true: 2, false: 1}[id == "flaky"] {
			<-done
		}
		waitFor(t, "outcome of "+id, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return strings.HasPrefix(trail[len(trail)-1], "c:"+id) && !strings.Contains(trail[len(trail)-1], "retried")
		})
	}
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	attempt := func(id string, n int, kind, left string) []string {
		return []string{
			fmt.Sprintf("a>%s#%d bounded=true", id, n), fmt.Sprintf("b>%s#%d bounded=true", id, n),
			fmt.Sprintf("c>%s#%d bounded=true", id, n), "h:" + id, "c<" + id, "b<" + id, "a<" + id,
			fmt.Sprintf("a:%s %s attempt=%s", id, kind, left), fmt.Sprintf("b:%s %s attempt=%s", id, kind, left),
			fmt.Sprintf("c:%s %s attempt=%s", id, kind, left),
		}
	}
	var want []string
	want = append(want, attempt("flaky", 0, "retried", "1")...)
	want = append(want, attempt("flaky", 1, "succeeded", "1")...)
	want = append(want, attempt("bad", 0, "dead_lettered", "1")...)
	want = append(want, attempt("ignored", 0, "succeeded", "0")...)
	if !reflect.DeepEqual(trail, want) {
		t.Errorf("trail:\n%s\nwant:\n%s", strings.Join(trail, "\n"), strings.Join(want, "\n"))
	}
}

// TestOutcomeInterrupted: an attempt the hard stop cancels is told it was
// interrupted, and its message is saved to run again.
func TestOutcomeInterrupted(t *testing.T) {
	t.Parallel()
	outcomes := make(chan Outcome, 1)
	started := make(chan struct{})
	cfg := mwConfig(t, Class{Name: "jobs", Workers: 1,
		Middleware: []handoff.Middleware{func(next handoff.HandlerFunc) handoff.HandlerFunc {
			return func(ctx context.Context, m *handoff.Message) error {
				if !SetHeaders(ctx, m, []handoff.Header{{Key: "mw", Value: []byte("1")}}) {
					t.Error("SetHeaders refused before the attempt was settled")
				}
				OnOutcome(ctx, func(o Outcome) { outcomes <- o })
				return next(ctx, m)
			}
		}},
		Handler: func(ctx context.Context, m *handoff.Message) error {
			close(started)
			<-ctx.Done()
			return context.Cause(ctx)
		}})
	cfg.DrainTimeout = time.Millisecond
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := runningMW(t, rt, context.Background())
	if err := rt.Submit(context.Background(), "jobs", &handoff.Message{ID: "long"}); err != nil {
		t.Fatal(err)
	}
	<-started
	rt.Shutdown(context.Background())
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if o := <-outcomes; o.Kind != OutcomeInterrupted || o.Attempt != 0 {
		t.Errorf("outcome %+v, want interrupted at attempt 0", o)
	}
	if rep.Interrupted != 1 {
		t.Errorf("interrupted %d, want 1", rep.Interrupted)
	}
	pendingHeaders(t, cfg.StatePath, "mw")
}

// TestSetHeadersInterruptedSaved: as TestOutcomeInterrupted, for a
// message re-pushed from the state file: the headers its interrupted
// attempt set are saved with it. The stop left a stored message's record
// as it was unless the message waited out a backoff, so the headers
// (otelhandoff's trace context) were lost.
func TestSetHeadersInterruptedSaved(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	cfg := mwConfig(t, Class{Name: "jobs", Workers: 1,
		Middleware: []handoff.Middleware{func(next handoff.HandlerFunc) handoff.HandlerFunc {
			return func(ctx context.Context, m *handoff.Message) error {
				SetHeaders(ctx, m, []handoff.Header{{Key: "mw", Value: []byte("1")}})
				return next(ctx, m)
			}
		}},
		Handler: func(ctx context.Context, m *handoff.Message) error {
			close(started)
			<-ctx.Done()
			return context.Cause(ctx)
		}})
	cfg.DrainTimeout = time.Millisecond
	snapshottest.SeedPending(t, cfg.StatePath, snapshot.Record{Message: handoff.Message{ID: "saved", Class: "jobs",
		Headers: []handoff.Header{{Key: "old"}}}, Reason: reasonUnstarted})
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	<-started
	rt.Shutdown(context.Background())
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Interrupted != 1 {
		t.Errorf("interrupted %d, want 1", rep.Interrupted)
	}
	pendingHeaders(t, cfg.StatePath, "mw")
}

// TestOnOutcomeWithoutMiddleware: a class without middleware gets no
// attempt context.
func TestOnOutcomeWithoutMiddleware(t *testing.T) {
	t.Parallel()
	found := make(chan bool, 1)
	cfg := mwConfig(t, Class{Name: "jobs", Handler: func(ctx context.Context, m *handoff.Message) error {
		found <- OnOutcome(ctx, func(Outcome) {})
		return nil
	}})
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := runningMW(t, rt, context.Background())
	rt.Submit(context.Background(), "jobs", &handoff.Message{ID: "x"})
	if <-found {
		t.Error("OnOutcome found an attempt in a class without middleware")
	}
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
}

// TestMiddlewareConfig: a nil middleware, or one that returns a nil
// handler, is a configuration error.
func TestMiddlewareConfig(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *handoff.Message) error { return nil }
	cfg := mwConfig(t, Class{Name: "a", Handler: h, Middleware: []handoff.Middleware{nil}})
	cfg.Middleware = []handoff.Middleware{nil}
	_, err := newRuntime(cfg)
	for _, want := range []string{`Middleware 0 is nil`, `class "a": Middleware 0 is nil`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
	cfg = mwConfig(t, Class{Name: "a", Handler: h, Middleware: []handoff.Middleware{
		func(handoff.HandlerFunc) handoff.HandlerFunc { return nil }}})
	if _, err := newRuntime(cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "nil handler") {
		t.Errorf("error %v, want a config error about a nil handler", err)
	}
	// The nil handler of an inner middleware, wrapped by an outer one
	// (a tracing middleware of the Config's): the chain is not nil, but
	// every call would panic on the nil next.
	pass := func(next handoff.HandlerFunc) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error { return next(ctx, m) }
	}
	cfg.Middleware = []handoff.Middleware{pass}
	if _, err := newRuntime(cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "nil handler") {
		t.Errorf("inner middleware's nil handler: error %v, want a config error about a nil handler", err)
	}
}

// TestPublishHeadersFunc: the headers a dead letter is published with
// are what Config.PublishHeadersFunc returns for it.
func TestPublishHeadersFunc(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders", "orders-dlq")
	w := devbroker.NewWriter(b.broker.Addrs())
	if err := w.WriteMessages(context.Background(), kafka.Message{Topic: "orders", Value: []byte("x"),
		Headers: []kafka.Header{{Key: "traceparent", Value: []byte("old")}}}); err != nil {
		t.Fatal(err)
	}
	devbroker.CloseWriter(w)
	cfg := b.config(nil, nil)
	cfg.Classes = []Class{{Name: "orders", Topics: []string{"orders"}, DeadLetterTopic: "orders-dlq",
		Handler: func(context.Context, *handoff.Message) error { return handoff.Permanent(errors.New("cannot parse")) }}}
	cfg.PublishHeadersFunc = func(m *handoff.Message, hs []handoff.Header) []handoff.Header {
		out := make([]handoff.Header, 0, len(hs))
		for _, h := range hs {
			if h.Key == "traceparent" {
				h.Value = []byte("new for " + m.ID)
			}
			out = append(out, h)
		}
		return out
	}
	h := deadLetterHeaders(t, b, cfg)
	if h["traceparent"] != "new for orders/0/0" || h[HeaderClass] != "orders" {
		t.Errorf("headers %v", h)
	}
}

// TestSetHeadersStraggler: once the hard stop has given up on a handler
// and saved its message, SetHeaders leaves the message alone; the saved
// record has the headers set before.
func TestSetHeadersStraggler(t *testing.T) {
	t.Parallel()
	release, returned := make(chan struct{}), make(chan struct{})
	var setAfter atomic.Bool
	cfg := mwConfig(t, Class{Name: "jobs", Workers: 1,
		Middleware: []handoff.Middleware{func(next handoff.HandlerFunc) handoff.HandlerFunc {
			return func(ctx context.Context, m *handoff.Message) error {
				defer close(returned)
				SetHeaders(ctx, m, []handoff.Header{{Key: "before"}})
				err := next(ctx, m)
				setAfter.Store(SetHeaders(ctx, m, []handoff.Header{{Key: "after"}}))
				return err
			}
		}},
		Handler: func(ctx context.Context, m *handoff.Message) error {
			<-release // ignores ctx
			return nil
		}})
	cfg.DrainTimeout = time.Millisecond
	cfg.HardStopGrace = 10 * time.Millisecond
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := runningMW(t, rt, context.Background())
	if err := rt.Submit(context.Background(), "jobs", &handoff.Message{ID: "slow"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "running", func() bool { return rt.Stats()[0].Running == 1 })
	rt.Shutdown(context.Background())
	rep, err := wait()
	close(release)
	<-returned
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stragglers != 1 || setAfter.Load() {
		t.Errorf("stragglers %d, SetHeaders after the stop's save %v; want 1, false", rep.Stragglers, setAfter.Load())
	}
	pendingHeaders(t, cfg.StatePath, "before")
}

// pendingHeaders checks that the state file has one pending message,
// with one header, key.
func pendingHeaders(t *testing.T, path, key string) {
	t.Helper()
	pending := snapshottest.Pending(t, path)
	if len(pending) != 1 || len(pending[0].Record.Message.Headers) != 1 || pending[0].Record.Message.Headers[0].Key != key {
		t.Errorf("saved %v, want one message with header %q", pending, key)
	}
}

// BenchmarkHandlerChain measures what one attempt costs in the pool's
// handler and result functions with no middleware, with one that does
// nothing, and with one that registers an OnOutcome callback (the
// attempt context).
func BenchmarkHandlerChain(b *testing.B) {
	noop := func(next handoff.HandlerFunc) handoff.HandlerFunc { return next }
	pass := func(next handoff.HandlerFunc) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error { return next(ctx, m) }
	}
	hook := func(next handoff.HandlerFunc) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error {
			OnOutcome(ctx, func(Outcome) {})
			return next(ctx, m)
		}
	}
	for _, bc := range []struct {
		name string
		mw   []handoff.Middleware
	}{{"none", nil}, {"noop", []handoff.Middleware{noop}}, {"pass", []handoff.Middleware{pass}},
		{"pass3", []handoff.Middleware{pass, pass, pass}}, {"outcome", []handoff.Middleware{hook}}} {
		b.Run(bc.name, func(b *testing.B) {
			rt, err := newRuntime(Config{StatePath: filepath.Join(b.TempDir(), "s.db"), Classes: []Class{{Name: "c", Middleware: bc.mw,
				Handler: func(context.Context, *handoff.Message) error { return nil }}}})
			if err != nil {
				b.Fatal(err)
			}
			c := rt.classes.byName["c"]
			h, res := rt.handling.handler(c), rt.handling.result(c)
			it := &item{m: handoff.Message{ID: "x", Class: "c"}, src: fromSubmit}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := h(ctx, it); err != nil {
					b.Fatal(err)
				}
				res(it, nil)
			}
		})
	}
}

// TestSetHeadersAfterChainReturned: a middleware's goroutine that calls
// SetHeaders once the chain has returned (the runtime is deciding the
// attempt, here saving a dead letter) is refused: the runtime no longer
// reads the headers from the attempt. SetHeaders reported true while the
// runtime copied and saved the envelope without its headers (and raced
// with it), so a caller told its headers were set found the dead letter
// without them. Both a single-message class and a batch class.
func TestSetHeadersAfterChainReturned(t *testing.T) {
	t.Parallel()
	var set atomic.Int64 // the last n that SetHeaders reported set
	done := make(chan struct{}, 2)
	late := func(next handoff.HandlerFunc) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error {
			returned := make(chan struct{})
			go func() {
				defer func() { done <- struct{}{} }()
				<-returned
				for n := int64(1); SetHeaders(ctx, m, []handoff.Header{{Key: "n", Value: fmt.Append(nil, n)}}); n++ {
					set.Store(n)
				}
			}()
			defer close(returned)
			return next(ctx, m)
		}
	}
	bad := handoff.Permanent(errors.New("bad"))
	cfg := mwConfig(t,
		Class{Name: "jobs", Workers: 1, Middleware: []handoff.Middleware{late},
			Handler: func(ctx context.Context, m *handoff.Message) error { return bad }},
		Class{Name: "beats", Workers: 1, MaxBatch: 1, Middleware: []handoff.Middleware{late},
			BatchHandler: func(ctx context.Context, ms []*handoff.Message) error { return bad }})
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := runningMW(t, rt, context.Background())
	for _, class := range []string{"jobs", "beats"} {
		set.Store(0)
		if err := rt.Submit(context.Background(), class, &handoff.Message{ID: class}); err != nil {
			t.Fatal(err)
		}
		<-done
		waitFor(t, "the dead letter", func() bool { return rt.Stats()[rt.classes.byName[class].index].Failed == 1 })
		dls, _, err := rt.DeadLetters(class, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) != 1 {
			t.Fatalf("%s: dead letters %+v, want one", class, dls)
		}
		if n := set.Load(); n > 0 {
			hs := dls[0].Message.Headers
			if len(hs) != 1 || string(hs[0].Value) != fmt.Sprint(n) {
				t.Errorf("%s: SetHeaders reported n=%d set after the chain returned; the dead letter has headers %v", class, n, hs)
			}
		}
	}
	shutdownAndWait(t, rt, wait)
}
