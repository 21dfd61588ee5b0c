package otelhandoff_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/otelhandoff"
	"github.com/handoff-go/handoff/runtime"
)

// Tracing a runtime: one span per attempt, the runtime's decision after
// a failure as an event, and each attempt linked to the one before. A
// service passes its own TracerProvider (an OTLP exporter's) instead of
// the recorder.
func ExampleNew() {
	rec := tracetest.NewSpanRecorder()
	tr := otelhandoff.New(otelhandoff.Config{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)),
		Propagator:     propagation.TraceContext{},
		ConsumerGroup:  "billing",
	})
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	done := make(chan struct{})
	rt, err := runtime.New(runtime.Config{
		Group:              "billing",
		StatePath:          filepath.Join(dir, "state.db"),
		Middleware:         []handoff.Middleware{tr.Middleware}, // first: the span covers the rest
		PublishHeadersFunc: tr.PublishHeaders,                   // dead letters carry the failed attempt's context
		Classes: []runtime.Class{{
			Name:  "invoices", // fed by Submit here; a Kafka class gets the messaging.* attributes too
			Retry: runtime.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
			Handler: func(ctx context.Context, m *handoff.Message) error {
				if m.Attempt == 0 {
					return errors.New("ledger: timeout")
				}
				close(done)
				return nil
			},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { rt.Run(ctx); close(ran) }()
	for !rt.Ready() {
		time.Sleep(time.Millisecond)
	}
	rt.Submit(context.Background(), "invoices", &handoff.Message{ID: "inv-7"})
	<-done
	stop()
	<-ran

	spans := rec.Ended()
	for i, s := range spans {
		fmt.Printf("%s status=%s", s.Name(), s.Status().Code)
		for _, ev := range s.Events() {
			fmt.Printf(" event=%s", ev.Name)
		}
		for _, l := range s.Links() {
			if l.SpanContext.SpanID() == spans[i-1].SpanContext().SpanID() {
				fmt.Print(" link=previous attempt")
			}
		}
		fmt.Println()
	}
	// Output:
	// process invoices status=Error event=exception event=handoff.retry
	// process invoices status=Unset link=previous attempt
}
