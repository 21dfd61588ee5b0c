package handoff_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/handoff-go/handoff"
)

type order struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

func TestJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, value string
		strict      bool
		want        order
		err         string // "" means decodes
	}{
		{"valid", `{"id":"a","cents":5}`, false, order{"a", 5}, ""},
		{"unknown field allowed", `{"id":"a","extra":1}`, false, order{ID: "a"}, ""},
		{"unknown field strict", `{"id":"a","extra":1}`, true, order{}, `unknown field "extra"`},
		{"strict valid", ` {"id":"a"} `, true, order{ID: "a"}, ""},
		{"trailing data", `{"id":"a"} {}`, false, order{}, "invalid character"},
		{"trailing data strict", `{"id":"a"}}`, true, order{}, "after the top-level value"},
		{"zero-length value", ``, false, order{}, "unexpected end of JSON input"},
		{"zero-length value strict", ``, true, order{}, "EOF"},
		{"wrong type", `{"cents":"5"}`, false, order{}, "cannot unmarshal string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := handoff.JSON[order]{DisallowUnknownFields: tc.strict}.Decode(&handoff.Message{Value: []byte(tc.value)})
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one saying %q", err, tc.err)
			case tc.err == "" && got != tc.want:
				t.Fatalf("decoded %+v, want %+v", got, tc.want)
			}
		})
	}
	for _, strict := range []bool{false, true} {
		if _, err := (handoff.JSON[order]{DisallowUnknownFields: strict}).Decode(&handoff.Message{Value: nil}); err == nil {
			t.Errorf("a tombstone (nil Value) decoded with DisallowUnknownFields=%v, want an error", strict)
		}
	}
}

func TestTypedDecodeError(t *testing.T) {
	t.Parallel()
	called := false
	h := handoff.Typed(handoff.JSON[order]{}, func(context.Context, *handoff.Message, order) error { called = true; return nil })
	err := h(context.Background(), &handoff.Message{ID: "job-7", Class: "mail", Value: []byte("{")})
	if called {
		t.Error("fn called for a value that does not decode")
	}
	var de *handoff.DecodeError
	if !handoff.IsPermanent(err) || !errors.As(err, &de) || de.Class != "mail" || de.ID != "job-7" {
		t.Fatalf("error %#v, want a permanent *DecodeError of mail job-7", err)
	}
	const want = `permanent: handoff: decode class mail: id "job-7": unexpected end of JSON input`
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	// The decoder's own error stays reachable.
	sentinel := errors.New("schema 9 unknown")
	h = handoff.Typed(handoff.DecoderFunc[int](func(*handoff.Message) (int, error) { return 0, sentinel }),
		func(context.Context, *handoff.Message, int) error { return nil })
	if err := h(context.Background(), &handoff.Message{}); !errors.Is(err, sentinel) {
		t.Errorf("error %v does not wrap the decoder's", err)
	}
}

func TestTypedPassesErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	h := handoff.Typed(handoff.JSON[order]{}, func(_ context.Context, m *handoff.Message, o order) error {
		if o.ID != "a" || m.ID != "x" {
			t.Errorf("fn got %+v for %s", o, m.ID)
		}
		return boom
	})
	if err := h(context.Background(), &handoff.Message{ID: "x", Value: []byte(`{"id":"a"}`)}); err != boom {
		t.Errorf("error %v, want fn's own, unwrapped", err)
	}
}

func TestChain(t *testing.T) {
	t.Parallel()
	var trail []string
	layer := func(name string) handoff.Middleware {
		return func(next handoff.HandlerFunc) handoff.HandlerFunc {
			return func(ctx context.Context, m *handoff.Message) error {
				trail = append(trail, name)
				return next(ctx, m)
			}
		}
	}
	h := handoff.Chain(func(context.Context, *handoff.Message) error { trail = append(trail, "h"); return nil },
		layer("a"), layer("b"), layer("c"))
	h(context.Background(), &handoff.Message{})
	if got := strings.Join(trail, ","); got != "a,b,c,h" {
		t.Errorf("order %s, want a,b,c,h", got)
	}
}

// TestChainNilStep: a middleware that returns nil makes Chain return
// nil, also when middleware outside it would wrap that nil in a handler
// that panics on its first call.
func TestChainNilStep(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *handoff.Message) error { return nil }
	wrap := func(next handoff.HandlerFunc) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error { return next(ctx, m) }
	}
	broken := func(handoff.HandlerFunc) handoff.HandlerFunc { return nil }
	if handoff.Chain(h, wrap, broken) != nil {
		t.Error("Chain(h, wrap, broken) is not nil: the nil of the inner middleware is wrapped")
	}
	if handoff.Chain(h, broken, wrap) != nil {
		t.Error("Chain(h, broken, wrap) is not nil")
	}
	if handoff.Chain(h, wrap, wrap) == nil {
		t.Error("Chain(h, wrap, wrap) is nil")
	}
}

