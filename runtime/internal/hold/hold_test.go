package hold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/handoff-go/handoff/pool"
	"github.com/handoff-go/handoff/snapshot"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// item is a pool item as the runtime's carries what the hold needs.
type item struct {
	id      string
	attempt int
	mark    Mark
}

func (it *item) HoldMark() *Mark { return &it.mark }
func (it *item) Uncount(n int)   { it.attempt = max(it.attempt-n, 0) }

// backoff is the runtime's probe backoff without its jitter's source:
// d = initial doubled n-1 times, at most max, drawn in [d/2, d] (here d).
func backoff(n int, initial, maxWait time.Duration) time.Duration {
	d := initial
	for i := 1; i < n && d < maxWait; i++ {
		d *= 2
	}
	return min(d, maxWait)
}

// defaults are SuspendPolicy's.
var defaults = Policy{After: 10, ProbeBackoff: 250 * time.Millisecond, ProbeMaxBackoff: 5 * time.Second, WarnAfter: time.Minute}

// holdRig is a class's hold around a real pool, built without a Runtime:
// the pool's functions do what the runtime's do for the hold (handle.go),
// and a failure that the hold does not take is retried in place after
// 10ms, with no attempt limit.
type holdRig struct {
	h        *Hold[*item]
	p        *pool.Pool[*item]
	down     atomic.Bool
	calls    atomic.Int64
	done     atomic.Int64
	rewound  atomic.Int64 // unix nanos of the last rewind
	stopping chan struct{}
}

