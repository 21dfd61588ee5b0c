package pool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestHammer submits from several goroutines while Stop runs, with
// attempts failing and retried after random delays, and relies on the
// harness's cleanup to check that every accepted item is reported exactly
// once: by ResultFunc, or by Stop as unstarted, waiting or interrupted.
// It runs with Submit and SubmitBatch, Handler and BatchHandler.
func TestHammer(t *testing.T) {
	t.Parallel()
	for _, mode := range []hammerMode{{}, {batchSubmit: true}, {batchHandler: true}, {batchSubmit: true, batchHandler: true}} {
		for _, ordered := range []bool{false, true} {
			mode.ordered = ordered
			t.Run(fmt.Sprintf("ordered=%v/submitBatch=%v/batchHandler=%v", ordered, mode.batchSubmit, mode.batchHandler), func(t *testing.T) {
				t.Parallel()
				for round := range hammerRounds {
					t.Run(fmt.Sprint("round", round), func(t *testing.T) {
						hammer(t, mode)
					})
				}
			})
		}
	}
}

// hammerMode is how a hammer round submits and handles.
type hammerMode struct {
	ordered      bool
	batchSubmit  bool // SubmitBatch of 1–6 items instead of Submit
	batchHandler bool // BatchHandler (MaxBatch 5, MaxWait 0 or 50µs) instead of Handler
}

func hammer(t *testing.T, mode hammerMode) {
	errFail := errors.New("fail")
	handle := func(ctx context.Context, it item) error {
		for range rand.IntN(20) {
			runtime.Gosched()
		}
		switch {
		case ctx.Err() != nil && it.id%2 == 0:
			return context.Cause(ctx) // interrupted
		case it.id%5 == 0:
			return errFail
		case rand.IntN(3) == 0:
			return errRetry
		}
		return nil
	}
	cfg := Config[item]{Workers: 4, QueueSize: 8, Ordered: mode.ordered,
		Handler: handle,
		// Most failed attempts wait a few microseconds, so that timers
		// fire as Stop begins; some give up and are reported as failed.
		RetryFunc: func(_ item, err error) (time.Duration, bool) {
			return time.Duration(rand.IntN(50)) * time.Microsecond, rand.IntN(8) != 0
		},
	}
	if mode.ordered {
		cfg.KeyFunc = keyOf
	}
	if mode.batchHandler {
		cfg.Handler = nil
		cfg.MaxBatch = 5
		cfg.MaxWait = time.Duration(rand.IntN(2)) * 50 * time.Microsecond
		cfg.BatchHandler = func(ctx context.Context, vs []item, errs []error) {
			for i, v := range vs {
				errs[i] = handle(ctx, v)
			}
		}
	}
	h := setup(t, cfg)

	// Odd submitters give up when their ctx is cancelled, at a random
	// point before the stop; even ones submit until ErrStopped.
	const submitters = 6
	threshold := int64(rand.IntN(300))
	giveUpAt := rand.Int64N(threshold + 1)
	var accepted atomic.Int64
	giveUpCtx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	stopNow := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for s := range submitters {
		ctx := context.Background()
		if s%2 == 1 {
			ctx = giveUpCtx
		}
		wg.Go(func() {
			for n := 0; ; n++ {
				var err error
				k := 1
				if mode.batchSubmit {
					its := make([]item, 1+rand.IntN(6))
					for i := range its {
						its[i] = item{id: s*1_000_000 + n + i, key: fmt.Sprint("k", rand.IntN(16))}
					}
					n += len(its) - 1
					k, err = h.submitBatch(ctx, its)
				} else {
					err = h.submit(ctx, item{id: s*1_000_000 + n, key: fmt.Sprint("k", rand.IntN(16))})
				}
				if errors.Is(err, ErrStopped) || (s%2 == 1 && errors.Is(err, context.Canceled)) {
					return
				}
				if err != nil {
					t.Errorf("Submit: %v", err)
					return
				}
				total := accepted.Add(int64(k))
				if total >= giveUpAt {
					giveUp()
				}
				if total >= threshold {
					once.Do(func() { close(stopNow) })
				}
			}
		})
	}
	<-stopNow
	drained := make(chan error, 1)
	go func() { drained <- h.p.Drain(context.Background()) }()
	res := h.stop(waitLimit, nil)
	wg.Wait()
	if err := <-drained; err != nil {
		t.Errorf("Drain across Stop: %v", err)
	}
	if res.Stragglers != 0 {
		t.Errorf("%d stragglers, want none", res.Stragglers)
	}
}
