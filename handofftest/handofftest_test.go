package handofftest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/handofftest"
	"github.com/handoff-go/handoff/runtime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errDown = errors.New("database down")

// The class's own RetryPolicy (the default: 3 attempts, 100ms..5s
// backoff) runs in a synctest bubble, so its backoffs take no time: a
// message failing twice is handled on its third attempt, one failing
// every time is a dead letter after three, with its error.
func TestRetriesInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls sync.Map
		h := handofftest.New(t, runtime.Class{Name: "orders", Handler: func(ctx context.Context, m *handoff.Message) error {
			n, _ := calls.LoadOrStore(m.ID, new(atomic.Int32))
			k := n.(*atomic.Int32).Add(1)
			if m.ID == "always" || m.ID == "twice" && k <= 2 {
				return errDown
			}
			return nil
		}})
		start := time.Now()
		h.Send(&handoff.Message{ID: "twice"}, &handoff.Message{ID: "always"}, &handoff.Message{ID: "ok"})
		h.Wait()
		h.RequireHandled("twice", 3)
		h.RequireDeadLettered("always", "database down")
		if r := h.RequireHandled("ok", 1); r.Calls != 1 {
			t.Errorf("ok called %d times", r.Calls)
		}
		if r := h.Result("always"); r.Attempts != 3 || r.Calls != 3 {
			t.Errorf("always: %d attempts, %d calls; want 3, 3", r.Attempts, r.Calls)
		}
		// The backoffs passed on the bubble's clock: at least 2 of them.
		if d := time.Since(start); d < 100*time.Millisecond {
			t.Errorf("fake clock advanced %s, less than the backoffs", d)
		}
	})
}

// A permanent error is a dead letter after one attempt, never retried.
func TestPermanent(t *testing.T) {
	t.Parallel()
	h := handofftest.New(t, runtime.Class{Name: "users", Handler: func(ctx context.Context, m *handoff.Message) error {
		if string(m.Value) == "bad" {
			return handoff.Permanent(errors.New("no such user"))
		}
		return nil
	}})
	ids := h.SendValues("u1", "good", "bad")
	h.Wait()
	h.RequireHandled(ids[0], 1)
	if r := h.RequireDeadLettered(ids[1], "no such user"); r.Calls != 1 || r.Attempts != 1 {
		t.Errorf("permanent failure: %d calls, %d attempts; want 1, 1", r.Calls, r.Attempts)
	}
}

// An ordered class: a key's dead letter parks the key's later messages
// while other keys flow; once the dead letter is requeued (after the bug
// is fixed) and succeeds, the parked ones run in their order.
func TestOrderedParking(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	var mu sync.Mutex
	var order []string
	h := handofftest.New(t, runtime.Class{Name: "orders", Ordered: true, Handler: func(ctx context.Context, m *handoff.Message) error {
		if broken.Load() && string(m.Value) == "paid" {
			return handoff.Permanent(errors.New("payment service rejected"))
		}
		mu.Lock()
		order = append(order, string(m.Key)+":"+string(m.Value))
		mu.Unlock()
		return nil
	}})
	a := h.SendValues("order-1", "created", "paid", "shipped", "delivered")
	b := h.SendValues("order-2", "created", "cancelled")
	h.Wait()
	h.RequireHandled(a[0], 1)
	h.RequireDeadLettered(a[1], "payment service rejected")
	h.RequireParked(a[2])
	h.RequireParked(a[3])
	h.RequireHandled(b[0], 1)
	h.RequireHandled(b[1], 1)

	broken.Store(false)
	dls, _, err := h.Runtime().DeadLetters("orders", "", 10)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %v, %v", dls, err)
	}
	if err := h.Runtime().Requeue(context.Background(), dls[0].Key); err != nil {
		t.Fatal(err)
	}
	h.Wait()
	for _, id := range a {
		h.RequireHandled(id, 1)
	}
	mu.Lock()
	defer mu.Unlock()
	var one []string
	for _, o := range order {
		if o[:7] == "order-1" {
			one = append(one, o)
		}
	}
	if want := []string{"order-1:created", "order-1:paid", "order-1:shipped", "order-1:delivered"}; !slices.Equal(one, want) {
		t.Errorf("order-1 ran %v, want %v", one, want)
	}
}

