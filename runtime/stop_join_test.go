package runtime

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/internal/testio"
)

// TestStopWhileMemberJoins: instance A stops while member C joins the
// group and the rebalance stays in PreparingRebalance for seconds, because
// a third member, S, is slow to rejoin (a plain franz-go consumer busy
// with its poll, rebalances blocked until it allows them: a consumer busy
// with its batch, a member waiting out its revoke's handlers). A has
// rejoined and its JoinGroup is parked in the broker; the messages it
// handled meanwhile are not committed yet. A's stop must commit them: the
// broker accepts a commit in A's current generation while the group
// prepares its rebalance. Before, franz-go held every commit until the
// join and the sync were done, so A's interval commits failed with
// context deadline exceeded, its final commit did not finish in 2s, Run
// returned ErrCommit (rental exits 1) and C handled again everything A
// handled during the join. Issue 44, item 1.
func TestStopWhileMemberJoins(t *testing.T) {
	t.Parallel()
	classicOnly(t, "a stop while the group waits in PreparingRebalance for a member to rejoin")
	const first, during = 100, 200 // per topic: before C joins, while it joins
	b := setup(t, 4, "orders")
	cluster := b.broker.Cluster()
	held := testio.JoinHeldMember(t, b.broker.Addrs(), b.group, kgo.SessionTimeout(6*time.Second))

	var byA atomic.Int64
	cfgA := b.config(func(_ context.Context, m *handoff.Message) error {
		b.record(m)
		byA.Add(1)
		return nil
	}, nil)
	// A is a dynamic member (no Instance): it leaves the group at its
	// stop, so C takes its partitions at once.
	commitDone := make(chan struct{})
	cfgA.Logger = slog.New(phaseWatch{testLogger(t).Handler(), "commit", sync.OnceFunc(func() { close(commitDone) })})
	rtA, err := newRuntime(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	ctxA, stopA := context.WithCancel(context.Background())
	defer stopA()
	waitA := start(t, rtA, ctxA)
	waitFor(t, "A owns every partition of orders", func() bool {
		g := rtA.kafka.gen.Load()
		gi := cluster.GroupInfo(b.group)
		return g != nil && len(g.trackers()) == 4 && gi != nil && gi.State == "Stable" && len(gi.Members) == 2
	})
	produced := b.produce(first)
	waitFor(t, "A handled the first messages", func() bool { return byA.Load() == int64(produced) })
	var membersA []string // A's member ID
	for _, m := range cluster.GroupInfo(b.group).Members {
		if m.MemberID != held.MemberID() {
			membersA = append(membersA, m.MemberID)
		}
	}
	if len(membersA) != 1 {
		t.Fatalf("group members before C joins: %v, want A and S", cluster.GroupInfo(b.group).Members)
	}

	// S holds the rebalance; C joins; A notices and rejoins.
	var mu sync.Mutex
	var joined []string
	cluster.ControlKey(int16(kmsg.JoinGroup), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if req := kreq.(*kmsg.JoinGroupRequest); req.Group == b.group {
			mu.Lock()
			joined = append(joined, req.MemberID)
			mu.Unlock()
		}
		return nil, nil, false
	})
	held.Hold()
	rtC, waitC := b.instance("c", b.config(func(_ context.Context, m *handoff.Message) error { b.record(m); return nil }, nil))
	waitFor(t, "A rejoined, the rebalance waiting for S", func() bool {
		mu.Lock()
		defer mu.Unlock()
		gi := cluster.GroupInfo(b.group)
		return slices.Contains(joined, membersA[0]) && gi != nil && gi.State == "PreparingRebalance"
	})
	// While the group waits for S: A (cooperative, franz-go) keeps its
	// partitions and handles these; on kafka-go (eager) its generation
	// has ended and nobody handles them before the rebalance is over.
	produced += b.produce(during)
	waitFor(t, "A handled what it fetches", func() bool {
		return byA.Load() == int64(produced) || rtA.kafka.fetchingGen() == nil
	})
	handledByA := byA.Load()

	began := time.Now()
	stopA()
	doneA := make(chan struct{})
	go func() {
		// S rejoins once A's Run returned, or longer than a commit may
		// take after A's stop has passed its commit phase (A's leave
		// waits for its join in flight): the rebalance outlasts any
		// commit A's stop makes. Then C takes A's partitions.
		select {
		case <-commitDone:
		case <-time.After(30 * time.Second):
		}
		select {
		case <-doneA:
		case <-time.After(commitTimeout + 500*time.Millisecond):
		}
		held.Release()
	}()
	repA, errA := waitA()
	close(doneA)
	if errA != nil {
		t.Errorf("A's stop overlapping the rebalance was not clean: %v", errA)
	}
	tookA := time.Since(began)

	waitFor(t, "C handled the rest", func() bool {
		unique, _ := b.counts()
		return unique == produced
	})
	waitFor(t, "everything committed", func() bool { return b.committed() == int64(produced) })
	repC := shutdownAndWait(t, rtC, waitC)

	unique, total := b.counts()
	t.Logf("produced %d; A handled %d (%d before its stop), its stop took %s (commit %s, leave %s); C handled %d; handled %d distinct, duplicates %d; committed %d",
		produced, repA.Succeeded, handledByA, tookA.Round(time.Millisecond), repA.Commit.Round(time.Millisecond), repA.Leave.Round(time.Millisecond),
		repC.Succeeded, unique, total-unique, b.committed())
	if repA.Commit >= commitTimeout {
		t.Errorf("A's final commit took %s, the whole of its %s", repA.Commit, commitTimeout)
	}
	// Everything A handled was committed by its stop: C handles none of
	// it again. A rebalance promises at least once; allow a few.
	if dup := total - unique; dup > 5 {
		t.Errorf("%d messages handled twice, want at most a few", dup)
	}
	if unique != produced {
		t.Errorf("handled %d distinct messages of %d", unique, produced)
	}
}

// phaseWatch is a slog handler that calls done when the stop logs the
// end of phase.
type phaseWatch struct {
	slog.Handler
	phase string
	done  func()
}

func (h phaseWatch) Enabled(context.Context, slog.Level) bool { return true }

func (h phaseWatch) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "stop phase done" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "phase" && a.Value.String() == h.phase {
				h.done()
				return false
			}
			return true
		})
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h phaseWatch) WithAttrs(as []slog.Attr) slog.Handler {
	return phaseWatch{h.Handler.WithAttrs(as), h.phase, h.done}
}

func (h phaseWatch) WithGroup(name string) slog.Handler {
	return phaseWatch{h.Handler.WithGroup(name), h.phase, h.done}
}
