package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/handoff-go/handoff"
)

// recordLog keeps the records logged at Info and above.
type recordLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *recordLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordLog) WithGroup(string) slog.Handler      { return h }

// lines returns the messages logged with msg, each with its
// "suppressed" attribute.
func (h *recordLog) lines(msg string) []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int64
	for _, r := range h.recs {
		if r.Message != msg {
			continue
		}
		n := int64(-1)
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "suppressed" {
				n = a.Value.Int64()
			}
			return true
		})
		out = append(out, n)
	}
	return out
}

const parkedMsg = "message parked behind its key's blocker"

// TestParkLines: a key's parkings log one Info line per parkLogEvery,
// the next one counting those not logged; keys are limited apart; a key
// that went quiet with parkings not logged gets a line with their count
// at its class's next parking, and is forgotten.
func TestParkLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &recordLog{}
		log := slog.New(h)
		var p parkLines
		for i := range 5 {
			p.parked(log, "orders", []byte("a"), fmt.Sprint("a-", i), "a-blocker")
		}
		p.parked(log, "orders", []byte("b"), "b-0", "b-blocker")
		if got := h.lines(parkedMsg); fmt.Sprint(got) != "[0 0]" {
			t.Fatalf("after 5 parkings of a and 1 of b: lines %v, want [0 0]", got)
		}
		time.Sleep(parkLogEvery)
		p.parked(log, "orders", []byte("a"), "a-5", "a-blocker")
		if got := h.lines(parkedMsg); fmt.Sprint(got) != "[0 0 4]" {
			t.Fatalf("a parked again after %s: lines %v, want [0 0 4]", parkLogEvery, got)
		}
		p.parked(log, "orders", []byte("a"), "a-6", "a-blocker") // suppressed
		time.Sleep(2 * parkLogEvery)
		p.parked(log, "orders", []byte("c"), "c-0", "c-blocker")
		if got := h.lines("messages parked behind their key's blocker, not logged one by one"); fmt.Sprint(got) != "[1]" {
			t.Errorf("quiet key a: summary lines %v, want [1]", got)
		}
		p.mu.Lock()
		n := len(p.keys)
		p.mu.Unlock()
		if n != 1 {
			t.Errorf("%d keys kept after the sweep, want 1 (c)", n)
		}
	})
}

// TestParkingLoggedAtInfo: the runtime logs a key's parkings at Info, one
// line for 50 parked messages within parkLogEvery (issue 23: 829
// parkings logged nothing while every dead letter logged a warning); and
// a Config without a Logger logs to slog.Default(), not nowhere.
func TestParkingLoggedAtInfo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &recordLog{}
		rt, err := newRuntime(Config{StatePath: filepath.Join(t.TempDir(), "state.db"), Logger: slog.New(h),
			Classes: []Class{{Name: "orders", Ordered: true, Workers: 1, Handler: func(ctx context.Context, m *handoff.Message) error {
				if m.ID == "m-0" {
					return handoff.Permanent(errors.New("card declined"))
				}
				return nil
			}}}})
		if err != nil {
			t.Fatal(err)
		}
		stop := runBubble(t, rt)
		for i := range 51 {
			if err := rt.Submit(context.Background(), "orders", &handoff.Message{ID: fmt.Sprint("m-", i), Key: []byte("order-1")}); err != nil {
				t.Fatal(err)
			}
		}
		for rt.tally.total(evParked) < 50 {
			time.Sleep(time.Millisecond)
		}
		rep := stop()
		if rep.Parked != 50 {
			t.Fatalf("%d parked, want 50", rep.Parked)
		}
		if got := h.lines(parkedMsg); len(got) != 1 || got[0] != 0 {
			t.Errorf("Info lines of 50 parkings: %v, want one", got)
		}
	})
	rt, err := newRuntime(Config{StatePath: filepath.Join(t.TempDir(), "state.db"),
		Classes: []Class{{Name: "orders", Handler: func(context.Context, *handoff.Message) error { return nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	if rt.cfg.Logger != slog.Default() {
		t.Errorf("a nil Config.Logger became %v, want slog.Default()", rt.cfg.Logger)
	}
}
