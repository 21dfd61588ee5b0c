// Package otelhandoff traces handoff's handlers with OpenTelemetry: one
// span per attempt of a message, following the OpenTelemetry semantic
// conventions for Kafka consumers, with the outcome the runtime decided
// after the attempt (retry, redelivery, dead letter, held), a link to the
// message's previous attempt, and the failed attempt's context in the
// dead letters published to a DeadLetterTopic.
//
// It is a package of its own so that handoff's core packages do not
// import OpenTelemetry. Wire it with two fields of runtime.Config:
//
//	tr := otelhandoff.New(otelhandoff.Config{ConsumerGroup: group})
//	cfg.Middleware = append(cfg.Middleware, tr.Middleware)
//	cfg.PublishHeadersFunc = tr.PublishHeaders
//
// # Spans
//
// Each attempt is a span of kind consumer named "process <topic>" (or
// "process <class>" for a message that did not come from Kafka), whose
// parent is the trace context the producer put in the record's headers,
// read by the configured propagator (traceparent and tracestate for
// propagation.TraceContext). Every span has messaging.operation.name and
// .type "process", messaging.message.body.size, and handoff.class,
// handoff.message.id and handoff.attempt (the attempts that failed
// before this one). A message read from Kafka adds messaging.system
// "kafka", messaging.destination.name (the topic),
// messaging.destination.partition.id, messaging.kafka.offset,
// messaging.kafka.message.key (when the key is not nil and is UTF-8) and
// messaging.consumer.group.name (when Config.ConsumerGroup is set). A
// message that did not come from Kafka (handed in with the runtime's
// Submit or Schedule) has none of those: it has no topic, partition or
// offset, and no broker delivered it.
//
// A failed attempt records the error (an "exception" event), sets the
// span's status to Error with the error's text and error.type to its Go
// type. The span ends once the runtime has decided what follows the
// attempt (see runtime.OnOutcome), with one event saying what:
// "handoff.retry" (attribute handoff.retry.wait_seconds, the backoff),
// "handoff.redelivery" (handoff.redelivery.delay_seconds),
// "handoff.dead_letter", "handoff.interrupted" (the hard stop
// cancelled it; the message runs again after the restart) or
// "handoff.held" (its class is suspended by a dependency outage or
// paused, or this failure suspended it: the attempt is not counted and
// the message waits in place). A successful attempt's span has no event
// and status Unset. A panic is recorded too,
// and the panic goes on.
//
// Outside the runtime (a handler chain called directly, in a unit test)
// there is no outcome to wait for: the span ends when the chain returns.
//
// # Links between attempts
//
// The middleware saves each attempt's span context in the message's
// headers ([HeaderAttemptTraceparent], [HeaderAttemptTracestate]), which
// the runtime keeps with the message wherever it goes: a retry in place,
// a delayed redelivery, the state file at a stop, a dead letter. The
// next attempt's span links to it, so the span of a message re-pushed
// after a restart links to the attempt that ran before the stop.
// Messages that never ran before have no such link.
//
// # Dead letters
//
// [Tracing.PublishHeaders], as runtime.Config.PublishHeadersFunc, puts
// the context of the attempt that made the dead letter into the record
// published to the DeadLetterTopic, with the configured propagator (so
// traceparent, for W3C): a consumer of the dead-letter topic continues
// the failed attempt's trace.
package otelhandoff