func newHoldRig(t *testing.T, workers int) *holdRig {
	t.Helper()
	g := &holdRig{stopping: make(chan struct{})}
	p, err := pool.New(pool.Config[*item]{
		Name: "db", Workers: workers, QueueSize: 64,
		Handler: func(_ context.Context, it *item) error {
			g.h.Starting(it)
			time.Sleep(time.Millisecond)
			g.calls.Add(1) // counted as it returns, as the probes are
			if g.down.Load() {
				return errors.New("database down")
			}
			return nil
		},
		RetryFunc: func(it *item, err error) (time.Duration, bool) {
			if g.h.Failed(it, err) {
				return 0, true
			}
			it.attempt++
			return 10 * time.Millisecond, true
		},
		ResultFunc: func(it *item, err error) {
			if err == nil {
				g.h.Succeeded(it)
				g.done.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	g.p = p
	g.h = New(Config[*item]{Class: "db", Policy: defaults, Pool: p, Log: slog.New(slog.DiscardHandler), Backoff: backoff,
		Stopping: g.stopping, Rewind: func(due time.Time) { g.rewound.Store(due.UnixNano()) }})
	return g
}

func (g *holdRig) submit(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		it := &item{id: fmt.Sprint("m", i)}
		if err := g.p.Submit(t.Context(), it); err != nil {
			t.Fatal(err)
		}
	}
}

// stop stops the hold and the pool, as the runtime's stop does.
func (g *holdRig) stop() pool.StopResult[*item] {
	close(g.stopping)
	g.h.Stop()
	return g.p.Stop(time.Second, errors.New("test stop"))
}

// TestHoldSuspendsProbesAndLifts: ten failed attempts of several
// messages suspend the class (its pool held, fetching closed, due
// delayed messages skipped); one probe at a time runs while the
// dependency is down, none of those failures counts an attempt, and the
// first success after it is back lifts the hold: every message is done,
// fetching opens and the scheduler is rewound to what it skipped.
func TestHoldSuspendsProbesAndLifts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newHoldRig(t, 4)
		g.down.Store(true)
		g.submit(t, 8)
		synctest.Wait()
		// The fourth worker's failure is the tenth in a row (of four
		// messages, retried at 10ms): suspended within a few retries.
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		st := g.h.Stats()
		if st.State != Suspended || st.Suspensions != 1 || !g.p.Held() {
			t.Fatalf("after the outage began: %+v, pool held %v; want suspended once and held", st, g.p.Held())
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		if g.h.MayFetch(ctx) {
			t.Error("fetching open while suspended")
		}
		cancel()
		due := time.Now().Add(-time.Minute)
		if handed, err := g.h.Deliver(t.Context(), &item{id: "later"}, due); handed || err != nil {
			t.Errorf("Deliver while suspended: handed %v, err %v; want it left in the state file", handed, err)
		}

		// Down for 20s more (1s went by in mayFetch): probes only, one at a time, backing off up
		// to 5s: about 2+log2(20) of them.
		before, probed := g.calls.Load(), g.h.Stats().Probes
		time.Sleep(20 * time.Second)
		synctest.Wait()
		calls := g.calls.Load() - before
		if st := g.h.Stats(); calls < 3 || calls > 12 || st.Probes-probed != int(calls) {
			t.Fatalf("20s more of outage: %d calls, %d failed probes; want as many, between 3 and 12", calls, st.Probes-probed)
		}

		g.down.Store(false)
		time.Sleep(6 * time.Second) // the longest probe wait is 5s
		synctest.Wait()
		if st := g.h.Stats(); st.State != Running || g.p.Held() || g.done.Load() != 8 {
			t.Fatalf("after the outage: %+v, held %v, done %d; want running, released, 8 done", st, g.p.Held(), g.done.Load())
		}
		if got := g.rewound.Load(); got != due.UnixNano() {
			t.Errorf("scheduler rewound to %v, want %v", time.Unix(0, got), due)
		}
		if !g.h.MayFetch(t.Context()) {
			t.Error("fetching closed after the lift")
		}
		if res := g.stop(); len(res.Unstarted)+len(res.Waiting)+len(res.Interrupted) != 0 {
			t.Errorf("stop found work left: %+v", res)
		}
	})
}

// TestHoldPauseKept: a pause is written to the state file and holds the
// pool; restored from the file on a new hold it holds again, with its
// reason, and saved messages that do not fit the held pool wait in the
// backlog until the resume, which deletes the pause and pushes them.
func TestHoldPauseKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := snapshot.Open(filepath.Join(t.TempDir(), "state.db"), snapshot.Options{LockTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		g := newHoldRig(t, 1)
		if err := g.h.Pause(store, "maintenance"); err != nil {
			t.Fatal(err)
		}
		if st := g.h.Stats(); st.State != Paused || st.Reason != "maintenance" || !g.p.Held() {
			t.Fatalf("after pause: %+v, held %v", st, g.p.Held())
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if g.h.MayFetchNow() || g.h.MayFetch(ctx) {
			t.Fatal("a paused class may fetch")
		}
		g.stop()

		// A new start: the pause comes back from the file.
		g2 := newHoldRig(t, 1)
		var pauses map[string]snapshot.Pause
		if pauses, err = store.Pauses(); err != nil {
			t.Fatal(err)
		}
		g2.h.RestorePause(pauses["db"], true)
		if st := g2.h.Stats(); st.State != Paused || st.Reason != "maintenance" {
			t.Fatalf("restored: %+v", st)
		}
		for i := range 134 { // QueueSize 64, the saved lane 128: six go to the backlog
			it := &item{id: fmt.Sprint("p", i)}
			if err := g2.h.Repush(t.Context(), it); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(g2.h.backlog); n != 6 {
			t.Fatalf("backlog %d, want 6", n)
		}
		if err := g2.h.Resume(store); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		if g2.done.Load() != 134 || g2.h.Stats().State != Running {
			t.Fatalf("after resume: done %d, %+v", g2.done.Load(), g2.h.Stats())
		}
		if !g2.h.MayFetchNow() {
			t.Error("a resumed class may not fetch now")
		}
		pauses = nil
		if pauses, err = store.Pauses(); err != nil {
			t.Fatal(err)
		}
		if len(pauses) != 0 {
			t.Errorf("pauses left in the file: %v", pauses)
		}
		g2.stop()
	})
}

// TestHoldResumeDuringStop: a paused class whose saved messages did not
// all fit its held pool is resumed after the stop's quiesce (Stop) while
// its pool has room again (a revocation during the drain took unstarted
// messages out). The resume lets the pool run what it holds, and pushes
// nothing: the quiesce ended everything that feeds the pools, and the
// backlog's messages stay in the state file for the next start. Before,
// the lift started a backlog push after Stop had joined the pushes:
// nothing waited for it, and it handed the backlog to the pool during
// the stop.
func TestHoldResumeDuringStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := snapshot.Open(filepath.Join(t.TempDir(), "state.db"), snapshot.Options{LockTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		g := newHoldRig(t, 1)
		if err := g.h.Pause(store, "maintenance"); err != nil {
			t.Fatal(err)
		}
		for i := range 134 { // QueueSize 64, the saved lane 128: six go to the backlog
			if err := g.h.Repush(t.Context(), &item{id: fmt.Sprint("p", i)}); err != nil {
				t.Fatal(err)
			}
		}
		close(g.stopping)
		g.h.Stop()
		removed := 0
		g.p.Remove(func(*item) bool { removed++; return removed <= 10 })
		if err := g.h.Resume(store); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		st := g.p.Stats()
		if in := st.Queued + st.Waiting + st.Running + int(st.Succeeded+st.Failed); in != 118 {
			t.Errorf("the pool holds %d messages after a resume during the stop, want the 118 it held at the quiesce (the backlog of 6 pushed after Stop)", in)
		}
		if st := g.h.Stats(); st.State != Running {
			t.Errorf("after the resume: %+v, want running", st)
		}
		g.p.Stop(time.Second, errors.New("test stop"))
	})
}

// BenchmarkMayFetch is what every fetch loop of a class asks before each
// record it takes, here from all the benchmark's goroutines at once on an
// open class. Run it with
//
//	go test -run='^$' -bench=MayFetch -cpu=2,8 ./runtime/internal/hold/
func BenchmarkMayFetch(b *testing.B) {
	h := New(Config[*item]{Class: "db"})
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !h.MayFetch(ctx) {
				b.Fatal("an open class may not fetch")
			}
		}
	})
}

