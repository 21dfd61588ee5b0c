package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
)

// TestRequeueRacingItsEnd: Requeue called again and again on dead letters
// whose requeue is running (an operator's or a tool's retry, or
// TestOrderedParkingProperty's loop over a page read a moment before)
// never runs one twice: once a requeued dead letter has succeeded, a
// Requeue of it finds it gone (ErrNotFound) or still requeued
// (ErrRequeued), never a record it read before the delete.
func TestRequeueRacingItsEnd(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			t.Parallel()
			b := setup(t, 1, "orders")
			const n = 60
			values := make([]string, n)
			for i := range values {
				values[i] = fmt.Sprintf("m%03d", i)
			}
			// One key per message: in the ordered class no dead letter
			// parks another's.
			w := b.writer()
			msgs := make([]kafka.Message, n)
			for i, v := range values {
				msgs[i] = kafka.Message{Topic: "orders", Key: []byte("k-" + v), Value: []byte(v)}
			}
			if err := w.WriteMessages(context.Background(), msgs...); err != nil {
				t.Fatal(err)
			}
			devbroker.CloseWriter(w)
			var mu sync.Mutex
			failed := map[string]bool{}
			runs := map[string]int{}
			cfg := b.config(func(_ context.Context, m *handoff.Message) error {
				mu.Lock()
				defer mu.Unlock()
				v := string(m.Value)
				if !failed[v] {
					failed[v] = true
					return handoff.Permanent(errors.New("poison"))
				}
				runs[v]++
				return nil
			}, func(c *Class) { c.Ordered = ordered; c.Workers = 4 })
			rt, err := newRuntime(cfg)
			if err != nil {
				t.Fatal(err)
			}
			wait := start(t, rt, context.Background())
			waitFor(t, "every message a dead letter", func() bool { return rt.tally.total(evDeadLettered) == n })
			dls, _, err := rt.DeadLetters("orders", "", 2*n)
			if err != nil || len(dls) != n {
				t.Fatalf("dead letters: %d, %v", len(dls), err)
			}
			// Several callers per dead letter, each requeueing it until
			// it is gone.
			var wg sync.WaitGroup
			errs := make(chan error, 4*n)
			for _, dl := range dls {
				for range 4 {
					wg.Go(func() {
						for {
							err := rt.Requeue(context.Background(), dl.Key)
							switch {
							case errors.Is(err, ErrNotFound):
								return
							case err == nil, errors.Is(err, ErrRequeued):
							default:
								errs <- err
								return
							}
						}
					})
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			rt.Shutdown(context.Background())
			if _, err := wait(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, v := range values {
				if runs[v] != 1 {
					t.Errorf("%s succeeded %d times, want once", v, runs[v])
				}
			}
		})
	}
}

// TestDiscardRacingRequeue: a Discard and a Requeue of the same dead
// letter of an ordered class, at once: one of them wins. Either the dead
// letter is discarded and never runs, or it is requeued, the discard is
// refused, and it runs before the messages parked behind it.
func TestDiscardRacingRequeue(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	const keys = 40
	w := b.writer()
	var msgs []kafka.Message
	for k := range keys {
		for _, v := range []string{"poison", "v1", "v2"} {
			msgs = append(msgs, kafka.Message{Topic: "orders", Key: fmt.Appendf(nil, "k%02d", k), Value: fmt.Appendf(nil, "k%02d-%s", k, v)})
		}
	}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	devbroker.CloseWriter(w)
	var mu sync.Mutex
	failed := map[string]bool{}
	ran := map[string][]string{} // key -> values in handling order
	cfg := b.config(func(_ context.Context, m *handoff.Message) error {
		mu.Lock()
		defer mu.Unlock()
		v := string(m.Value)
		if strings.HasSuffix(v, "-poison") && !failed[v] {
			failed[v] = true
			return handoff.Permanent(errors.New("poison"))
		}
		ran[string(m.Key)] = append(ran[string(m.Key)], v)
		return nil
	}, func(c *Class) { c.Ordered = true; c.Workers = 4 })
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "every key parked behind its dead letter", func() bool { return rt.tally.total(evParked) == 2*keys })
	dls, _, err := rt.DeadLetters("orders", "", 2*keys)
	if err != nil || len(dls) != keys {
		t.Fatalf("dead letters: %d, %v", len(dls), err)
	}
	discarded := make([]bool, keys) // by dead letter, in dls order
	var wg sync.WaitGroup
	for i, dl := range dls {
		go0 := make(chan struct{})
		wg.Go(func() {
			<-go0
			err := rt.Requeue(context.Background(), dl.Key)
			if err != nil && !errors.Is(err, ErrRequeued) && !errors.Is(err, ErrNotFound) {
				t.Errorf("requeue %s: %v", dl.Message.Key, err)
			}
		})
		wg.Go(func() {
			<-go0
			err := rt.Discard(context.Background(), dl.Key)
			if err != nil && !errors.Is(err, ErrRequeued) && !errors.Is(err, ErrNotFound) {
				t.Errorf("discard %s: %v", dl.Message.Key, err)
			}
			discarded[i] = err == nil
		})
		close(go0)
	}
	wg.Wait()
	waitFor(t, "every key's parked messages run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, vs := range ran {
			for _, v := range vs {
				if !strings.HasSuffix(v, "-poison") {
					n++
				}
			}
		}
		return n == 2*keys
	})
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, dl := range dls {
		k := string(dl.Message.Key)
		want := []string{k + "-poison", k + "-v1", k + "-v2"}
		if discarded[i] {
			want = want[1:]
		}
		if !slices.Equal(ran[k], want) {
			t.Errorf("key %s (discarded %v): ran %v, want %v", k, discarded[i], ran[k], want)
		}
	}
}