// A batch class: the handler fails one message of its batch with a
// BatchError; the runtime retries only that one.
func TestBatchClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sizes []int
		h := handofftest.New(t, runtime.Class{Name: "beats", MaxBatch: 50, MaxWait: 10 * time.Millisecond, Workers: 1,
			BatchHandler: func(ctx context.Context, ms []*handoff.Message) error {
				sizes = append(sizes, len(ms)) // one call at a time: Workers 1
				var be handoff.BatchError
				for i, m := range ms {
					if m.ID == "msg-7" && m.Attempt == 0 {
						be.Fail(i, errDown)
					}
				}
				return be.Err()
			}})
		for range 50 {
			h.Send(&handoff.Message{Key: []byte("device")})
		}
		h.Wait()
		for _, r := range h.Results() {
			want := 1
			if r.ID == "msg-7" {
				want = 2
			}
			h.RequireHandled(r.ID, want)
		}
		if len(sizes) < 2 || sizes[len(sizes)-1] != 1 {
			t.Errorf("batch sizes %v, want the retry alone last", sizes)
		}
	})
}

// Scheduled messages and delayed redeliveries wait in the state file;
// on the bubble's clock they come due at once.
func TestScheduledAndRedelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fail atomic.Bool
		fail.Store(true)
		h := handofftest.New(t, runtime.Class{Name: "users",
			Retry: runtime.RetryPolicy{MaxAttempts: 1, Redeliveries: 1, RedeliveryDelay: time.Minute},
			Handler: func(ctx context.Context, m *handoff.Message) error {
				if m.ID == "flaky" && fail.Load() {
					return errDown
				}
				return nil
			}})
		h.Schedule(&handoff.Message{ID: "reminder"}, time.Now().Add(time.Hour))
		h.Send(&handoff.Message{ID: "flaky"})
		h.Wait()
		h.RequireScheduled("reminder")
		if r := h.RequireScheduled("flaky"); !r.Redelivery || r.Attempts != 1 || r.Err != "database down" {
			t.Errorf("flaky: %+v, want a redelivery after 1 attempt", r)
		}
		fail.Store(false)
		time.Sleep(time.Hour)
		h.Wait()
		h.RequireHandled("reminder", 1)
		h.RequireHandled("flaky", 2)
	})
}

// Redeliver hands a message in again as Kafka does after a crash.
func TestRedeliver(t *testing.T) {
	t.Parallel()
	h := handofftest.New(t, runtime.Class{Name: "users", Handler: func(ctx context.Context, m *handoff.Message) error { return nil }})
	h.Send(&handoff.Message{ID: "a"})
	h.Wait()
	h.Redeliver("a")
	h.Wait()
	if r := h.RequireHandled("a", 1); r.Calls != 2 {
		t.Errorf("a called %d times, want 2", r.Calls)
	}
	if got := h.Handled(); !slices.Equal(got, []string{"a", "a"}) {
		t.Errorf("handled %v", got)
	}
}

// Restart runs the real stop: a handler still running at the end of the
// drain (30s, on the bubble's clock) is interrupted, it and the message
// queued behind it are saved, and the next start re-pushes both; the
// interrupted attempt is not counted.
func TestRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		h := handofftest.New(t, runtime.Class{Name: "users", Workers: 1, Handler: func(ctx context.Context, m *handoff.Message) error {
			if m.ID == "slow" && calls.Add(1) == 1 {
				<-ctx.Done() // until the hard stop
				return context.Cause(ctx)
			}
			return nil
		}})
		h.Send(&handoff.Message{ID: "slow"}, &handoff.Message{ID: "b"})
		rep := h.Restart()
		if rep.Interrupted != 1 || rep.Unstarted != 1 || rep.Snapshotted != 2 {
			t.Errorf("stop: %d interrupted, %d unstarted, %d saved; want 1, 1, 2", rep.Interrupted, rep.Unstarted, rep.Snapshotted)
		}
		h.Wait()
		if r := h.RequireHandled("slow", 1); r.Calls != 2 {
			t.Errorf("slow called %d times, want 2 (the interrupted one and the re-pushed one)", r.Calls)
		}
		h.RequireHandled("b", 1)
	})
}