import (
	"context"
	"fmt"
	"strconv"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/handoff-go/handoff/otelhandoff"

// Headers in which the middleware keeps the span context of a message's
// latest attempt, in W3C Trace Context format whatever the propagator.
const (
	HeaderAttemptTraceparent = "handoff-attempt-traceparent"
	HeaderAttemptTracestate  = "handoff-attempt-tracestate"
)

// Attribute keys of handoff's own, besides the semantic conventions'.
const (
	AttrClass           = attribute.Key("handoff.class")
	AttrMessageID       = attribute.Key("handoff.message.id")
	AttrAttempt         = attribute.Key("handoff.attempt")
	AttrRetryWait       = attribute.Key("handoff.retry.wait_seconds")
	AttrRedeliveryDelay = attribute.Key("handoff.redelivery.delay_seconds")
	AttrLink            = attribute.Key("handoff.link")
)

// Names of the events that say what followed a failed attempt.
const (
	EventRetry       = "handoff.retry"
	EventRedelivery  = "handoff.redelivery"
	EventDeadLetter  = "handoff.dead_letter"
	EventInterrupted = "handoff.interrupted"
	EventHeld        = "handoff.held"
)

// Config configures [New].
type Config struct {
	// TracerProvider makes the tracer. Nil means otel.GetTracerProvider()
	// (the OpenTelemetry convention for instrumentation, a no-op until the
	// program sets one).
	TracerProvider trace.TracerProvider

	// Propagator reads the producer's context from a record's headers
	// and writes the failed attempt's into a published dead letter. Nil
	// means otel.GetTextMapPropagator(); note that its default is a
	// no-op: a program that has not set one wants
	// propagation.TraceContext{} here.
	Propagator propagation.TextMapPropagator

	// ConsumerGroup is the Kafka consumer group (runtime.Config.Group),
	// recorded as messaging.consumer.group.name. Empty means the
	// attribute is left out.
	ConsumerGroup string
}

// Tracing makes the spans. Its methods are safe for concurrent use.
type Tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	group  string
}

// New returns a Tracing for cfg.
func New(cfg Config) *Tracing {
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	prop := cfg.Propagator
	if prop == nil {
		prop = otel.GetTextMapPropagator()
	}
	return &Tracing{
		tracer: tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		prop:   prop,
		group:  cfg.ConsumerGroup,
	}
}

// attemptContext is the format of the saved attempt context.
var attemptContext = propagation.TraceContext{}

// Middleware is a [handoff.Middleware]: it runs each attempt in a span.
// Put it first in runtime.Config.Middleware so that the span covers the
// other middleware too. It replaces the message's Headers with a copy
// that holds the attempt's span context (see the package doc), with
// runtime.SetHeaders; it never writes into the original's array.
func (t *Tracing) Middleware(next handoff.HandlerFunc) handoff.HandlerFunc {
	return func(ctx context.Context, m *handoff.Message) (err error) {
		carrier := headerCarrier{&m.Headers}
		parent := t.prop.Extract(ctx, carrier)
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(t.attributes(m)...)}
		if prev := trace.SpanContextFromContext(attemptContext.Extract(context.Background(), prefixed{carrier})); prev.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: prev, Attributes: []attribute.KeyValue{AttrLink.String("previous_attempt")}}))
		}
		name := "process " + m.Class
		if m.Origin.IsKafka() {
			name = "process " + m.Origin.Topic
		}
		ctx, span := t.tracer.Start(parent, name, opts...)
		hooked := runtime.OnOutcome(ctx, func(o runtime.Outcome) { outcome(span, o) })
		runtime.SetHeaders(ctx, m, withAttempt(m.Headers, ctx))
		defer func() {
			if v := recover(); v != nil {
				perr := fmt.Errorf("panic: %v", v)
				span.RecordError(perr, trace.WithStackTrace(true))
				span.SetStatus(codes.Error, perr.Error())
				span.SetAttributes(semconv.ErrorTypeKey.String("panic"))
				if !hooked {
					span.End()
				}
				panic(v)
			}
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
				span.SetAttributes(semconv.ErrorTypeKey.String(fmt.Sprintf("%T", err)))
			}
			if !hooked {
				span.End()
			}
		}()
		return next(ctx, m)
	}
}

// outcome adds what the runtime decided after the attempt to its span
// and ends it.
func outcome(span trace.Span, o runtime.Outcome) {
	switch o.Kind {
	case runtime.OutcomeRetried:
		span.AddEvent(EventRetry, trace.WithAttributes(AttrRetryWait.Float64(o.Wait.Seconds()), AttrAttempt.Int(o.Attempt)))
	case runtime.OutcomeRedelivered:
		span.AddEvent(EventRedelivery, trace.WithAttributes(AttrRedeliveryDelay.Float64(o.Wait.Seconds()), AttrAttempt.Int(o.Attempt)))
	case runtime.OutcomeDeadLettered:
		span.AddEvent(EventDeadLetter, trace.WithAttributes(AttrAttempt.Int(o.Attempt)))
	case runtime.OutcomeInterrupted:
		span.AddEvent(EventInterrupted)
	case runtime.OutcomeHeld:
		span.AddEvent(EventHeld)
	}
	span.End()
}

