package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/snapshot"
)

// suspendedLog is the warning a class's suspension logs (hold.go).
const suspendedLog = "class suspended: its failures look like a dependency outage; holding its messages and probing"

// billing is a billing-style service for TestScheduleDuringStop: the
// billing class charges a customer (work that must not run twice, and is
// counted), then schedules the customer's receipt as follow-up work,
// failing when Schedule refuses it (or the receipt would be lost); the
// receipts class sends it (counted).
type billing struct {
	rt atomic.Pointer[Runtime]
	// The billing handlers after the first free wait for release.
	free    int64
	started atomic.Int64
	release chan struct{}
	// stopping is set by the test once the stop has begun: the receipts
	// accepted from then on are counted in acceptedInStop.
	stopping atomic.Bool
	n        atomic.Int64 // receipts asked for, for their due times

	mu             sync.Mutex
	charged        map[string]int // billing message ID -> charges
	sent           map[string]int // receipt ID -> times sent
	accepted       int            // Schedule calls that returned nil
	acceptedInStop int
	refused        []error // what the refused Schedule calls returned
}

func newBilling(free int64) *billing {
	return &billing{free: free, release: make(chan struct{}), charged: map[string]int{}, sent: map[string]int{}}
}

// charge is the billing class's handler. Every other receipt is due at
// once, the others 20ms later: Schedule's two ways.
func (bl *billing) charge(ctx context.Context, m *handoff.Message) error {
	if bl.started.Add(1) > bl.free {
		select {
		case <-bl.release:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	id := m.ID
	bl.mu.Lock()
	bl.charged[id]++
	bl.mu.Unlock()
	due := time.Now()
	if bl.n.Add(1)%2 == 0 {
		due = due.Add(20 * time.Millisecond)
	}
	receipt := &handoff.Message{ID: "receipt/" + id, Key: bytes.Clone(m.Key), Value: []byte(id)}
	err := bl.rt.Load().Schedule(ctx, "receipts", receipt, due)
	bl.mu.Lock()
	defer bl.mu.Unlock()
	if err != nil {
		bl.refused = append(bl.refused, err)
		return fmt.Errorf("billing: schedule receipt of %s: %w", id, err)
	}
	bl.accepted++
	if bl.stopping.Load() {
		bl.acceptedInStop++
	}
	return nil
}

// send is the receipts class's handler.
func (bl *billing) send(ctx context.Context, m *handoff.Message) error {
	bl.mu.Lock()
	bl.sent[m.ID]++
	bl.mu.Unlock()
	return nil
}

// counts returns the distinct and total charges and receipts sent.
func (bl *billing) counts() (charged, charges, sent, sends int) {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	for _, n := range bl.charged {
		charged++
		charges += n
	}
	for _, n := range bl.sent {
		sent++
		sends += n
	}
	return charged, charges, sent, sends
}

// TestScheduleDuringStop is the billing service of issue 44: its
// handlers charge, then schedule the receipt. A stop (SIGTERM: Run's
// context cancelled) with DrainTimeout 3s comes while 4 charges are
// running and 32 wait in the pool. Their Schedule calls come once the
// stop has begun: they are accepted and saved (in the state file and
// the changelog), so the drain finishes every charge, no failure counts
// toward the outage detector (no suspension), and after the restart
// each receipt is sent once and no customer is charged twice: on the
// same disk, and on a new one (the receipts come back from the
// changelog). Counted: produced, charged, receipts scheduled (during the
// stop too) and sent, committed.
func TestScheduleDuringStop(t *testing.T) {
	t.Parallel()
	for _, newDisk := range []bool{false, true} {
		name := "same disk"
		if newDisk {
			name = "new disk"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			scheduleDuringStop(t, newDisk)
		})
	}
}

// scheduleDuringStop is TestScheduleDuringStop, restarting on a new
// state file when newDisk is set.
func scheduleDuringStop(t *testing.T, newDisk bool) {
	b := setup(t, 2, "billing", "receipts")
	const produced, free, workers, queue = 60, 10, 4, 32
	const inFlight = workers + queue
	w := b.writer()
	msgs := make([]kafka.Message, produced)
	for i := range msgs {
		msgs[i] = kafka.Message{Topic: "billing", Key: fmt.Appendf(nil, "customer-%d", i%13), Value: fmt.Appendf(nil, "invoice-%d", i)}
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := w.WriteMessages(pctx, msgs...)
	pcancel()
	devbroker.CloseWriter(w)
	if err != nil {
		t.Fatal(err)
	}

	bl := newBilling(free)
	logger, suspensions := countLogs(t, suspendedLog)
	cfg := b.config(nil, func(c *Class) {
		switch c.Name {
		case "billing":
			c.Handler, c.Workers, c.QueueSize = bl.charge, workers, queue
		case "receipts":
			c.Handler, c.Workers = bl.send, 2
		}
	})
	cfg.Logger = logger
	cfg.DrainTimeout = 3 * time.Second
	cfg.HardStopGrace = time.Second

	// The first run: stopped with 36 charges in flight.
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bl.rt.Store(rt)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	wait := start(t, rt, ctx)
	pool := rt.classes.byName["billing"].pool
	var seen string // what the wait saw last, for a failure's message
	waitFor(t, "10 charged with their receipts sent, 4 charges running and 32 queued", func() bool {
		_, _, sent, _ := bl.counts()
		s := pool.Stats()
		// started: the running handlers are the 4 that wait, not a free
		// one still returning after its receipt was sent (then only 35
		// would wait, and the stop would have 35 charges in flight).
		ok := rt.Ready() && sent == free && bl.started.Load() == free+workers && s.Running == workers && s.Queued == queue
		if now := fmt.Sprintf("ready %t (joined %t, topics %t, settled %t, stuck %t), receipts sent %d, charges started %d, billing %+v, receipts %+v",
			rt.Ready(), rt.ready.joined.Load(), rt.ready.topicsOK.Load(), rt.ready.settled.Load(), rt.ready.stuck.any(),
			sent, bl.started.Load(), s, rt.classes.byName["receipts"].pool.Stats()); !ok && now != seen {
			t.Logf("waiting: %s", now) // the last of these is where a timeout stopped
			seen = now
		}
		return ok
	})
	cancel() // what signal.NotifyContext does at SIGTERM
	waitFor(t, "the stop begun", func() bool { return !rt.Ready() && !rt.life.accepting.Load() })
	bl.stopping.Store(true)
	close(bl.release)
	rep, err := wait()
	if err != nil {
		t.Fatalf("first Run: %v", err)
	}
	charged1, charges1, sent1, _ := bl.counts()
	bl.mu.Lock()
	inStop, refused := bl.acceptedInStop, len(bl.refused)
	firstRefusal := errors.Join(bl.refused[:min(1, len(bl.refused))]...)
	bl.mu.Unlock()
	t.Logf("first run: produced %d, charged %d (%d charges), receipts sent %d; stop: drain %s (timed out %v), drained %d, "+
		"receipts scheduled during the stop %d, refused %d (%v), snapshotted %d, suspensions %d, scheduled %d",
		produced, charged1, charges1, sent1, rep.Drain, rep.DrainTimedOut, rep.Drained, inStop, refused, firstRefusal,
		rep.Snapshotted, suspensions.Load(), rep.Scheduled)
	if n := suspensions.Load(); n != 0 {
		t.Errorf("the stop's refusals suspended a class %d times; a stop is not a dependency outage", n)
	}
	if refused != 0 {
		t.Errorf("%d receipts refused during the stop, first: %v; want each saved", refused, firstRefusal)
	}
	if rep.DrainTimedOut || rep.Drained != inFlight {
		t.Errorf("drain handled %d (timed out: %v, took %s), want the %d charges in flight, in time",
			rep.Drained, rep.DrainTimedOut, rep.Drain, inFlight)
	}
	if inStop != inFlight {
		t.Errorf("%d receipts scheduled during the stop, want %d (one per charge in flight)", inStop, inFlight)
	}
	if charged1 != free+inFlight || charges1 != charged1 {
		t.Errorf("first run charged %d customers %d times, want %d once each", charged1, charges1, free+inFlight)
	}
	if err := rt.Schedule(context.Background(), "receipts", &handoff.Message{ID: "late"}, time.Now()); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Schedule after Run returned: %v, want ErrNotRunning", err)
	}

	// The restart: the receipts saved during the stop are sent, the
	// rest of the invoices charged, each once.
	if newDisk {
		b.state = filepath.Join(t.TempDir(), "new.db")
		cfg.StatePath = b.state
	}
	rt2, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bl.rt.Store(rt2)
	wait2 := start(t, rt2, context.Background())
	var charged2, sent2 int
	var committed2 int64
	deadline := time.Now().Add(30 * time.Second)
	for charged2 != produced || sent2 != produced || committed2 != produced {
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: charged %d, sent %d, committed %d of %d after 30s; stats %+v", charged2, sent2, committed2, produced, rt2.Stats())
		}
		time.Sleep(5 * time.Millisecond) // the poll interval, not a wait for an event
		charged2, _, sent2, _ = bl.counts()
		committed2 = b.committed()
	}
	rep2 := stopAndWait(t, rt2, wait2)
	charged, charges, sent, sends := bl.counts()
	bl.mu.Lock()
	accepted := bl.accepted
	bl.mu.Unlock()
	t.Logf("after the restart: charged %d (%d charges, %d duplicates), receipts accepted %d, sent %d (%d sends, %d duplicates), committed %d; restored %d, delivered %d",
		charged, charges, charges-charged, accepted, sent, sends, sends-sent, b.committed(), rep2.Restored, rep2.Delivered)
	if charges != produced || sends != produced || accepted != produced {
		t.Errorf("produced %d: %d charges (%d duplicates), %d receipts accepted, %d sent; want %d of each",
			produced, charges, charges-charged, accepted, sends, produced)
	}
	if suspensions.Load() != 0 {
		t.Errorf("%d suspensions", suspensions.Load())
	}
	if newDisk && rep2.Restored < inFlight {
		t.Errorf("restored %d records from the changelog, want at least the %d receipts saved during the stop", rep2.Restored, inFlight)
	}
	assertCount(t, b.state, snapshot.BucketDelayed, 0)
	assertCount(t, b.state, snapshot.BucketPending, 0)
	assertCount(t, b.state, snapshot.BucketDead, 0)
}

