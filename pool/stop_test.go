package pool

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func TestStop(t *testing.T) {
	t.Parallel()

	// ctxHandler reports each start and returns what ret says once its
	// context is cancelled.
	ctxHandler := func(started chan<- item, ret func(ctx context.Context, it item) error) func(context.Context, item) error {
		return func(ctx context.Context, it item) error {
			started <- it
			<-ctx.Done()
			return ret(ctx, it)
		}
	}
	returnErr := func(ctx context.Context, _ item) error { return context.Cause(ctx) }
	returnNil := func(context.Context, item) error { return nil }

	t.Run("unstarted in submission order", func(t *testing.T) {
		t.Parallel()
		started := make(chan item, 1)
		h := setup(t, Config[item]{Workers: 1, QueueSize: 10, Handler: ctxHandler(started, returnErr)})
		h.mustSubmit(item{id: 1})
		<-started
		for i := 2; i <= 10; i++ {
			h.mustSubmit(item{id: i})
		}
		res := h.stop(waitLimit, nil)
		if got, want := ids(res.Unstarted), []int{2, 3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(got, want) {
			t.Errorf("Unstarted = %v, want %v", got, want)
		}
		if got := ids(res.Interrupted); !slices.Equal(got, []int{1}) || res.Stragglers != 0 {
			t.Errorf("Interrupted = %v (%d stragglers), want [1] (0)", got, res.Stragglers)
		}
		if _, called := h.result(1); called {
			t.Error("ResultFunc called for an interrupted item")
		}
		if again := h.stop(waitLimit, nil); again.Unstarted != nil || again.Interrupted != nil || again.Stragglers != 0 {
			t.Errorf("second Stop = %+v, want empty", again)
		}
	})

	t.Run("ordered unstarted in submission order", func(t *testing.T) {
		t.Parallel()
		started := make(chan item, 2)
		h := setup(t, Config[item]{Workers: 2, QueueSize: 10, Ordered: true, KeyFunc: keyOf, Handler: ctxHandler(started, returnErr)})
		h.mustSubmit(item{id: 1, key: "a"}, item{id: 2, key: "b"})
		<-started
		<-started
		// 3 and 5 wait behind busy keys, 4 is ready but has no worker, 6
		// waits behind 4.
		h.mustSubmit(item{id: 3, key: "a"}, item{id: 4, key: "c"}, item{id: 5, key: "b"}, item{id: 6, key: "c"})
		if st := h.p.Stats(); st.Queued != 4 || st.Running != 2 {
			t.Errorf("Stats = %+v, want 4 queued, 2 running", st)
		}
		res := h.stop(waitLimit, nil)
		if got, want := ids(res.Unstarted), []int{3, 4, 5, 6}; !slices.Equal(got, want) {
			t.Errorf("Unstarted = %v, want %v", got, want)
		}
		if got := ids(res.Interrupted); len(got) != 2 {
			t.Errorf("Interrupted = %v, want 1 and 2", got)
		}
	})

	t.Run("handler ctx gets the cause", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name       string
			cause, got error
		}{
			{"given", errors.New("deploy"), nil},
			{"nil means ErrHardStop", nil, ErrHardStop},
		} {
			started := make(chan item, 1)
			causes := make(chan error, 1)
			h := setup(t, Config[item]{Handler: ctxHandler(started, func(ctx context.Context, _ item) error {
				causes <- context.Cause(ctx)
				return nil
			})})
			h.mustSubmit(item{id: 1})
			<-started
			h.stop(waitLimit, tc.cause)
			want := tc.got
			if want == nil {
				want = tc.cause
			}
			if got := <-causes; got != want {
				t.Errorf("%s: context.Cause = %v, want %v", tc.name, got, want)
			}
		}
	})

	t.Run("nil after cancel is done", func(t *testing.T) {
		t.Parallel()
		started := make(chan item, 1)
		h := setup(t, Config[item]{Handler: ctxHandler(started, returnNil)})
		h.mustSubmit(item{id: 1})
		<-started
		res := h.stop(waitLimit, nil)
		if len(res.Interrupted) != 0 || len(res.Unstarted) != 0 {
			t.Errorf("Stop = %+v, want nothing handed back", res)
		}
		if err, called := h.result(1); !called || err != nil {
			t.Errorf("ResultFunc: called %v with %v, want called with nil", called, err)
		}
		if st := h.p.Stats(); st.Succeeded != 1 {
			t.Errorf("Stats = %+v, want 1 succeeded", st)
		}
	})

	t.Run("error after cancel is interrupted", func(t *testing.T) {
		t.Parallel()
		started := make(chan item, 1)
		h := setup(t, Config[item]{Handler: ctxHandler(started, returnErr)})
		h.mustSubmit(item{id: 1})
		<-started
		res := h.stop(waitLimit, nil)
		if got := ids(res.Interrupted); !slices.Equal(got, []int{1}) || res.Stragglers != 0 {
			t.Errorf("Interrupted = %v (%d stragglers), want [1] (0)", got, res.Stragglers)
		}
		if _, called := h.result(1); called {
			t.Error("ResultFunc called for an interrupted item")
		}
		if st := h.p.Stats(); st.Failed != 0 || st.Succeeded != 0 {
			t.Errorf("Stats = %+v, want nothing counted", st)
		}
	})

}