// 1,000 messages through the real runtime, without Kafka: the time is
// logged (see BenchmarkThousand for the figure).
func TestThousand(t *testing.T) {
	t.Parallel()
	began := time.Now()
	h := handofftest.New(t, runtime.Class{Name: "beats", Handler: func(ctx context.Context, m *handoff.Message) error { return nil }})
	for range 1000 {
		h.Send(&handoff.Message{})
	}
	h.Wait()
	for _, r := range h.Results() {
		if r.Outcome != handofftest.Handled {
			t.Fatalf("%s is %s", r.ID, r.Outcome)
		}
	}
	rep := h.Stop()
	t.Logf("1000 messages: start, send, wait, check and stop took %s", time.Since(began))
	if rep.Succeeded != 1000 {
		t.Errorf("%d succeeded", rep.Succeeded)
	}
}

func BenchmarkThousand(b *testing.B) {
	for b.Loop() {
		h := handofftest.New(b, runtime.Class{Name: "beats", Handler: func(ctx context.Context, m *handoff.Message) error { return nil }})
		for range 1000 {
			h.Send(&handoff.Message{})
		}
		h.Wait()
		if n := len(h.Handled()); n != 1000 {
			b.Fatalf("%d handled", n)
		}
		h.Stop()
	}
}

// The harness judges what the class's middleware chain returns, as the
// runtime does: a message a deduplicating middleware skips is handled
// without reaching the handler.
func TestClassMiddleware(t *testing.T) {
	t.Parallel()
	var reached atomic.Int32
	dedup := func(next handoff.HandlerFunc) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error {
			if string(m.Value) == "seen" {
				return nil
			}
			return next(ctx, m)
		}
	}
	h := handofftest.New(t, runtime.Class{Name: "users", Middleware: []handoff.Middleware{dedup},
		Handler: func(ctx context.Context, m *handoff.Message) error { reached.Add(1); return nil }})
	ids := h.SendValues("u", "new", "seen")
	h.Wait()
	h.RequireHandled(ids[0], 1)
	h.RequireHandled(ids[1], 1)
	if n := reached.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// A dead letter discarded through the runtime is an outcome Wait knows
// (issue 23: Wait never returned after a Discard): Wait returns, the
// message is Discarded with its dead letter's error, its history ends in
// the discard, and in an ordered class the parked messages behind it run.
func TestWaitAfterDiscard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := handofftest.New(t, runtime.Class{Name: "orders", Ordered: true, Handler: func(ctx context.Context, m *handoff.Message) error {
			if string(m.Value) == "paid" {
				return handoff.Permanent(errors.New("card declined"))
			}
			return nil
		}})
		ids := h.SendValues("order-1", "created", "paid", "shipped")
		h.Wait()
		h.RequireDeadLettered(ids[1], "card declined")
		h.RequireParked(ids[2])
		dls, _, err := h.Runtime().DeadLetters("orders", "", 10)
		if err != nil || len(dls) != 1 {
			t.Fatalf("dead letters %v, %v", dls, err)
		}
		if err := h.Runtime().Discard(context.Background(), dls[0].Key); err != nil {
			t.Fatal(err)
		}
		h.Wait()
		if r := h.Result(ids[1]); r.Outcome != handofftest.Discarded || r.Err != "permanent: card declined" || r.Attempts != 1 {
			t.Errorf("discarded dead letter: %+v", r)
		}
		if r := h.Result(ids[1]); r.String() != "msg-2 discarded after 1 attempt: permanent: card declined" {
			t.Errorf("result %q", r)
		}
		h.RequireHandled(ids[2], 1)
		got := fmt.Sprint(h.History(ids[1]))
		if want := "[attempt 0: dead_lettered: permanent: card declined discarded]"; got != want {
			t.Errorf("history %s, want %s", got, want)
		}
	})
}