// attributes are the span's attributes for m.
func (t *Tracing) attributes(m *handoff.Message) []attribute.KeyValue {
	as := make([]attribute.KeyValue, 0, 12)
	if m.Origin.IsKafka() {
		as = append(as,
			semconv.MessagingSystemKafka,
			semconv.MessagingDestinationName(m.Origin.Topic),
			semconv.MessagingDestinationPartitionID(strconv.Itoa(m.Origin.Partition)),
			semconv.MessagingKafkaOffset(int(m.Origin.Offset)))
		if m.Key != nil && utf8.Valid(m.Key) {
			// A key with no string form is left out, as the conventions
			// ask.
			as = append(as, semconv.MessagingKafkaMessageKey(string(m.Key)))
		}
		if t.group != "" {
			as = append(as, semconv.MessagingConsumerGroupName(t.group))
		}
	}
	return append(as,
		semconv.MessagingOperationName("process"),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingMessageBodySize(len(m.Value)),
		AttrClass.String(m.Class),
		AttrMessageID.String(m.ID),
		AttrAttempt.Int(m.Attempt))
}

// withAttempt returns a copy of hs with the span context of ctx in the
// attempt headers, replacing earlier ones.
func withAttempt(hs []handoff.Header, ctx context.Context) []handoff.Header {
	out := make([]handoff.Header, 0, len(hs)+2)
	for _, h := range hs {
		if h.Key != HeaderAttemptTraceparent && h.Key != HeaderAttemptTracestate {
			out = append(out, h)
		}
	}
	attemptContext.Inject(ctx, prefixed{headerCarrier{&out}})
	return out
}

// PublishHeaders is a runtime.Config.PublishHeadersFunc: it returns hs
// with the context of the attempt that made m a dead letter injected by
// the propagator (replacing the producer's), so that the published dead
// letter continues that attempt's trace. A message with no saved
// attempt context is published with hs unchanged.
func (t *Tracing) PublishHeaders(m *handoff.Message, hs []handoff.Header) []handoff.Header {
	out := append([]handoff.Header(nil), hs...)
	carrier := headerCarrier{&out}
	prev := trace.SpanContextFromContext(attemptContext.Extract(context.Background(), prefixed{carrier}))
	if !prev.IsValid() {
		return out
	}
	// Keep what else the propagator carries (baggage), with the
	// attempt's span as the parent.
	ctx := trace.ContextWithRemoteSpanContext(t.prop.Extract(context.Background(), carrier), prev)
	t.prop.Inject(ctx, carrier)
	return out
}

// headerCarrier is a propagation.TextMapCarrier over a message's headers.
// Set replaces the first header with the key, or appends one.
type headerCarrier struct{ hs *[]handoff.Header }

func (c headerCarrier) Get(key string) string {
	for _, h := range *c.hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) {
	for i, h := range *c.hs {
		if h.Key == key {
			(*c.hs)[i].Value = []byte(value)
			return
		}
	}
	*c.hs = append(*c.hs, handoff.Header{Key: key, Value: []byte(value)})
}

func (c headerCarrier) Keys() []string {
	keys := make([]string, len(*c.hs))
	for i, h := range *c.hs {
		keys[i] = h.Key
	}
	return keys
}

// prefixed is the carrier of the attempt headers: traceparent and
// tracestate under the handoff-attempt- prefix.
type prefixed struct{ c headerCarrier }

const attemptPrefix = "handoff-attempt-"

func (p prefixed) Get(key string) string { return p.c.Get(attemptPrefix + key) }
func (p prefixed) Set(key, value string) { p.c.Set(attemptPrefix+key, value) }
func (p prefixed) Keys() []string        { return []string{"traceparent", "tracestate"} }
