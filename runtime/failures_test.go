package runtime

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/pool"
	"github.com/handoff-go/handoff/runtime/internal/hold"
	"github.com/handoff-go/handoff/snapshot"
)

// failRig is one class on a real pool whose functions are the real
// handling's, with real failures, a real state file and no Runtime: what
// the message's way from a pool's worker to the state file needs.
type failRig struct {
	store     *snapshot.State
	state     *stateFile
	tally     *tally
	fail      *failures
	c         *class
	accepting atomic.Bool
	failing   atomic.Bool // the handler fails for good
	mu        sync.Mutex
	published []string // IDs given to the dead-letter publish
}

func newFailRig(t *testing.T) *failRig {
	t.Helper()
	store, state := openState(t)
	log := slog.New(slog.DiscardHandler)
	g := &failRig{store: store, state: state}
	cc := Class{Name: "mail", Workers: 2, QueueSize: 16, Handler: func(context.Context, *handoff.Message) error {
		if g.failing.Load() {
			return handoff.Permanent(errors.New("bad address"))
		}
		return nil
	}}
	cc.Retry.withDefaults()
	cc.Suspend.withDefaults()
	g.c = &class{cfg: cc, handle: cc.Handler}
	classes := map[string]*class{"mail": g.c}
	g.tally = &tally{classes: []*class{g.c}}
	g.fail = newFailures(failuresConfig{state: g.state, tally: g.tally, classes: classes, accepting: &g.accepting, log: log,
		publish: func(_ *class, rec snapshot.Record) {
			g.mu.Lock()
			g.published = append(g.published, rec.Message.ID)
			g.mu.Unlock()
		}})
	h := &handling{cfg: handlingConfig{state: g.state, deletes: &snapshot.DoneQueue{}, tally: g.tally, fail: g.fail, log: log}}
	p, err := pool.New(pool.Config[*item]{Name: "mail", Workers: 2, QueueSize: 16,
		Handler: h.handler(g.c), RetryFunc: h.retry(g.c), ResultFunc: h.result(g.c)})
	if err != nil {
		t.Fatal(err)
	}
	g.c.pool = p
	g.c.hold = hold.New(hold.Config[*item]{Class: "mail", Policy: hold.Policy(cc.Suspend), Pool: p, Log: log, Rewind: func(time.Time) {}, Backoff: probeBackoff})
	g.accepting.Store(true)
	t.Cleanup(func() { p.Stop(time.Second, context.Canceled) })
	return g
}

func (g *failRig) submit(t *testing.T, id string) {
	t.Helper()
	if err := g.c.pool.Submit(t.Context(), &item{m: handoff.Message{ID: id, Class: "mail"}, src: fromSubmit}); err != nil {
		t.Fatal(err)
	}
}

// TestFailuresDeadLetterRequeueDiscard: a permanent failure becomes a
// dead letter in the state file, counted and published; a requeue runs it
// again once (a second requeue while it runs is refused) and its success
// deletes the record; a discard deletes another one; both are then gone.
func TestFailuresDeadLetterRequeueDiscard(t *testing.T) {
	g := newFailRig(t)
	g.failing.Store(true)
	g.submit(t, "a")
	g.submit(t, "b")
	waitFor(t, "two dead letters", func() bool { return g.tally.total(evDeadLettered) == 2 })
	dls, next, err := g.fail.list("", "", 10)
	if err != nil || len(dls) != 2 || next != "" {
		t.Fatalf("dead letters %d, next %q, %v; want 2 and no next page", len(dls), next, err)
	}
	g.mu.Lock()
	if len(g.published) != 2 {
		t.Errorf("published %v, want both", g.published)
	}
	g.mu.Unlock()

	g.failing.Store(false)
	var a, b DeadLetter
	for _, dl := range dls {
		if dl.Message.ID == "a" {
			a = dl
		} else {
			b = dl
		}
	}
	aLocal, _, err := g.fail.get(t.Context(), a.Key)
	if err != nil {
		t.Fatal(err)
	}
	if !g.fail.requeues.start(aLocal) { // as if a's requeue were running
		t.Fatal("claim refused")
	}
	if err := g.fail.requeue(t.Context(), a.Key); !errors.Is(err, ErrRequeued) {
		t.Fatalf("requeue of a claimed dead letter: %v, want ErrRequeued", err)
	}
	g.fail.requeues.finish(aLocal)
	if err := g.fail.requeue(t.Context(), a.Key); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "requeued dead letter done", func() bool { return g.tally.total(evRequeuedDone) == 1 })
	if _, _, err := g.fail.get(t.Context(), a.Key); !errors.Is(err, ErrNotFound) {
		t.Errorf("requeued and done: %v, want ErrNotFound", err)
	}
	if err := g.fail.discard(t.Context(), b.Key); err != nil {
		t.Fatal(err)
	}
	if err := g.fail.requeue(t.Context(), b.Key); !errors.Is(err, ErrNotFound) {
		t.Errorf("requeue after discard: %v, want ErrNotFound", err)
	}
	if n := g.tally.total(evDiscarded); n != 1 {
		t.Errorf("discarded %d, want 1", n)
	}
	g.accepting.Store(false)
	g.failing.Store(true)
	g.submit(t, "c")
	waitFor(t, "third dead letter", func() bool { return g.tally.total(evDeadLettered) == 3 })
	dls, _, _ = g.fail.list("mail", "", 10)
	if err := g.fail.requeue(t.Context(), dls[0].Key); !errors.Is(err, ErrNotRunning) {
		t.Errorf("requeue while not accepting: %v, want ErrNotRunning", err)
	}
}

// TestFailuresUnsavedRetried: a submitted message whose dead-letter write
// fails is kept in memory, counted held, and saved by the retry loop once
// the state file takes writes again.
func TestFailuresUnsavedRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFailRig(t)
		var broken atomic.Bool
		broken.Store(true)
		g.state.beforeWrite = func(string, *item) error {
			if broken.Load() {
				return errors.New("disk full")
			}
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { g.fail.retryUnsaved(ctx) })
		g.failing.Store(true)
		g.submit(t, "a")
		time.Sleep(time.Second)
		synctest.Wait()
		if g.tally.total(evHeld) != 1 || g.fail.unsaved.len() != 1 || g.tally.total(evDeadLettered) != 0 {
			t.Fatalf("with the file broken: held %d, kept %d, dead %d; want 1, 1, 0",
				g.tally.total(evHeld), g.fail.unsaved.len(), g.tally.total(evDeadLettered))
		}
		broken.Store(false)
		time.Sleep(6 * time.Second) // the retry waits at most 5s
		synctest.Wait()
		if g.fail.unsaved.len() != 0 || g.tally.total(evDeadLettered) != 1 {
			t.Errorf("after the file mended: kept %d, dead %d; want 0, 1", g.fail.unsaved.len(), g.tally.total(evDeadLettered))
		}
		cancel()
		wg.Wait()
	})
}