// A dead letter the harness never saw as one (discarded before any
// Wait or Result read the state file) is still known as discarded, from
// the outcome of its last attempt.
func TestDiscardUnseen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dead := make(chan struct{})
		h := handofftest.New(t, runtime.Class{Name: "users", Handler: func(ctx context.Context, m *handoff.Message) error {
			return handoff.Permanent(errors.New("no such user"))
		}}, handofftest.WithMiddleware(func(next handoff.HandlerFunc) handoff.HandlerFunc {
			return func(ctx context.Context, m *handoff.Message) error {
				runtime.OnOutcome(ctx, func(runtime.Outcome) { close(dead) })
				return next(ctx, m)
			}
		}))
		h.Send(&handoff.Message{ID: "u1"})
		<-dead
		synctest.Wait()
		dls, _, err := h.Runtime().DeadLetters("users", "", 10)
		if err != nil || len(dls) != 1 {
			t.Fatalf("dead letters %v, %v", dls, err)
		}
		if err := h.Runtime().Discard(context.Background(), dls[0].Key); err != nil {
			t.Fatal(err)
		}
		h.Wait()
		if r := h.Result("u1"); r.Outcome != handofftest.Discarded || r.Attempts != 1 || r.Err != "permanent: no such user" {
			t.Errorf("result %+v", r)
		}
	})
}

// History lists every attempt with what followed it, over retries in
// place, a delayed redelivery, a restart's interruption and a later
// delivery.
func TestHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		h := handofftest.New(t, runtime.Class{Name: "mail", Workers: 1,
			Retry: runtime.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Second, MaxBackoff: time.Second, Redeliveries: 1, RedeliveryDelay: time.Minute},
			Handler: func(ctx context.Context, m *handoff.Message) error {
				switch calls.Add(1) {
				case 1, 2:
					return errDown
				case 3:
					<-ctx.Done() // until the hard stop
					return context.Cause(ctx)
				}
				return nil
			}}, handofftest.WithDrainTimeout(time.Second), handofftest.WithHardStopGrace(time.Second))
		h.Send(&handoff.Message{ID: "m"})
		h.Wait()
		h.RequireScheduled("m")
		time.Sleep(time.Minute) // the redelivery comes due and blocks in its handler
		synctest.Wait()
		h.Restart()
		h.Wait()
		h.RequireHandled("m", 3)
		ev := h.History("m")
		var kinds []string
		for _, e := range ev {
			kinds = append(kinds, e.Kind.String())
		}
		if got := strings.Join(kinds, ","); got != "retried,redelivered,interrupted,succeeded" {
			t.Fatalf("history %v", ev)
		}
		if ev[0].Attempt != 0 || ev[0].Err != "database down" || ev[0].Wait <= 0 || ev[1].Attempt != 1 || ev[1].Wait != time.Minute ||
			ev[2].Attempt != 2 || ev[3].Attempt != 2 || ev[3].Err != "" {
			t.Errorf("history %v", ev)
		}
		// After the stop the history is still there.
		h.Stop()
		if after := h.History("m"); len(after) != 4 {
			t.Errorf("history after the stop: %v", after)
		}
	})
}

// With WithDrainTimeout and WithHardStopGrace a restart with a handler
// in flight takes those, not the runtime's 30s and 5s: on the bubble's
// clock the stop ends after the 50ms drain and the 20ms grace.
func TestStopTimings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		h := handofftest.New(t, runtime.Class{Name: "users", Workers: 1, Handler: func(ctx context.Context, m *handoff.Message) error {
			if calls.Add(1) == 1 {
				<-ctx.Done()
				time.Sleep(time.Hour) // ignores the cancel: a straggler
			}
			return nil
		}}, handofftest.WithDrainTimeout(50*time.Millisecond), handofftest.WithHardStopGrace(20*time.Millisecond))
		h.Send(&handoff.Message{ID: "slow"})
		synctest.Wait()
		began := time.Now()
		rep := h.Restart()
		if took := time.Since(began); took < 70*time.Millisecond || took > time.Second {
			t.Errorf("restart took %s on the bubble's clock, want the 50ms drain and 20ms grace", took)
		}
		if !rep.DrainTimedOut || rep.Interrupted != 1 || rep.Stragglers != 1 {
			t.Errorf("stop: %+v", rep)
		}
		h.Wait()
		h.RequireHandled("slow", 1)
		time.Sleep(time.Hour) // let the straggler end inside the bubble
	})
}