// TestRepushAheadOfFetched: a class at capacity (its pool full, three
// fetch loops of its other partitions waiting with batches of fresh
// records) while a partition's restore re-pushes five saved records, as
// restore, follow and the start's recovery do through Repush. The saved
// records must not wait behind the class's fresh work: the re-push
// returns before any handler finished, and every saved record starts
// before every fresh record that was not in the pool when the restore
// began (the waiting batches and a batch fetched during the restore).
// Counted, not timed: the bubble's clock only orders the handlers.
func TestRepushAheadOfFetched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const workers, queue, batch, saved = 2, 8, 16, 5
		var (
			mu    sync.Mutex
			order []string
		)
		p, err := pool.New(pool.Config[*item]{
			Name: "users", Workers: workers, QueueSize: queue,
			Handler: func(_ context.Context, it *item) error {
				mu.Lock()
				order = append(order, it.id) // in the order they start
				mu.Unlock()
				time.Sleep(45 * time.Millisecond) // the work
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		stopping := make(chan struct{})
		h := New(Config[*item]{Class: "users", Policy: defaults, Pool: p, Log: slog.New(slog.DiscardHandler),
			Backoff: backoff, Stopping: stopping, Rewind: func(time.Time) {}})

		// The class at capacity: workers busy, queue full.
		for i := range workers + queue {
			if err := p.Submit(t.Context(), &item{id: fmt.Sprint("old-", i)}); err != nil {
				t.Fatal(err)
			}
		}
		// Three fetch loops of the class's other partitions wait for room.
		var fetchers sync.WaitGroup
		submitBatch := func(prefix string) {
			fetchers.Go(func() {
				vs := make([]*item, batch)
				for i := range vs {
					vs[i] = &item{id: fmt.Sprint(prefix, i)}
				}
				if n, err := p.SubmitBatch(t.Context(), vs); err != nil || n != batch {
					t.Errorf("fetch loop %s: submitted %d of %d: %v", prefix, n, batch, err)
				}
			})
		}
		for f := range 3 {
			submitBatch(fmt.Sprint("fresh", f, "-"))
		}
		synctest.Wait() // the fetch loops wait in the pool

		// The restore re-pushes its saved records, one after the other.
		var repushed atomic.Int64
		var restore sync.WaitGroup
		restore.Go(func() {
			for i := range saved {
				if err := h.Repush(t.Context(), &item{id: fmt.Sprint("saved-", i)}); err != nil {
					t.Errorf("repush saved-%d: %v", i, err)
					return
				}
				repushed.Add(1)
			}
		})
		synctest.Wait()      // the restore has begun
		submitBatch("late-") // fetched while the restore runs
		synctest.Wait()
		mu.Lock()
		startedBefore := len(order)
		mu.Unlock()
		if n := repushed.Load(); n != saved || startedBefore != workers {
			t.Errorf("the restore waited behind fresh work: %d of %d saved records re-pushed while %d handlers had started (%d before it began)",
				n, saved, startedBefore, workers)
		}

		restore.Wait()
		fetchers.Wait()
		total := workers + queue + 4*batch + saved
		for {
			mu.Lock()
			n := len(order)
			mu.Unlock()
			if n == total {
				break
			}
			time.Sleep(45 * time.Millisecond)
		}
		close(stopping)
		h.Stop()
		res := p.Stop(time.Second, errors.New("test stop"))
		if left := len(res.Unstarted) + len(res.Waiting) + len(res.Interrupted); left != 0 {
			t.Errorf("the stop found %d items left; want 0", left)
		}

		// Every saved record starts before every fresh one admitted after
		// the restore began; the old ones (in the pool already) come first.
		lastSaved, firstFresh := -1, len(order)
		for i, id := range order {
			switch {
			case strings.HasPrefix(id, "saved-"):
				lastSaved = i
			case strings.HasPrefix(id, "fresh") || strings.HasPrefix(id, "late-"):
				firstFresh = min(firstFresh, i)
			}
		}
		if lastSaved > firstFresh {
			ahead := 0
			for _, id := range order[:lastSaved] {
				if !strings.HasPrefix(id, "saved-") && !strings.HasPrefix(id, "old-") {
					ahead++
				}
			}
			t.Errorf("the last saved record started %dth, after %d fresh records fetched after the restore began", lastSaved+1, ahead)
		}
		if len(order) != total {
			t.Errorf("handled %d, want %d (%d old, %d fresh, %d saved)", len(order), total, workers+queue, 4*batch, saved)
		}
	})
}
