package pool

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// TestStopGrace covers what depends on the grace running out. Each subtest
// runs in a synctest bubble, where the grace timer fires only once every
// goroutine of the test is blocked: handlers that honour their ctx have
// returned by then, and "Stop has not returned" can be checked exactly.
func TestStopGrace(t *testing.T) {
	t.Parallel()
	t.Run("straggler", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			g := newGate()
			h := setup(t, Config[item]{Handler: g.handler})
			h.mustSubmit(item{id: 1})
			g.wait(t)
			res := h.stop(time.Second, nil)
			if got := ids(res.Interrupted); !slices.Equal(got, []int{1}) || res.Stragglers != 1 {
				t.Errorf("Interrupted = %v (%d stragglers), want [1] (1)", got, res.Stragglers)
			}
			if st := h.p.Stats(); st.Running != 0 {
				t.Errorf("Stats = %+v, want stragglers not counted as running", st)
			}
			close(g.release)
			h.p.waitLoops() // the straggler's worker has finished
			if _, called := h.result(1); called {
				t.Error("ResultFunc called for a straggler")
			}
		})
	})

	t.Run("waits for ResultFunc past grace", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			inResult := make(chan struct{})
			release := make(chan struct{})
			h := setup(t, Config[item]{ResultFunc: func(item, error) {
				close(inResult)
				<-release
			}})
			h.mustSubmit(item{id: 1})
			<-inResult
			stopped := make(chan StopResult[item], 1)
			go func() { stopped <- h.stop(0, nil) }()
			synctest.Wait()
			select {
			case res := <-stopped:
				t.Fatalf("Stop returned %+v while a ResultFunc was running", res)
			default:
			}
			close(release)
			res := <-stopped
			if len(res.Interrupted) != 0 || res.Stragglers != 0 {
				t.Errorf("Stop = %+v, want nothing interrupted", res)
			}
			if _, called := h.result(1); !called {
				t.Error("Stop returned before ResultFunc completed")
			}
		})
	})

	t.Run("counts check out", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			countsCheckOut(t)
		})
	})
}

// countsCheckOut has four workers end four ways at the stop: nil, error,
// straggler, and one still in its ResultFunc; earlier items succeeded or
// failed; later ones never start.
func countsCheckOut(t *testing.T) {
	errFail := errors.New("fail")
	started := make(chan item, 16)
	straggle := make(chan struct{})
	inResult := make(chan struct{})
	releaseResult := make(chan struct{})
	cancelled := make(chan struct{})
	h := setup(t, Config[item]{Workers: 4, QueueSize: 8,
		Handler: func(ctx context.Context, it item) error {
			switch it.key {
			case "ok":
				return nil
			case "fail":
				return errFail
			}
			started <- it
			switch it.key {
			case "nil":
				<-ctx.Done()
				close(cancelled)
				return nil
			case "err":
				<-ctx.Done()
				return ctx.Err()
			case "straggle":
				<-straggle
				return nil
			}
			return nil // "slow-result"
		},
		ResultFunc: func(it item, _ error) {
			if it.key == "slow-result" {
				close(inResult)
				<-releaseResult
			}
		},
	})
	for i := range 10 {
		key := "ok"
		if i%3 == 0 {
			key = "fail"
		}
		h.mustSubmit(item{id: i, key: key})
	}
	h.drain()
	h.mustSubmit(item{id: 10, key: "nil"}, item{id: 11, key: "err"}, item{id: 12, key: "straggle"}, item{id: 13, key: "slow-result"})
	for range 4 {
		<-started
	}
	<-inResult
	for i := 14; i < 20; i++ {
		h.mustSubmit(item{id: i, key: "ok"})
	}
	const grace = time.Minute
	stopped := make(chan StopResult[item], 1)
	go func() { stopped <- h.stop(grace, nil) }()
	<-cancelled
	// The bubble's clock only moves when every goroutine is blocked: past
	// the grace, the straggler is reported, and Stop must go on waiting
	// for the ResultFunc still running.
	time.Sleep(grace)
	synctest.Wait()
	select {
	case res := <-stopped:
		t.Fatalf("Stop returned %+v while a ResultFunc was running", res)
	default:
	}
	close(releaseResult)
	res := <-stopped
	close(straggle)
	h.p.waitLoops()

	st := h.p.Stats()
	submitted := 20
	if got := st.Succeeded + st.Failed + uint64(len(res.Unstarted)+len(res.Interrupted)); got != uint64(submitted) {
		t.Errorf("succeeded %d + failed %d + unstarted %d + interrupted %d = %d, want %d",
			st.Succeeded, st.Failed, len(res.Unstarted), len(res.Interrupted), got, submitted)
	}
	if st.Succeeded != 8 || st.Failed != 4 {
		t.Errorf("Stats = %+v, want 8 succeeded (6 ok, nil, slow-result), 4 failed", st)
	}
	if got, want := ids(res.Unstarted), []int{14, 15, 16, 17, 18, 19}; !slices.Equal(got, want) {
		t.Errorf("Unstarted = %v, want %v", got, want)
	}
	if got := ids(res.Interrupted); !slices.Equal(got, []int{11, 12}) || res.Stragglers != 1 {
		t.Errorf("Interrupted = %v (%d stragglers), want [11 12] (1)", got, res.Stragglers)
	}
}