// Several classes and Config-level middleware: each message goes to the
// class its Class names, or the first; the middleware wraps every class,
// inside the harness's observer, which judges what it returns.
func TestClassesAndMiddleware(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	ran := map[string]string{}
	handler := func(name string) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error {
			mu.Lock()
			ran[m.ID] = name
			mu.Unlock()
			return nil
		}
	}
	var wrapped atomic.Int32
	veto := func(next handoff.HandlerFunc) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error {
			wrapped.Add(1)
			if string(m.Value) == "forbidden" {
				return handoff.Permanent(errors.New("vetoed"))
			}
			return next(ctx, m)
		}
	}
	h := handofftest.New(t, runtime.Class{Name: "orders", Handler: handler("orders")},
		handofftest.WithClasses(runtime.Class{Name: "users", Handler: handler("users")}),
		handofftest.WithMiddleware(veto))
	h.Send(&handoff.Message{ID: "o1"}, &handoff.Message{ID: "u1", Class: "users"},
		&handoff.Message{ID: "u2", Class: "users", Value: []byte("forbidden")})
	h.Wait()
	h.RequireHandled("o1", 1)
	h.RequireHandled("u1", 1)
	if r := h.RequireDeadLettered("u2", "vetoed"); r.Message.Class != "users" {
		t.Errorf("u2 dead letter of class %q", r.Message.Class)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran["o1"] != "orders" || ran["u1"] != "users" || ran["u2"] != "" || wrapped.Load() != 3 {
		t.Errorf("ran %v, middleware called %d times", ran, wrapped.Load())
	}
}

// A batch class with a typed batch handler on the real runtime: the one
// message that does not decode is a dead letter after one attempt, with
// the decode error; the others of its batch are handled once.
func TestTypedBatchClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type beat struct {
			Temp float64 `json:"temp"`
		}
		var rows atomic.Int32
		h := handofftest.New(t, runtime.Class{Name: "beats", MaxBatch: 10, Workers: 1,
			BatchHandler: handoff.TypedBatch(handoff.JSON[beat]{}, func(ctx context.Context, ms []*handoff.Message, bs []beat) error {
				rows.Add(int32(len(bs)))
				return nil
			})})
		ids := h.SendValues("device-1", `{"temp":21.5}`, `{"temp":`, `{"temp":19}`)
		h.Wait()
		h.RequireHandled(ids[0], 1)
		if r := h.RequireDeadLettered(ids[1], `permanent: handoff: decode class beats: id "msg-2": unexpected end of JSON input`); r.Calls != 1 {
			t.Errorf("undecodable message called %d times", r.Calls)
		}
		h.RequireHandled(ids[2], 1)
		if n := rows.Load(); n != 2 {
			t.Errorf("%d rows inserted, want 2", n)
		}
	})
}

// A typed batch class whose decoder panics on one message's bytes (a
// format that reads a schema ID from the value's first bytes, given a
// value too short): that message alone fails, with the panic, as it
// would in a Typed class; the others of its batch go to fn and are
// handled, not failed with it (with one attempt allowed, made dead
// letters).
func TestTypedBatchDecoderPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rows atomic.Int32
		dec := handoff.DecoderFunc[string](func(m *handoff.Message) (string, error) {
			return string(m.Value[2:]), nil // the schema ID is m.Value[:2]
		})
		h := handofftest.New(t, runtime.Class{Name: "beats", MaxBatch: 10, Workers: 1, Retry: runtime.RetryPolicy{MaxAttempts: 1},
			BatchHandler: handoff.TypedBatch(dec, func(ctx context.Context, ms []*handoff.Message, vs []string) error {
				rows.Add(int32(len(vs)))
				return nil
			})})
		ids := h.SendValues("device-1", "01a", "0", "01c")
		h.Wait()
		h.RequireHandled(ids[0], 1)
		if r := h.RequireDeadLettered(ids[1], "handoff: handler panicked: runtime error: slice bounds out of range"); r.Attempts != 1 {
			t.Errorf("the message whose decoder panicked is a dead letter after %d attempts, want 1", r.Attempts)
		}
		h.RequireHandled(ids[2], 1)
		if n := rows.Load(); n != 2 {
			t.Errorf("%d rows inserted, want 2", n)
		}
	})
}