// TestStopRefusalNotAnOutage: handlers that fail because the stop
// refuses them ([Runtime.Submit] returns ErrNotRunning once the stop has
// begun) do not trip the outage detector, and their attempts do not
// count: the drain does not end on a suspension, no message becomes a
// dead letter, and each is saved with its attempt count as it was and
// handled once after the restart.
func TestStopRefusalNotAnOutage(t *testing.T) {
	t.Parallel()
	state := t.TempDir() + "/s.db"
	const jobs, workers = 14, 2
	release := make(chan struct{})
	var rt atomic.Pointer[Runtime]
	var mu sync.Mutex
	done := map[string]int{}     // job ID -> times its audit record was submitted
	attempts := map[string]int{} // job ID -> the highest Message.Attempt seen
	var failed atomic.Int64
	logger, suspensions := countLogs(t, suspendedLog)
	cfg := Config{StatePath: state, DrainTimeout: 3 * time.Second, HardStopGrace: time.Second, Logger: logger,
		Classes: []Class{{Name: "jobs", Workers: workers, QueueSize: 16,
			Handler: func(ctx context.Context, m *handoff.Message) error {
				select {
				case <-release:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				mu.Lock()
				attempts[m.ID] = max(attempts[m.ID], m.Attempt)
				mu.Unlock()
				if err := rt.Load().Submit(ctx, "audit", &handoff.Message{ID: "audit/" + m.ID}); err != nil {
					failed.Add(1)
					return fmt.Errorf("jobs: audit %s: %w", m.ID, err)
				}
				mu.Lock()
				done[m.ID]++
				mu.Unlock()
				return nil
			}},
			{Name: "audit", Workers: 1, QueueSize: 64, Handler: func(context.Context, *handoff.Message) error { return nil }}}}
	r1, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rt.Store(r1)
	wait := start(t, r1, context.Background())
	waitFor(t, "running", r1.Ready)
	for i := range jobs {
		if err := r1.Submit(context.Background(), "jobs", &handoff.Message{ID: fmt.Sprintf("job-%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	p := r1.classes.byName["jobs"].pool
	waitFor(t, "2 jobs running, 12 queued", func() bool { s := p.Stats(); return s.Running == workers && s.Queued == jobs-workers })
	stopped := make(chan struct{})
	go func() { r1.Shutdown(context.Background()); close(stopped) }()
	waitFor(t, "the stop begun", func() bool { return !r1.Ready() && !r1.life.accepting.Load() })
	close(release)
	rep, err := wait()
	<-stopped
	if err != nil {
		t.Fatalf("first Run: %v", err)
	}
	t.Logf("first run: %d jobs, %d refused attempts; stop: drain %s (timed out %v), waiting %d, snapshotted %d, dead letters %d, retried %d, suspensions %d",
		jobs, failed.Load(), rep.Drain, rep.DrainTimedOut, rep.Waiting, rep.Snapshotted, rep.DeadLettered, rep.Retried, suspensions.Load())
	if n := suspensions.Load(); n != 0 {
		t.Errorf("the stop's refusals suspended the class %d times; a stop is not a dependency outage", n)
	}
	if rep.DeadLettered != 0 || rep.Retried != 0 {
		t.Errorf("%d dead letters, %d retries in place; a refusal by the stop is no attempt", rep.DeadLettered, rep.Retried)
	}
	if failed.Load() != jobs || rep.Snapshotted != jobs {
		t.Errorf("%d refused attempts, %d snapshotted; want each of the %d jobs refused once and saved", failed.Load(), rep.Snapshotted, jobs)
	}

	r2, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rt.Store(r2)
	wait2 := start(t, r2, context.Background())
	waitFor(t, "every job done", func() bool { mu.Lock(); defer mu.Unlock(); return len(done) == jobs })
	stopAndWait(t, r2, wait2)
	mu.Lock()
	defer mu.Unlock()
	for id, n := range done {
		if n != 1 || attempts[id] != 0 {
			t.Errorf("%s: done %d times, attempt %d; want once, attempt 0 (the stop's refusal is not counted)", id, n, attempts[id])
		}
	}
	if n := suspensions.Load(); n != 0 {
		t.Errorf("%d suspensions", n)
	}
	assertCount(t, state, snapshot.BucketPending, 0)
	assertCount(t, state, snapshot.BucketDead, 0)
}

// TestScheduleStopWindow: during the stop, Schedule (here from outside
// any handler) saves its message, due now for a time not after now, while
// Submit is refused; from the stop's snapshot on Schedule returns
// ErrNotRunning. After the restart each saved message runs once.
func TestScheduleStopWindow(t *testing.T) {
	t.Parallel()
	state := t.TempDir() + "/s.db"
	release := make(chan struct{})
	var mu sync.Mutex
	handled := map[string]int{}
	cfg := Config{StatePath: state, DrainTimeout: 3 * time.Second, HardStopGrace: time.Second, Logger: testLogger(t),
		Classes: []Class{{Name: "mail", Workers: 1, QueueSize: 4, Handler: func(ctx context.Context, m *handoff.Message) error {
			if m.ID == "block" {
				select {
				case <-release:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}
			mu.Lock()
			handled[m.ID]++
			mu.Unlock()
			return nil
		}}}}
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var atSnapshot error
	rt.state.beforeSnapshot = func(*snapshot.State) {
		atSnapshot = rt.Schedule(context.Background(), "mail", &handoff.Message{ID: "at-snapshot"}, time.Now())
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "running", rt.Ready)
	if err := rt.Submit(context.Background(), "mail", &handoff.Message{ID: "block"}); err != nil {
		t.Fatal(err)
	}
	p := rt.classes.byName["mail"].pool
	waitFor(t, "block running", func() bool { return p.Stats().Running == 1 })
	stopped := make(chan struct{})
	go func() { rt.Shutdown(context.Background()); close(stopped) }()
	waitFor(t, "the stop begun", func() bool { return !rt.Ready() && !rt.life.accepting.Load() })
	if err := rt.Submit(context.Background(), "mail", &handoff.Message{ID: "submitted"}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Submit during the stop: %v, want ErrNotRunning", err)
	}
	for id, at := range map[string]time.Time{"past": time.Now().Add(-time.Minute), "now": time.Now(), "later": time.Now().Add(50 * time.Millisecond)} {
		if err := rt.Schedule(context.Background(), "mail", &handoff.Message{ID: id}, at); err != nil {
			t.Errorf("Schedule %s during the stop: %v", id, err)
		}
	}
	if err := rt.Schedule(context.Background(), "nope", &handoff.Message{ID: "x"}, time.Now()); !errors.Is(err, ErrUnknownClass) {
		t.Errorf("Schedule to an unknown class during the stop: %v, want ErrUnknownClass", err)
	}
	close(release)
	rep, err := wait()
	<-stopped
	if err != nil {
		t.Fatalf("first Run: %v", err)
	}
	if !errors.Is(atSnapshot, ErrNotRunning) {
		t.Errorf("Schedule at the snapshot: %v, want ErrNotRunning", atSnapshot)
	}
	if rep.Scheduled != 3 || rep.Drained != 1 {
		t.Errorf("scheduled %d, drained %d; want 3 scheduled during the stop, block drained", rep.Scheduled, rep.Drained)
	}
	assertCount(t, state, snapshot.BucketDelayed, 3)

	rt2, wait2 := startNew(t, cfg)
	waitFor(t, "the scheduled messages handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) == 4 })
	stopAndWait(t, rt2, wait2)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{"block", "past", "now", "later"} {
		if handled[id] != 1 {
			t.Errorf("%s handled %d times, want once (all: %v)", id, handled[id], handled)
		}
	}
	assertCount(t, state, snapshot.BucketDelayed, 0)
}

// TestAdmissionCloseWaits: close refuses new calls at once and returns
// only once the calls admitted before it have left; before open nothing
// is admitted.
func TestAdmissionCloseWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a admission
		if a.enter() {
			t.Fatal("admitted before open")
		}
		a.open()
		if !a.enter() {
			t.Fatal("not admitted once open")
		}
		closed := make(chan struct{})
		go func() { a.close(); close(closed) }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("close returned with a call under way")
		default:
		}
		if a.enter() {
			t.Error("admitted while closing")
		}
		a.leave()
		synctest.Wait()
		select {
		case <-closed:
		default:
			t.Fatal("close did not return once the call left")
		}
		if a.enter() {
			t.Error("admitted after close")
		}
	})
}
