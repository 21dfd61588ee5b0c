package otelhandoff_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/testio"
	"github.com/handoff-go/handoff/otelhandoff"
	"github.com/handoff-go/handoff/runtime"
)

func TestMain(m *testing.M) {
	// Every test runs for kafka-go, then for franz-go.
	goleak.VerifyTestMain(testio.BothClients(m),
		// kafka-go's package-level connection pool for the default
		// transport keeps an idle reaper per address.
		goleak.IgnoreAnyFunction("github.com/segmentio/kafka-go.(*connPool).discover"),
	)
}

// env is one test's broker, recorder and producer span.
type env struct {
	t        *testing.T
	broker   *devbroker.Broker
	rec      *tracetest.SpanRecorder
	tp       *sdktrace.TracerProvider
	tracing  *otelhandoff.Tracing
	state    string
	producer trace.SpanContext
}

func newEnv(t *testing.T, topics ...string) *env {
	t.Helper()
	b, err := devbroker.Start(devbroker.Config{Topics: topics, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	return &env{t: t, broker: b, rec: rec, tp: tp, state: filepath.Join(t.TempDir(), "state.db"),
		tracing: otelhandoff.New(otelhandoff.Config{TracerProvider: tp, Propagator: propagation.TraceContext{}, ConsumerGroup: "g-" + t.Name()})}
}

// produce writes one record to topic with key, carrying the context of a
// producer span in a traceparent header.
func (e *env) produce(topic, key, value string) {
	e.t.Helper()
	ctx, span := e.tp.Tracer("producer").Start(context.Background(), "send "+topic, trace.WithSpanKind(trace.SpanKindProducer))
	e.producer = span.SpanContext()
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	span.End()
	var hs []kafka.Header
	for k, v := range carrier {
		hs = append(hs, kafka.Header{Key: k, Value: []byte(v)})
	}
	w := devbroker.NewWriter(e.broker.Addrs())
	defer devbroker.CloseWriter(w)
	if err := w.WriteMessages(context.Background(), kafka.Message{Topic: topic, Key: []byte(key), Value: []byte(value), Headers: hs}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) config(c runtime.Class) runtime.Config {
	return runtime.Config{
		Client:  runtime.Client(testio.Client()), // the run's client (TestMain)
		Brokers: e.broker.Addrs(), Group: "g-" + e.t.Name(), StatePath: e.state,
		CommitInterval: 100 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond, SessionTimeout: 6 * time.Second,
		DrainTimeout: 100 * time.Millisecond, HardStopGrace: 2 * time.Second,
		Classes:            []runtime.Class{c},
		Middleware:         []handoff.Middleware{e.tracing.Middleware},
		PublishHeadersFunc: e.tracing.PublishHeaders,
	}
}

// running is a runtime started by [env.start], running until stop.
type running struct {
	rt     *runtime.Runtime
	cancel context.CancelFunc
	ch     chan runResult
}

type runResult struct {
	rep *runtime.Report
	err error
}

// start makes a runtime of cfg and runs it in the background.
func (e *env) start(cfg runtime.Config) *running {
	e.t.Helper()
	rt, err := runtime.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{rt: rt, cancel: cancel, ch: make(chan runResult, 1)}
	go func() { rep, err := rt.Run(ctx); r.ch <- runResult{rep, err} }()
	return r
}

// stop cancels the run and returns what Run returned; it blocks until
// Run has.
func (r *running) stop() (*runtime.Report, error) {
	r.cancel()
	res := <-r.ch
	return res.rep, res.err
}

// run runs cfg until until is closed, then stops it.
func (e *env) run(cfg runtime.Config, until <-chan struct{}) *runtime.Report {
	e.t.Helper()
	r := e.start(cfg)
	select {
	case <-until:
	case <-time.After(30 * time.Second):
		e.t.Fatal("timed out")
	}
	rep, err := r.stop()
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

// ended returns the recorded spans of the handoff scope, in start order.
func (e *env) ended() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range e.rec.Ended() {
		if s.InstrumentationScope().Name == otelhandoff.ScopeName {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartTime().Before(out[j].StartTime()) })
	return out
}

// dump prints spans as the recorder sees them.
func dump(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for i, s := range spans {
		fmt.Fprintf(&b, "span %d: %q kind=%s\n", i, s.Name(), s.SpanKind())
		fmt.Fprintf(&b, "  trace=%s span=%s parent=%s (remote=%v)\n", s.SpanContext().TraceID(), s.SpanContext().SpanID(), s.Parent().SpanID(), s.Parent().IsRemote())
		fmt.Fprintf(&b, "  status=%s %q duration=%s\n", s.Status().Code, s.Status().Description, s.EndTime().Sub(s.StartTime()).Round(time.Microsecond))
		for _, a := range s.Attributes() {
			fmt.Fprintf(&b, "  attr %s=%s\n", a.Key, a.Value.Emit())
		}
		for _, ev := range s.Events() {
			fmt.Fprintf(&b, "  event %q", ev.Name)
			for _, a := range ev.Attributes {
				if a.Key == "exception.stacktrace" {
					continue
				}
				fmt.Fprintf(&b, " %s=%s", a.Key, a.Value.Emit())
			}
			b.WriteString("\n")
		}
		for _, l := range s.Links() {
			fmt.Fprintf(&b, "  link trace=%s span=%s", l.SpanContext.TraceID(), l.SpanContext.SpanID())
			for _, a := range l.Attributes {
				fmt.Fprintf(&b, " %s=%s", a.Key, a.Value.Emit())
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, a := range s.Attributes() {
		m[a.Key] = a.Value.Emit()
	}
	return m
}

func events(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, ev := range s.Events() {
		out = append(out, ev.Name)
	}
	return out
}

// TestRetriedThenSucceeds: a message that fails once, is retried in
// place and succeeds makes two spans, both children of the producer's
// span, with the Kafka attributes; the first failed with a retry event,
// the second links to the first.
func TestRetriedThenSucceeds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "orders")
	e.produce("orders", "o-1", `{"id":"o-1"}`)
	done := make(chan struct{})
	cfg := e.config(runtime.Class{Name: "orders", Topics: []string{"orders"},
		Retry: runtime.RetryPolicy{InitialBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond},
		Handler: func(ctx context.Context, m *handoff.Message) error {
			if m.Attempt == 0 {
				return errors.New("inventory service: 503")
			}
			close(done)
			return nil
		}})
	e.run(cfg, done)
	spans := e.ended()
	t.Logf("spans of one message that fails once, is retried and succeeds:\n%s", dump(spans))
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	first, second := spans[0], spans[1]
	for i, s := range spans {
		if s.Parent().SpanID() != e.producer.SpanID() || s.SpanContext().TraceID() != e.producer.TraceID() || !s.Parent().IsRemote() {
			t.Errorf("span %d: parent %s of trace %s, want the producer's %s", i, s.Parent().SpanID(), s.SpanContext().TraceID(), e.producer.SpanID())
		}
		if s.Name() != "process orders" || s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("span %d: %q kind %s", i, s.Name(), s.SpanKind())
		}
		a := attrs(s)
		want := map[attribute.Key]string{
			"messaging.system": "kafka", "messaging.destination.name": "orders", "messaging.destination.partition.id": "0",
			"messaging.kafka.offset": "0", "messaging.kafka.message.key": "o-1", "messaging.consumer.group.name": "g-" + t.Name(),
			"messaging.operation.type": "process", "messaging.operation.name": "process", "handoff.class": "orders",
			"handoff.message.id": "orders/0/0", "handoff.attempt": fmt.Sprint(i),
		}
		for k, v := range want {
			if a[k] != v {
				t.Errorf("span %d: %s=%q, want %q", i, k, a[k], v)
			}
		}
	}
	if first.Status().Code != codes.Error || first.Status().Description != "inventory service: 503" {
		t.Errorf("first span status %v", first.Status())
	}
	if got := strings.Join(events(first), ","); got != "exception,handoff.retry" {
		t.Errorf("first span events %s, want exception,handoff.retry", got)
	}
	if second.Status().Code != codes.Unset || len(second.Events()) != 0 {
		t.Errorf("second span status %v events %v", second.Status(), events(second))
	}
	if l := second.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != first.SpanContext().SpanID() {
		t.Errorf("second span links %v, want one to the first span %s", l, first.SpanContext().SpanID())
	}
	if len(first.Links()) != 0 {
		t.Errorf("first span has links %v", first.Links())
	}
}

// TestDeadLetterPublished: a permanent failure's span has a dead-letter
// event, and the dead letter published to the topic carries that span's
// context as its traceparent.
func TestDeadLetterPublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "orders", "orders-dlq")
	e.produce("orders", "o-1", `not json`)
	var published atomic.Bool
	done := make(chan struct{})
	cfg := e.config(runtime.Class{Name: "orders", Topics: []string{"orders"}, DeadLetterTopic: "orders-dlq",
		Handler: handoff.Typed(handoff.JSON[map[string]any]{}, func(context.Context, *handoff.Message, map[string]any) error { return nil })})
	go func() {
		// The dead letter is published in the background: read it.
		rd := kafka.NewReader(kafka.ReaderConfig{Brokers: e.broker.Addrs(), Topic: "orders-dlq", Partition: 0, MaxWait: 100 * time.Millisecond})
		defer rd.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		m, err := rd.ReadMessage(ctx)
		if err != nil {
			t.Error(err)
			close(done)
			return
		}
		// The handler's span ends when its call returns, which may be
		// after the background publish the reader saw.
		spans := e.ended()
		for end := time.Now().Add(5 * time.Second); len(spans) == 0 && time.Now().Before(end); spans = e.ended() {
			time.Sleep(5 * time.Millisecond)
		}
		if len(spans) != 1 {
			t.Errorf("%d spans, want 1", len(spans))
		} else {
			carrier := propagation.MapCarrier{}
			for _, h := range m.Headers {
				carrier[h.Key] = string(h.Value)
			}
			sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
			if sc.SpanID() != spans[0].SpanContext().SpanID() || sc.TraceID() != e.producer.TraceID() {
				t.Errorf("published dead letter's context %s/%s, want the failed attempt's %s/%s",
					sc.TraceID(), sc.SpanID(), spans[0].SpanContext().TraceID(), spans[0].SpanContext().SpanID())
			}
			t.Logf("dead letter published with traceparent %s:\n%s", carrier["traceparent"], dump(spans))
		}
		published.Store(true)
		close(done)
	}()
	e.run(cfg, done)
	if !published.Load() {
		return
	}
	s := e.ended()[0]
	if got := strings.Join(events(s), ","); got != "exception,handoff.dead_letter" {
		t.Errorf("events %s, want exception,handoff.dead_letter", got)
	}
	if d := s.Status().Description; s.Status().Code != codes.Error || !strings.Contains(d, "decode class orders: topic orders partition 0 offset 0") {
		t.Errorf("status %v", s.Status())
	}
}

// TestRepushLinksEarlierAttempt: a message interrupted by a stop is
// saved with its attempt's context; after the restart the span of its
// re-pushed attempt links to the span from before the stop.
func TestRepushLinksEarlierAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "orders")
	e.produce("orders", "o-1", "v")
	started := make(chan struct{})
	cfg := e.config(runtime.Class{Name: "orders", Topics: []string{"orders"},
		Handler: func(ctx context.Context, m *handoff.Message) error {
			close(started)
			<-ctx.Done() // until the hard stop
			return context.Cause(ctx)
		}})
	cfg.DrainTimeout = time.Millisecond
	if rep := e.run(cfg, started); rep.Interrupted != 1 || rep.Snapshotted != 1 {
		t.Fatalf("interrupted %d, snapshotted %d; want 1, 1", rep.Interrupted, rep.Snapshotted)
	}
	before := e.ended()
	if len(before) != 1 || strings.Join(events(before[0]), ",") != "exception,handoff.interrupted" {
		t.Fatalf("before the restart:\n%s", dump(before))
	}
	done := make(chan struct{})
	cfg.Classes[0].Handler = func(context.Context, *handoff.Message) error { close(done); return nil }
	if rep := e.run(cfg, done); rep.Repushed != 1 {
		t.Errorf("re-pushed %d, want 1", rep.Repushed)
	}
	spans := e.ended()
	t.Logf("an attempt interrupted by a stop, and its re-push after the restart:\n%s", dump(spans))
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	after := spans[1]
	if l := after.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != before[0].SpanContext().SpanID() {
		t.Errorf("re-pushed span links %v, want one to %s", l, before[0].SpanContext().SpanID())
	}
	if after.Parent().SpanID() != e.producer.SpanID() {
		t.Errorf("re-pushed span's parent %s, want the producer's %s", after.Parent().SpanID(), e.producer.SpanID())
	}
}

