package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// TestStopBoundedWhenBrokerHangs: with a broker that stops answering
// (commit, leave, fetch, heartbeat all hang), the stop still ends within
// DrainTimeout + HardStopGrace plus its fixed margin,
// and reports that the final commit failed; with LocalStateOnly it saves
// what is left. With the changelog the snapshot cannot reach it either:
// its Kafka messages are taken back out of the file, left uncommitted for
// Kafka to deliver again, and the stop stays bounded.
func TestStopBoundedWhenBrokerHangs(t *testing.T) {
	t.Parallel()
	for _, local := range []bool{true, false} {
		t.Run(fmt.Sprintf("local=%v", local), func(t *testing.T) {
			t.Parallel()
			testStopBoundedWhenBrokerHangs(t, local)
		})
	}
}

func testStopBoundedWhenBrokerHangs(t *testing.T, local bool) {
	b := setup(t, 2, "orders")
	produced := b.produce(100)
	var n, blocked atomic.Int64
	half := make(chan struct{})
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		if n.Add(1) == int64(produced/2) {
			close(half)
		}
		if n.Load() > int64(produced/2) {
			blocked.Add(1)
			<-ctx.Done()
			return context.Cause(ctx)
		}
		return nil
	}, nil)
	cfg.DrainTimeout = 200 * time.Millisecond
	cfg.HardStopGrace = 200 * time.Millisecond
	cfg.LocalStateOnly = local
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	<-half
	// Something to save: a handler past the half is running (the rest of
	// the records may still be on their way when the half is reached).
	waitFor(t, "a handler past the half", func() bool { return blocked.Load() > 0 })
	// An eager session (kafka-go) starts fetching its partitions just
	// before it publishes its generation.
	waitFor(t, "the generation", func() bool { return rt.kafka.gen.Load() != nil })
	// From now on the broker reads requests and never answers.
	b.broker.Cluster().Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		b.broker.Cluster().KeepControl()
		return nil, nil, true
	})
	gen := rt.kafka.gen.Load()
	trs := gen.trackers()
	begin := time.Now()
	rt.Shutdown(context.Background())
	rep, err := wait()
	took := time.Since(begin)
	// Whatever the stop did not settle, nothing settles any more: each
	// such offset is counted abandoned, so that the generation's revoke
	// at the leave (still running against the hung broker) does not wait
	// RevokeTimeout for it past the stop.
	for _, tr := range trs {
		if n := tr.inFlight(); n != 0 {
			t.Errorf("%s: %d offsets neither settled nor abandoned after the stop", tr.partitionName(), n)
		}
	}
	// The final commit fails against the hung broker, unless the member
	// lost its generation first (franz-go's session may end during the
	// snapshot's wait for the changelog): then there is nothing to commit
	// through, and the stop says so in a warning only.
	select {
	case <-gen.ended:
	default:
		if !errors.Is(err, ErrCommit) {
			t.Errorf("want ErrCommit, got %v", err)
		}
	}
	// The bound: drain + grace + fixed margin (reader close, commit,
	// leave: about 4.1s here) + snapshot. 10s of slack for a loaded
	// machine; a hang would be unbounded.
	limit := cfg.DrainTimeout + cfg.HardStopGrace + cfg.FetchMaxWait + time.Second + commitTimeout + leaveTimeout + rep.Snapshot + 10*time.Second
	if took > limit {
		t.Errorf("stop took %s, bound %s", took, limit)
	}
	switch {
	case local && rep.Snapshotted == 0:
		t.Errorf("nothing saved: %v", rep)
	case !local:
		if rep.Snapshotted != 0 || !errors.Is(err, snapshot.ErrChangelog) {
			t.Errorf("saved %d against a hung broker, err %v; want none saved and the changelog's error", rep.Snapshotted, err)
		}
		assertCount(t, b.state, snapshot.BucketPending, 0)
	}
	t.Logf("stop against a hung broker: %s (quiesce %s, commit %s, leave %s)", took.Round(time.Millisecond),
		rep.Quiesce.Round(time.Millisecond), rep.Commit.Round(time.Millisecond), rep.Leave.Round(time.Millisecond))
}

// TestStopIdleBounded: a stop with empty pools (everything handled and
// committed) takes the fixed part of the stop only: no drain, no hard
// stop, a final commit with nothing to commit and the leave. On franz-go a
// dynamic member leaves the group; a static one (Instance set) does not.
// The bound asserted is the stop's budget; the figures are logged.
func TestStopIdleBounded(t *testing.T) {
	t.Parallel()
	for _, static := range []bool{false, true} {
		t.Run(map[bool]string{false: "dynamic", true: "static"}[static], func(t *testing.T) {
			t.Parallel()
			b := setup(t, 4, "orders")
			produced := b.produce(200)
			var handled atomic.Int64
			cfg := b.config(func(context.Context, *handoff.Message) error { handled.Add(1); return nil }, nil)
			if static {
				cfg.Instance = "idle-0"
			}
			rt, wait := startNew(t, cfg)
			waitFor(t, "everything handled", func() bool { return handled.Load() == int64(produced) })
			waitFor(t, "everything committed", func() bool { return b.committed() == int64(produced) })
			// And counted: the pool counts a success after its result
			// callback, which settles the offset, so a commit can come
			// first; one counted after the stop began would be drained.
			waitFor(t, "the pool idle", func() bool {
				s := rt.classes.order[0].pool.Stats()
				return s.Running == 0 && s.Queued == 0 && s.Succeeded == uint64(produced)
			})
			rep, took := timedStop(t, rt, wait)
			if took > rt.cfg.stopBudget() {
				t.Errorf("idle stop took %s, budget %s", took, rt.cfg.stopBudget())
			}
			if rep.Snapshotted != 0 || rep.Drained != 0 {
				t.Errorf("idle stop drained %d, saved %d", rep.Drained, rep.Snapshotted)
			}
			t.Logf("%s idle stop: %s (quiesce %s, drain %s, commit %s, leave %s)", rt.cfg.Client, took.Round(time.Millisecond),
				rep.Quiesce.Round(time.Millisecond), rep.Drain.Round(time.Millisecond), rep.Commit.Round(time.Millisecond), rep.Leave.Round(time.Millisecond))
		})
	}
}
