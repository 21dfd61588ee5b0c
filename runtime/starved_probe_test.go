package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// starvedClass is a class "db" that ends up suspended with its probe
// armed and nothing ready to start: message "a" fails recoverably and
// waits out a retry backoff of backoff; message "b" trips the suspension
// (handoff.Unavailable), then fails permanently as the probe and becomes
// a dead letter, so the next probe finds only "a", not ready.
type starvedClass struct {
	calls   atomic.Int64 // handler calls
	stopped atomic.Bool  // set by the test when the stop begins
	late    atomic.Int64 // handler calls after that
}

func (s *starvedClass) class(queue int, backoff time.Duration) Class {
	return Class{Name: "db", Workers: 1, QueueSize: queue,
		Retry:   RetryPolicy{MaxAttempts: 5, InitialBackoff: backoff, MaxBackoff: backoff},
		Suspend: SuspendPolicy{ProbeBackoff: time.Millisecond, ProbeMaxBackoff: 2 * time.Millisecond},
		Handler: func(ctx context.Context, m *handoff.Message) error {
			n := s.calls.Add(1)
			if s.stopped.Load() {
				s.late.Add(1)
			}
			switch {
			case m.ID == "a":
				return errors.New("flaky")
			case n <= 2:
				return handoff.Unavailable(errors.New("database down"))
			default:
				return handoff.Permanent(errors.New("bad message"))
			}
		}}
}

// starve submits "a", waits for it to back off, submits "b" and waits
// for the suspension to starve: "b" a dead letter, "a" waiting.
func (s *starvedClass) starve(t *testing.T, rt *Runtime) {
	t.Helper()
	c := rt.classes.byName["db"]
	if err := rt.Submit(context.Background(), "db", &handoff.Message{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a backing off", func() bool { return c.pool.Stats().Waiting == 1 })
	if err := rt.Submit(context.Background(), "db", &handoff.Message{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b a dead letter", func() bool { return c.count(evDeadLettered) == 1 })
	if st := c.hold.Stats(); st.State != HoldSuspended {
		t.Fatalf("class db is %s, want suspended", st.State)
	}
}

// TestSchedulerSkipsStarvedHeldClass: the scheduler does not wait on the
// full held pool of a suspended class whose probe found nothing ready: a
// due message of that class stays in the state file, and other classes'
// delayed messages are delivered on time. The ordered class "db" gets
// there with m1 of key K running (slow), m0 of key J tripping the
// suspension (Unavailable) and failing permanently as the probe, and
// m2, m3 and m4 queued behind K meanwhile: full, and none ready.
func TestSchedulerSkipsStarvedHeldClass(t *testing.T) {
	t.Parallel()
	state := t.TempDir() + "/s.db"
	release := make(chan struct{})
	running := make(chan struct{})
	probing, fail := make(chan struct{}), make(chan struct{})
	var m0 atomic.Int64
	db := Class{Name: "db", Workers: 2, QueueSize: 3, Ordered: true,
		Suspend: SuspendPolicy{ProbeBackoff: time.Millisecond, ProbeMaxBackoff: 2 * time.Millisecond},
		Handler: func(ctx context.Context, m *handoff.Message) error {
			switch m.ID {
			case "m0":
				if m0.Add(1) == 1 {
					return handoff.Unavailable(errors.New("database down"))
				}
				close(probing)
				<-fail
				return handoff.Permanent(errors.New("bad message"))
			case "m1":
				close(running)
				select {
				case <-release:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}
			return nil
		}}
	got := make(chan string, 4)
	other := Class{Name: "other", Workers: 1, QueueSize: 4, Handler: func(ctx context.Context, m *handoff.Message) error {
		got <- m.ID
		return nil
	}}
	rt, wait := startNew(t, Config{StatePath: state, Classes: []Class{db, other}, Logger: testLogger(t),
		DrainTimeout: 100 * time.Millisecond, HardStopGrace: time.Second})
	waitFor(t, "running", rt.Ready)
	c := rt.classes.byName["db"]
	submit := func(id, key string) {
		t.Helper()
		if err := rt.Submit(context.Background(), "db", &handoff.Message{ID: id, Key: []byte(key)}); err != nil {
			t.Fatal(err)
		}
	}
	submit("m1", "K")
	<-running
	submit("m0", "J")
	<-probing // m0 tripped the suspension and runs again as the probe
	submit("m2", "K")
	submit("m3", "K")
	submit("m4", "K")
	close(fail)
	waitFor(t, "m0 a dead letter", func() bool { return c.count(evDeadLettered) == 1 })
	if st := c.hold.Stats(); st.State != HoldSuspended {
		t.Fatalf("class db is %s, want suspended", st.State)
	}
	now := time.Now()
	if err := rt.Schedule(context.Background(), "db", &handoff.Message{ID: "db-later", Key: []byte("L")}, now.Add(20*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := rt.Schedule(context.Background(), "other", &handoff.Message{ID: "other-later"}, now.Add(40*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-got:
		if id != "other-later" {
			t.Errorf("class other handled %s", id)
		}
	case <-time.After(10 * time.Second):
		t.Error("the other class's delayed message was not delivered while class db is suspended and full")
	}
	if st := c.pool.Stats(); st.Queued != 3 {
		t.Errorf("class db's pool queues %d, want its 3 (db-later stays in the state file)", st.Queued)
	}
	close(release)
	stopAndWait(t, rt, wait)
}

// TestDrainSkipsStarvedHeldClass: a stop neither waits for a suspended
// class whose probe found nothing ready nor runs its message as a probe
// when that message's retry falls due during the drain: the held class
// is idle for the drain, and its message is saved with its attempt.
func TestDrainSkipsStarvedHeldClass(t *testing.T) {
	t.Parallel()
	state := t.TempDir() + "/s.db"
	var db starvedClass
	rt, wait := startNew(t, Config{StatePath: state, Classes: []Class{db.class(4, 300*time.Millisecond)}, Logger: testLogger(t),
		DrainTimeout: 5 * time.Second, HardStopGrace: time.Second})
	waitFor(t, "running", rt.Ready)
	db.starve(t, rt)
	db.stopped.Store(true)
	rep := stopAndWait(t, rt, wait)
	if n := db.late.Load(); n != 0 {
		t.Errorf("%d handler calls during the stop, want 0 (a probe ran)", n)
	}
	if rep.Snapshotted != 1 || rep.Waiting != 1 {
		t.Errorf("snapshotted %d, waiting %d; want a saved while waiting out its backoff", rep.Snapshotted, rep.Waiting)
	}
}