// TestPanicAndOutsideRuntime: a panicking attempt's span records the
// panic and still ends with the runtime's outcome; a chain called
// outside the runtime ends its span when it returns.
func TestPanicAndOutsideRuntime(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := otelhandoff.New(otelhandoff.Config{TracerProvider: tp, Propagator: propagation.TraceContext{}})

	h := tr.Middleware(func(context.Context, *handoff.Message) error { return errors.New("boom") })
	m := &handoff.Message{ID: "x", Class: "jobs", Headers: []handoff.Header{{Key: "a", Value: []byte("1")}}}
	original := m.Headers
	if err := h(context.Background(), m); err == nil {
		t.Fatal("error lost")
	}
	if ended := rec.Ended(); len(ended) != 1 || ended[0].Name() != "process jobs" || ended[0].Status().Code != codes.Error {
		t.Fatalf("outside the runtime: %s", dump(ended))
	}
	if len(original) != 1 || len(m.Headers) != 2 || m.Headers[1].Key != otelhandoff.HeaderAttemptTraceparent {
		t.Errorf("headers %v (original %v): want the original kept and a copy with the attempt's context", m.Headers, original)
	}

	rec2 := tracetest.NewSpanRecorder()
	tr = otelhandoff.New(otelhandoff.Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec2))})
	done := make(chan struct{})
	rt, err := runtime.New(runtime.Config{StatePath: filepath.Join(t.TempDir(), "state.db"),
		Middleware: []handoff.Middleware{tr.Middleware},
		Classes: []runtime.Class{{Name: "jobs", Retry: runtime.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
			Handler: func(_ context.Context, m *handoff.Message) error {
				if m.Attempt == 0 {
					panic("nil map")
				}
				close(done)
				return nil
			}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { rt.Run(ctx); close(ran) }()
	for !rt.Ready() {
		time.Sleep(time.Millisecond) // the poll interval, not a wait for an event
	}
	if err := rt.Submit(context.Background(), "jobs", &handoff.Message{ID: "p"}); err != nil {
		t.Fatal(err)
	}
	<-done
	stop()
	<-ran
	spans := rec2.Ended()
	if len(spans) != 2 || strings.Join(events(spans[0]), ",") != "exception,handoff.retry" ||
		spans[0].Status().Description != "panic: nil map" || spans[1].Status().Code != codes.Unset {
		t.Errorf("a panic, then a success:\n%s", dump(spans))
	}
}

// TestStraggler: a handler that ignores the hard stop's cancel is given
// up on and its message saved while it still runs; its span ends as
// interrupted, and the middleware's header write does not race with the
// stop's save of the message (run with -race).
func TestStraggler(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "orders")
	e.produce("orders", "o-1", "v")
	release, returned := make(chan struct{}), make(chan struct{})
	cfg := e.config(runtime.Class{Name: "orders", Topics: []string{"orders"},
		Handler: func(ctx context.Context, m *handoff.Message) error {
			defer close(returned)
			<-release // ignores ctx
			return nil
		}})
	cfg.DrainTimeout = time.Millisecond
	cfg.HardStopGrace = 10 * time.Millisecond
	run := e.start(cfg)
	rt := run.rt
	// Nothing the handler does tells the stop it ran (a signal from it
	// would order its header write before the stop's save for the race
	// detector): the stop starts once the pool counts it running.
	deadline := time.Now().Add(30 * time.Second)
	for rt.Stats()[0].Running != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the handler did not start")
		}
		time.Sleep(time.Millisecond) // the poll interval, not a wait for an event
	}
	rep, err := run.stop()
	close(release)
	<-returned
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stragglers != 1 || rep.Snapshotted != 1 {
		t.Errorf("stragglers %d, snapshotted %d; want 1, 1", rep.Stragglers, rep.Snapshotted)
	}
	spans := e.ended()
	if len(spans) != 1 || strings.Join(events(spans[0]), ",") != "handoff.interrupted" {
		t.Errorf("spans:\n%s", dump(spans))
	}
}

// BenchmarkMiddleware measures one attempt's span (SDK tracer, always
// sampled, no processor) on a chain called outside the runtime.
func BenchmarkMiddleware(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	tr := otelhandoff.New(otelhandoff.Config{TracerProvider: tp, Propagator: propagation.TraceContext{}, ConsumerGroup: "g"})
	h := tr.Middleware(func(context.Context, *handoff.Message) error { return nil })
	headers := []handoff.Header{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m := &handoff.Message{ID: "orders/0/1", Class: "orders", Key: []byte("k"), Value: []byte("v"), Headers: headers,
			Origin: handoff.Origin{Topic: "orders", Offset: 1}}
		if err := h(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}
