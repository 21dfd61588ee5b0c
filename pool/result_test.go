package pool

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/internal/testio"
)

func TestPanic(t *testing.T) {
	t.Parallel()

	errBoom := errors.New("boom")
	var logs testio.SyncBuffer
	h := setup(t, Config[item]{Name: "orders", Workers: 1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Handler: func(_ context.Context, it item) error {
			switch it.key {
			case "panic":
				panic("kaput")
			case "panic-err":
				panic(errBoom)
			case "goexit":
				runtime.Goexit()
			}
			return nil
		},
	})
	h.mustSubmit(item{id: 1, key: "panic"}, item{id: 2, key: "ok"}, item{id: 3, key: "panic-err"}, item{id: 4, key: "goexit"}, item{id: 5, key: "ok"})
	h.drain()

	t.Run("panic value", func(t *testing.T) {
		err, _ := h.result(1)
		var pe *handoff.PanicError
		if !errors.As(err, &pe) {
			t.Fatalf("result = %#v, want *handoff.PanicError", err)
		}
		if pe.Value != "kaput" {
			t.Errorf("Value = %v, want kaput", pe.Value)
		}
		if !strings.Contains(string(pe.Stack), "TestPanic") {
			t.Errorf("Stack does not show the handler:\n%s", pe.Stack)
		}
	})

	t.Run("panic error unwraps", func(t *testing.T) {
		err, _ := h.result(3)
		var pe *handoff.PanicError
		if !errors.As(err, &pe) || !errors.Is(err, errBoom) {
			t.Errorf("result = %v, want a *handoff.PanicError wrapping boom", err)
		}
	})

	t.Run("goexit", func(t *testing.T) {
		if err, _ := h.result(4); !errors.Is(err, errGoexit) {
			t.Errorf("result = %v, want errGoexit", err)
		}
	})

	t.Run("pool keeps working", func(t *testing.T) {
		for _, id := range []int{2, 5} {
			if err, called := h.result(id); !called || err != nil {
				t.Errorf("item %d: called %v, err %v; want success", id, called, err)
			}
		}
		if st := h.p.Stats(); st.Succeeded != 2 || st.Failed != 3 {
			t.Errorf("Stats = %+v, want 2 succeeded, 3 failed", st)
		}
	})

	t.Run("logged", func(t *testing.T) {
		out := logs.String()
		for _, want := range []string{`level=ERROR msg="handler panicked"`, "component=pool", "class=orders", "err=", "stack=", "TestPanic"} {
			if !strings.Contains(out, want) {
				t.Errorf("log lacks %q:\n%s", want, out)
			}
		}
	})
}

func TestStats(t *testing.T) {
	t.Parallel()
	errFail := errors.New("fail")
	g := newGate()
	h := setup(t, Config[item]{Workers: 2, QueueSize: 5,
		Handler: func(ctx context.Context, it item) error {
			if err := g.handler(ctx, it); err != nil {
				return err
			}
			if it.key == "fail" {
				return errFail
			}
			return nil
		},
	})
	if st := h.p.Stats(); st != (Stats{}) {
		t.Errorf("new pool Stats = %+v, want zero", st)
	}
	h.mustSubmit(item{id: 1, key: "fail"}, item{id: 2})
	g.wait(t)
	g.wait(t)
	h.mustSubmit(item{id: 3, key: "fail"}, item{id: 4}, item{id: 5})
	if st := h.p.Stats(); st != (Stats{Queued: 3, Running: 2}) {
		t.Errorf("Stats = %+v, want 3 queued, 2 running", st)
	}
	close(g.release)
	h.drain()
	if st := h.p.Stats(); st != (Stats{Succeeded: 3, Failed: 2}) {
		t.Errorf("Stats = %+v, want 3 succeeded, 2 failed", st)
	}
}
