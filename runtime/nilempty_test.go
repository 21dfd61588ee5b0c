package runtime

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
)

// nilEmptyRecords are records whose keys, values and header values are
// nil or empty, in every combination that matters.
var nilEmptyRecords = []kafka.Message{
	{Key: nil, Value: []byte{}},
	{Key: []byte{}, Value: nil}, // a tombstone with an empty key
	{Key: []byte{}, Value: []byte{}},
	{Key: []byte("k"), Value: []byte("v"), Headers: []kafka.Header{{Key: "null"}, {Key: "empty", Value: []byte{}}}},
}

// describe says what of m is nil and what empty.
func describe(key, value []byte, headers []handoff.Header) string {
	kind := func(b []byte) string {
		switch {
		case b == nil:
			return "nil"
		case len(b) == 0:
			return "empty"
		}
		return fmt.Sprintf("%q", b)
	}
	s := "key " + kind(key) + ", value " + kind(value)
	for _, h := range headers {
		s += ", header " + h.Key + " " + kind(h.Value)
	}
	return s
}

// TestNilAndEmptyApart: an empty key, value or header value arrives as
// an empty non-nil slice and a null one as nil, when fetched and when
// re-pushed from the state file after a stop saved it, and the record's
// timestamp with them. (Before, the fetch loop read with kafka-go's
// Reader, which hands a zero-length key, value or header value over as
// nil, and the message had no timestamp.)
func TestNilAndEmptyApart(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "ne")
	w := devbroker.NewWriter(b.broker.Addrs())
	msgs := make([]kafka.Message, len(nilEmptyRecords))
	stamp := func(i int) time.Time {
		return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(i) * time.Hour)
	}
	for i, m := range nilEmptyRecords {
		m.Topic = "ne"
		m.Time = stamp(i) // kept as the record's timestamp, in milliseconds
		msgs[i] = m
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	devbroker.CloseWriter(w)
	want := make([]string, len(nilEmptyRecords))
	for i, m := range nilEmptyRecords {
		var hs []handoff.Header
		for _, h := range m.Headers {
			hs = append(hs, handoff.Header{Key: h.Key, Value: h.Value})
		}
		want[i] = describe(m.Key, m.Value, hs) + ", timestamp " + stamp(i).String()
	}

	// run starts a runtime whose handler notes what each message holds;
	// with hang, the handler then waits for the hard stop, so that the
	// stop saves every message.
	run := func(hang bool) map[int64]string {
		var (
			mu  sync.Mutex
			got = map[int64]string{}
		)
		all := make(chan struct{})
		cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
			mu.Lock()
			got[m.Origin.Offset] = describe(m.Key, m.Value, m.Headers) + ", timestamp " + m.Timestamp.String()
			if len(got) == len(nilEmptyRecords) {
				close(all)
			}
			mu.Unlock()
			if hang {
				<-ctx.Done()
				return context.Cause(ctx)
			}
			return nil
		}, nil)
		cfg.DrainTimeout = 50 * time.Millisecond
		cfg.HardStopGrace = time.Second
		rt, wait := startNew(t, cfg)
		waitClosed(t, all, func() string { return "not every record was handled" })
		rep := stopAndWait(t, rt, wait)
		if hang && rep.Snapshotted != len(nilEmptyRecords) {
			t.Fatalf("the stop saved %d messages, want %d: %v", rep.Snapshotted, len(nilEmptyRecords), rep)
		}
		mu.Lock()
		defer mu.Unlock()
		return got
	}
	for _, phase := range []struct {
		name string
		hang bool
	}{{"fetched", true}, {"re-pushed", false}} {
		got := run(phase.hang)
		for off, w := range want {
			if got[int64(off)] != w {
				t.Errorf("%s, offset %d: %s, want %s", phase.name, off, got[int64(off)], w)
			}
		}
	}
}
