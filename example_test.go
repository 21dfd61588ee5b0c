package handoff_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/handoff-go/handoff"
)

// A typed handler: the runtime hands it decoded values; a record that
// does not decode is a permanent failure, so the runtime makes it a dead
// letter at once instead of retrying it.
func ExampleTyped() {
	type Order struct {
		ID    string `json:"id"`
		Cents int    `json:"cents"`
	}
	h := handoff.Typed(handoff.JSON[Order]{}, func(ctx context.Context, m *handoff.Message, o Order) error {
		fmt.Printf("order %s: %d cents\n", o.ID, o.Cents)
		return nil
	})
	// What the runtime passes for two records of topic orders (a
	// runtime.Class would take h as its Handler).
	for i, v := range []string{`{"id":"o-1","cents":1250}`, `{"id":"o-2","cents":`} {
		m := &handoff.Message{Class: "orders", Value: []byte(v), Origin: handoff.Origin{Topic: "orders", Offset: int64(i)}}
		if err := h(context.Background(), m); err != nil {
			fmt.Println("permanent:", handoff.IsPermanent(err))
			fmt.Println(err)
		}
	}
	// Output:
	// order o-1: 1250 cents
	// permanent: true
	// permanent: handoff: decode class orders: topic orders partition 0 offset 1: unexpected end of JSON input
}

// A decoder for any format is one method. For protobuf, the decoder
// allocates the generated message and calls proto.Unmarshal:
//
//	dec := handoff.DecoderFunc[*pb.Heartbeat](func(m *handoff.Message) (*pb.Heartbeat, error) {
//		hb := new(pb.Heartbeat)
//		return hb, proto.Unmarshal(m.Value, hb)
//	})
//
// The example below has the same shape with a hand-written stand-in for
// proto.Unmarshal and a generated type, so that handoff itself does not
// depend on google.golang.org/protobuf (importing it, even in a test,
// would make it a requirement of handoff's go.mod).
func ExampleDecoderFunc_protobuf() {
	dec := handoff.DecoderFunc[*Heartbeat](func(m *handoff.Message) (*Heartbeat, error) {
		hb := new(Heartbeat)
		return hb, unmarshal(m.Value, hb) // proto.Unmarshal(m.Value, hb)
	})
	h := handoff.Typed(dec, func(ctx context.Context, m *handoff.Message, hb *Heartbeat) error {
		fmt.Printf("device %d at %d%% battery\n", hb.Device, hb.Battery)
		return nil
	})
	for _, v := range [][]byte{{0x08, 0x2a, 0x10, 0x4d}, {0x08}} {
		if err := h(context.Background(), &handoff.Message{Class: "heartbeats", ID: "hb-1", Value: v}); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// device 42 at 77% battery
	// permanent: handoff: decode class heartbeats: id "hb-1": proto: field 1: truncated varint
}

// Heartbeat stands in for a type protoc-gen-go generates from
//
//	message Heartbeat { uint64 device = 1; uint32 battery = 2; }
type Heartbeat struct {
	Device  uint64
	Battery uint32
}

// unmarshal stands in for proto.Unmarshal(b []byte, m proto.Message)
// error: it decodes the protobuf wire format of Heartbeat's two varint
// fields.
func unmarshal(b []byte, hb *Heartbeat) error {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("proto: truncated tag")
		}
		b = b[n:]
		field, wire := tag>>3, tag&7
		if wire != 0 {
			return fmt.Errorf("proto: field %d: wire type %d, want varint", field, wire)
		}
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return fmt.Errorf("proto: field %d: truncated varint", field)
		}
		b = b[n:]
		switch field {
		case 1:
			hb.Device = v
		case 2:
			hb.Battery = uint32(v)
		}
	}
	return nil
}

// A middleware wraps every attempt of a message. The runtime takes them
// in runtime.Config.Middleware (all classes) and runtime.Class.Middleware;
// Chain composes them the same way, the first outermost.
func ExampleMiddleware() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "took" {
				return slog.Attr{} // keep the output stable
			}
			return a
		},
	}))
	logAttempts := func(next handoff.HandlerFunc) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error {
			began := time.Now()
			err := next(ctx, m)
			logger.InfoContext(ctx, "attempt", "class", m.Class, "id", m.ID, "attempt", m.Attempt,
				"took", time.Since(began), "err", err)
			return err
		}
	}
	// skipTests drops messages a header marks as synthetic: returning
	// nil settles them as done without running the handler.
	skipTests := func(next handoff.HandlerFunc) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error {
			for _, h := range m.Headers {
				if h.Key == "synthetic" {
					return nil
				}
			}
			return next(ctx, m)
		}
	}
	h := handoff.Chain(func(ctx context.Context, m *handoff.Message) error {
		if m.Attempt == 0 {
			return errors.New("database busy")
		}
		return nil
	}, logAttempts, skipTests)

	h(context.Background(), &handoff.Message{Class: "orders", ID: "orders/0/7"})
	h(context.Background(), &handoff.Message{Class: "orders", ID: "orders/0/7", Attempt: 1})
	h(context.Background(), &handoff.Message{Class: "orders", ID: "orders/0/8", Headers: []handoff.Header{{Key: "synthetic"}}})
	// Output:
	// level=INFO msg=attempt class=orders id=orders/0/7 attempt=0 err="database busy"
	// level=INFO msg=attempt class=orders id=orders/0/7 attempt=1 err=<nil>
	// level=INFO msg=attempt class=orders id=orders/0/8 attempt=0 err=<nil>
}
