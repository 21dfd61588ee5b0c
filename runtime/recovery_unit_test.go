package runtime

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/pool"
	"github.com/handoff-go/handoff/runtime/internal/hold"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestRecoveryRun runs the start's recovery on a real state file and a
// real ordered pool, without a Runtime: pending records are pushed in
// save order, one of a class no longer configured becomes a dead letter,
// a key with a dead letter is restored blocked and one with parked
// records and no blocker releasing, and the report counts them.
func TestRecoveryRun(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	rec := func(id, class, key string) snapshot.Record {
		return snapshot.Record{Message: handoff.Message{ID: id, Class: class, Key: []byte(key)}}
	}
	store, state := openState(t, func(path string) {
		snapshottest.SeedPending(t, path, rec("p1", "orders", "x"), rec("gone", "retired", "x"), rec("p2", "orders", "y"))
		snapshottest.SeedDead(t, path, rec("dead", "orders", "blocked"))
		snapshottest.SeedParked(t, path, "orders", []byte("free"), rec("k1", "orders", "free"))
	})
	var mu sync.Mutex
	var ran []string
	p, err := pool.New(pool.Config[*item]{Name: "orders", Workers: 1, QueueSize: 16, Ordered: true, KeyFunc: itemKey,
		Handler: func(_ context.Context, it *item) error {
			mu.Lock()
			ran = append(ran, it.env().ID)
			mu.Unlock()
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second, context.Canceled)
	var rel releases // not open: the restored release does not start here
	c := &class{cfg: Class{Name: "orders", Ordered: true}, pool: p}
	c.hold = hold.New(hold.Config[*item]{Class: "orders", Pool: p, Log: log, Rewind: func(time.Time) {}, Backoff: probeBackoff})
	c.keys = newOrderedKeys(keysConfig{class: "orders", pool: p, state: state, deletes: &snapshot.DoneQueue{}, releases: &rel,
		counts: &c.stats, log: log})
	var accepting atomic.Bool
	tl := &tally{classes: []*class{c}}
	fail := newFailures(failuresConfig{state: state, tally: tl, classes: map[string]*class{"orders": c}, accepting: &accepting, log: log})
	v := recovery{state: state, classes: map[string]*class{"orders": c}, order: []*class{c}, log: log, orphans: &orphans{}, fail: fail}
	rep := &Report{}
	if err := v.run(t.Context(), rep); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "re-pushed messages run", func() bool { mu.Lock(); defer mu.Unlock(); return len(ran) == 2 })
	mu.Lock()
	if !slices.Equal(ran, []string{"p1", "p2"}) {
		t.Errorf("ran %v, want [p1 p2]", ran)
	}
	mu.Unlock()
	_, gone, err := store.DeadByMessageID("gone")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Repushed != 2 || rep.UnknownClass != 1 || rep.BlockedKeys != 2 || !gone || tl.total(evDeadLettered) != 1 {
		t.Errorf("report %+v, orphan gone a dead letter %v, dead-lettered %d; want 2 re-pushed, 1 unknown class, 2 blocked keys, gone a dead letter, 1",
			rep, gone, tl.total(evDeadLettered))
	}
	if c.keys.free("blocked") || c.keys.free("free") || !c.keys.free("x") {
		t.Error("key states not restored: want blocked and free (releasing) not free, x free")
	}
}