// FuzzTypedJSON: for any value, a typed JSON handler either calls fn
// with what encoding/json decodes, or returns a permanent *DecodeError
// naming the class and offset, and never panics.
func FuzzTypedJSON(f *testing.F) {
	for _, s := range []string{`{"id":"a","cents":1}`, `{"id":`, ``, `null`, `[]`, `{"cents":1e99}`, "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		var got *order
		h := handoff.Typed(handoff.JSON[order]{}, func(_ context.Context, _ *handoff.Message, o order) error {
			got = &o
			return nil
		})
		m := &handoff.Message{Class: "orders", Value: value, Origin: handoff.Origin{Topic: "orders", Partition: 2, Offset: 9}}
		err := h(context.Background(), m)
		var de *handoff.DecodeError
		switch {
		case err == nil && got == nil:
			t.Fatal("nil error without calling fn")
		case err != nil && (got != nil || !handoff.IsPermanent(err) || !errors.As(err, &de)):
			t.Fatalf("error %v (fn called: %v), want a permanent *DecodeError", err, got != nil)
		case err != nil && !strings.Contains(err.Error(), "decode class orders: topic orders partition 2 offset 9: "):
			t.Fatalf("error %q does not name the class and offset", err)
		}
	})
}

// TestTypedBatch: fn gets the messages that decode with their values, in
// batch order; each undecodable message fails alone, permanently, with a
// *DecodeError naming it; fn's BatchError indexes are mapped back to the
// batch's; fn's plain error fails the messages fn got and keeps the
// decode failures their own; fn is not called when nothing decodes.
func TestTypedBatch(t *testing.T) {
	t.Parallel()
	batch := func(values ...string) []*handoff.Message {
		ms := make([]*handoff.Message, len(values))
		for i, v := range values {
			ms[i] = &handoff.Message{ID: "m" + strconv.Itoa(i), Class: "orders", Value: []byte(v)}
		}
		return ms
	}
	boom := errors.New("row lock timeout")
	var got []string
	var fnErr error
	h := handoff.TypedBatch(handoff.JSON[order]{}, func(_ context.Context, ms []*handoff.Message, vs []order) error {
		got = got[:0]
		for i, m := range ms {
			got = append(got, m.ID+"="+vs[i].ID)
		}
		return fnErr
	})
	failedOf := func(t *testing.T, err error) map[int]error {
		t.Helper()
		var be *handoff.BatchError
		if !errors.As(err, &be) {
			t.Fatalf("error %v, want a *BatchError", err)
		}
		return be.Failed
	}

	t.Run("all decode", func(t *testing.T) {
		fnErr = nil
		if err := h(context.Background(), batch(`{"id":"a"}`, `{"id":"b"}`)); err != nil || strings.Join(got, ",") != "m0=a,m1=b" {
			t.Fatalf("error %v, fn got %v", err, got)
		}
		fnErr = boom // every message decoded: fn's own error, unchanged
		if err := h(context.Background(), batch(`{"id":"a"}`)); err != boom {
			t.Fatalf("error %v, want fn's own", err)
		}
	})
	t.Run("one undecodable", func(t *testing.T) {
		fnErr = nil
		f := failedOf(t, h(context.Background(), batch(`{"id":"a"}`, `{"id":`, `{"id":"c"}`)))
		if strings.Join(got, ",") != "m0=a,m2=c" {
			t.Errorf("fn got %v, want m0=a,m2=c", got)
		}
		var de *handoff.DecodeError
		if len(f) != 1 || !handoff.IsPermanent(f[1]) || !errors.As(f[1], &de) || de.ID != "m1" || de.Class != "orders" {
			t.Fatalf("failed %v, want [1] a permanent *DecodeError of m1", f)
		}
	})
	t.Run("fn's batch error mapped back", func(t *testing.T) {
		var be handoff.BatchError
		be.Fail(1, boom) // fn's [1] is the batch's [2]
		be.Fail(7, boom) // outside fn's slice: fails nothing
		fnErr = &be
		f := failedOf(t, h(context.Background(), batch(`{"id":"a"}`, `x`, `{"id":"c"}`)))
		if len(f) != 2 || f[2] != boom || !handoff.IsPermanent(f[1]) {
			t.Fatalf("failed %v, want [1] decode, [2] fn's", f)
		}
	})
	t.Run("fn's plain error with a decode failure", func(t *testing.T) {
		fnErr = boom
		f := failedOf(t, h(context.Background(), batch(`x`, `{"id":"b"}`, `{"id":"c"}`)))
		if len(f) != 3 || !handoff.IsPermanent(f[0]) || f[1] != boom || f[2] != boom {
			t.Fatalf("failed %v, want [0] decode, [1] and [2] fn's", f)
		}
	})
	t.Run("fn's nil batch error", func(t *testing.T) {
		var be *handoff.BatchError // names no failure
		fnErr = be
		f := failedOf(t, h(context.Background(), batch(`x`, `{"id":"b"}`)))
		if len(f) != 1 || !handoff.IsPermanent(f[0]) {
			t.Fatalf("failed %v, want [0] decode alone", f)
		}
	})
	t.Run("none decodes", func(t *testing.T) {
		fnErr = nil
		got = append(got[:0], "not called")
		f := failedOf(t, h(context.Background(), batch(`x`, `y`)))
		if len(f) != 2 || got[0] != "not called" {
			t.Fatalf("failed %v, fn %v", f, got)
		}
	})
}
