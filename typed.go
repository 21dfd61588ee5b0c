package handoff

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"runtime/debug"
	"strconv"
)

// Decoder turns a message into the value a typed handler takes. It is
// the one method a format needs (JSON is built in as [JSON]; protobuf,
// Avro and others are a few lines, see the examples). Decode sees the
// whole message, so a format that names its schema in a header or in
// the value's first bytes can read it. It may be called concurrently.
type Decoder[T any] interface {
	Decode(m *Message) (T, error)
}

// DecoderFunc is a function that is a [Decoder].
type DecoderFunc[T any] func(m *Message) (T, error)

// Decode calls f(m).
func (f DecoderFunc[T]) Decode(m *Message) (T, error) { return f(m) }

// JSON decodes a message's value as JSON into a T with encoding/json.
// The zero value is ready to use. A value with no bytes does not decode,
// whether it is a tombstone (a null value, nil Value) or a zero-length
// value (empty, non-nil Value): give the class a [DecoderFunc] that checks
// for them if your topic has them (m.Value == nil is a tombstone).
type JSON[T any] struct {
	// DisallowUnknownFields makes a value with a field that T lacks fail
	// to decode (json.Decoder.DisallowUnknownFields).
	DisallowUnknownFields bool
}

// Decode decodes m.Value.
func (j JSON[T]) Decode(m *Message) (T, error) {
	var v T
	if !j.DisallowUnknownFields {
		err := json.Unmarshal(m.Value, &v)
		return v, err
	}
	d := json.NewDecoder(bytes.NewReader(m.Value))
	d.DisallowUnknownFields()
	if err := d.Decode(&v); err != nil {
		return v, err
	}
	if _, err := d.Token(); err != io.EOF {
		return v, errors.New("invalid data after the top-level value")
	}
	return v, nil
}

// Typed returns a handler that decodes each message with dec and calls
// fn with the message and the decoded value. A message that does not
// decode is a permanent failure (fn is not called, the message is never
// retried): its error is a [*DecodeError], wrapped in [Permanent], so the
// runtime makes it a dead letter whose error names the class, the origin
// and the decoder's message. A nil dec or fn is a programmer's mistake:
// Typed panics.
func Typed[T any](dec Decoder[T], fn func(ctx context.Context, m *Message, v T) error) HandlerFunc {
	if dec == nil || fn == nil {
		panic("handoff: Typed needs a decoder and a function")
	}
	return func(ctx context.Context, m *Message) error {
		v, err := dec.Decode(m)
		if err != nil {
			return Permanent(&DecodeError{Class: m.Class, ID: m.ID, Origin: m.Origin, Err: err})
		}
		return fn(ctx, m, v)
	}
}

// DecodeError is the failure of a message that its class's [Decoder]
// could not decode. [Typed] returns it wrapped in [Permanent].
type DecodeError struct {
	// Class is the message's class.
	Class string
	// ID is the message's ID.
	ID string
	// Origin is where the message was read from (zero when it was not
	// read from Kafka).
	Origin Origin
	// Err is the decoder's error.
	Err error
}

// Error reads "handoff: decode class orders: topic orders partition 0
// offset 17: <decoder's message>", or names the ID of a message that did
// not come from Kafka.
func (e *DecodeError) Error() string {
	where := "id " + strconv.Quote(e.ID)
	if e.Origin.IsKafka() {
		where = "topic " + e.Origin.Topic + " partition " + strconv.Itoa(e.Origin.Partition) +
			" offset " + strconv.FormatInt(e.Origin.Offset, 10)
	}
	return "handoff: decode class " + e.Class + ": " + where + ": " + e.Err.Error()
}

// Unwrap returns the decoder's error.
func (e *DecodeError) Unwrap() error { return e.Err }

// TypedBatch returns a batch handler that decodes each message of the
// batch with dec and calls fn once with the messages that decoded and
// their values, in batch order (ms[i] decoded to vs[i]). A message that
// does not decode is a permanent failure of that message alone, as with
// [Typed]: its error is a [*DecodeError] wrapped in [Permanent], so the
// runtime makes it a dead letter, and the others of the batch still go
// to fn. A decoder that panics fails that message alone, with a
// [*PanicError], as in a [Typed] class. When no message decodes, fn is
// not called.
//
// fn returns what any [BatchHandlerFunc] returns, about the slices it
// was given: nil (all of them done), a [*BatchError] whose indexes are
// those of fn's ms (TypedBatch maps them back to the batch's), or any
// other error, which fails every message fn was given. The handler
// returns a BatchError naming the decode failures with fn's, or fn's
// own error unchanged when every message decoded. fn may keep ms and vs,
// as a BatchHandlerFunc may keep its messages. A nil dec or fn is a
// programmer's mistake: TypedBatch panics.
func TypedBatch[T any](dec Decoder[T], fn func(ctx context.Context, ms []*Message, vs []T) error) BatchHandlerFunc {
	if dec == nil || fn == nil {
		panic("handoff: TypedBatch needs a decoder and a function")
	}
	return func(ctx context.Context, ms []*Message) error {
		var failed BatchError
		decoded := make([]*Message, 0, len(ms))
		vs := make([]T, 0, len(ms))
		at := make([]int, 0, len(ms)) // at[j]: the batch index of decoded[j]
		for i, m := range ms {
			v, pe, err := decodeOne(dec, m)
			if pe != nil {
				failed.Fail(i, pe) // as in Typed, where the pool recovers it
				continue
			}
			if err != nil {
				failed.Fail(i, Permanent(&DecodeError{Class: m.Class, ID: m.ID, Origin: m.Origin, Err: err}))
				continue
			}
			decoded, vs, at = append(decoded, m), append(vs, v), append(at, i)
		}
		if len(decoded) == 0 {
			return failed.Err()
		}
		err := fn(ctx, decoded, vs)
		if err == nil {
			return failed.Err()
		}
		var be *BatchError
		if errors.As(err, &be) {
			if be == nil { // names no failure
				return failed.Err()
			}
			for j, e := range be.Failed {
				if j >= 0 && j < len(at) && e != nil {
					failed.Fail(at[j], e)
				}
			}
			return failed.Err()
		}
		if len(failed.Failed) == 0 {
			return err // the batch's own error, as fn returned it
		}
		for _, i := range at {
			failed.Fail(i, err)
		}
		return &failed
	}
}

// decodeOne decodes m with dec and returns the decoder's panic, if it
// panicked, as a *PanicError: m's failure alone, not its whole batch's.
func decodeOne[T any](dec Decoder[T], m *Message) (v T, pe *PanicError, err error) {
	defer func() {
		if r := recover(); r != nil {
			pe = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	v, err = dec.Decode(m)
	return v, nil, err
}
