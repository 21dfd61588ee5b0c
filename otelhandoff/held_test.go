package otelhandoff_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/handofftest"
	"github.com/handoff-go/handoff/otelhandoff"
	"github.com/handoff-go/handoff/runtime"
)

// TestHeldAttemptEvent: an attempt the class's suspension holds (its
// handler returned handoff.Unavailable) ends its span with the event
// handoff.held, as every failed attempt gets one event saying what
// followed (issue 23: it had only the exception). The message is a
// submitted one: its spans carry none of the Kafka attributes, as the
// package doc says, and the handoff ones.
func TestHeldAttemptEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		tr := otelhandoff.New(otelhandoff.Config{TracerProvider: tp, Propagator: propagation.TraceContext{}, ConsumerGroup: "g"})
		var calls atomic.Int32
		h := handofftest.New(t, runtime.Class{Name: "payments", Handler: func(ctx context.Context, m *handoff.Message) error {
			if calls.Add(1) == 1 {
				return handoff.Unavailable(errors.New("payment gateway down"))
			}
			return nil
		}}, handofftest.WithMiddleware(tr.Middleware))
		h.Send(&handoff.Message{ID: "pay-1", Key: []byte("acct-1"), Value: []byte("10")})
		h.Wait()
		h.RequireHandled("pay-1", 1)
		h.Stop()

		spans := exp.GetSpans()
		if len(spans) != 2 {
			t.Fatalf("%d spans, want 2 (held, then succeeded)", len(spans))
		}
		var evs [2][]string
		for i, s := range spans {
			for _, ev := range s.Events {
				evs[i] = append(evs[i], ev.Name)
			}
			if s.Name != "process payments" {
				t.Errorf("span %d named %q", i, s.Name)
			}
			for _, a := range s.Attributes {
				if strings.HasPrefix(string(a.Key), "messaging.kafka.") || a.Key == "messaging.system" ||
					strings.HasPrefix(string(a.Key), "messaging.destination.") || a.Key == "messaging.consumer.group.name" {
					t.Errorf("span %d of a submitted message has the Kafka attribute %s=%s", i, a.Key, a.Value.Emit())
				}
			}
			found := false
			for _, a := range s.Attributes {
				found = found || a.Key == otelhandoff.AttrMessageID && a.Value.AsString() == "pay-1"
			}
			if !found {
				t.Errorf("span %d has no %s", i, otelhandoff.AttrMessageID)
			}
		}
		if got := strings.Join(evs[0], ","); got != "exception,"+otelhandoff.EventHeld || spans[0].Status.Code != codes.Error {
			t.Errorf("held attempt: events %s, status %s; want exception,%s and Error", got, spans[0].Status.Code, otelhandoff.EventHeld)
		}
		if len(evs[1]) != 0 || spans[1].Status.Code != codes.Unset {
			t.Errorf("succeeded attempt: events %v, status %s", evs[1], spans[1].Status.Code)
		}
	})
}
