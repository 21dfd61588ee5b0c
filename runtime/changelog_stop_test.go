package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/snapshot"
)

// TestChangelogStopWriteFailsSameDisk stops an instance whose snapshot
// has interrupted, unstarted and submitted messages to save while the
// broker holds every Produce to the changelog topics unanswered: Run says
// the snapshot did not reach the changelog, and no offset is committed
// past the messages handled. The next instance starts on the same state
// file with the broker answering again: every produced and every
// submitted message is handled, none twice (the interrupted handlers
// recorded nothing) but those handled behind an unfinished message of
// their partition, whose offsets the stop could not commit: Kafka
// delivers them again, once.
func TestChangelogStopWriteFailsSameDisk(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	produced := b.produce(100)
	const submitted = 5
	const handledFirst = 50

	// held, while set, makes the broker read the changelog's Produce
	// requests and never answer them; the other topics are answered.
	var held atomic.Bool
	var hung atomic.Int64
	cl := b.group + ".orders.handoff-changelog"
	b.broker.Cluster().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.broker.Cluster().KeepControl()
		if !held.Load() {
			return nil, nil, false
		}
		// Produce v13 (franz-go) names the topic by its ID (KIP-516).
		id := b.broker.Cluster().TopicInfo(cl)
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if strings.HasSuffix(tp.Topic, ".handoff-changelog") || (id != nil && tp.TopicID == id.TopicID) {
				hung.Add(1)
				return nil, nil, true // read, never answered
			}
		}
		return nil, nil, false
	})

	var started, blocked atomic.Int64
	var blockedMu sync.Mutex
	var blockedIDs []string
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		if started.Add(1) > handledFirst {
			blocked.Add(1)
			blockedMu.Lock()
			blockedIDs = append(blockedIDs, m.ID)
			blockedMu.Unlock()
			<-ctx.Done() // interrupted by the hard stop, records nothing
			return context.Cause(ctx)
		}
		b.record(m)
		return nil
	}, func(c *Class) { c.QueueSize = 256 }) // room for the submitted ones
	cfg.DrainTimeout = 200 * time.Millisecond
	cfg.HardStopGrace = 200 * time.Millisecond
	cfg.ChangelogTimeout = time.Second
	rt, wait := startNew(t, cfg)
	c := rt.classes.byName["orders"]
	waitFor(t, "4 handlers blocked, the rest queued", func() bool {
		s := c.pool.Stats()
		return blocked.Load() == 4 && s.Queued == produced-handledFirst-4
	})
	for i := range submitted {
		m := &handoff.Message{ID: fmt.Sprintf("submitted-%d", i), Key: fmt.Appendf(nil, "sub-%d", i), Value: []byte("submitted")}
		if err := rt.Submit(context.Background(), "orders", m); err != nil {
			t.Fatalf("submit %s: %v", m.ID, err)
		}
	}
	waitFor(t, "the submitted messages queued", func() bool {
		return c.pool.Stats().Queued == produced-handledFirst-4+submitted
	})
	held.Store(true)
	rt.Shutdown(context.Background())
	rep, err := wait()
	handled1, _ := b.counts()
	if !errors.Is(err, snapshot.ErrChangelog) || !strings.Contains(fmt.Sprint(err), "not written to the changelog") {
		t.Errorf("Run's error %v; want the snapshot's changelog error (snapshot.ErrChangelog)", err)
	}
	// The Kafka messages were taken back out of the file (Kafka delivers
	// them again); the submitted ones stay in it for the next start.
	assertCount(t, b.state, snapshot.BucketPending, submitted)
	if hung.Load() == 0 {
		t.Errorf("no changelog write reached the hung broker")
	}
	if handled1 != handledFirst {
		t.Errorf("handled %d before the stop, want %d", handled1, handledFirst)
	}
	// A message handled behind an unfinished one of its partition is not
	// committed (the commit never passes a message neither done nor
	// saved): Kafka delivers it again, but the stop's progress record
	// (in the file, though its changelog write failed) says it is done,
	// so the restart on the same disk skips it: it runs once.
	offs := b.committedByPartition()["orders"]
	committed1 := devbroker.Sum(map[string]map[int]int64{"orders": offs})
	again := map[string]bool{}
	b.mu.Lock()
	for id := range b.handled {
		var p int
		var o int64
		if _, err := fmt.Sscanf(id, "orders/%d/%d", &p, &o); err != nil {
			t.Fatalf("message ID %q: %v", id, err)
		}
		if o >= offs[p] {
			again[id] = true
		}
	}
	b.mu.Unlock()
	if committed1+int64(len(again)) != int64(handled1) {
		t.Errorf("committed %d and %d handled past the commit, want the %d handled", committed1, len(again), handled1)
	}
	blockedMu.Lock()
	t.Logf("stop with the changelog hung: committed %v (%d) of %d handled, %d handled behind an unfinished message (interrupted: %v); %v; err %v",
		offs, committed1, handled1, len(again), blockedIDs, rep, err)
	blockedMu.Unlock()

	// The broker answers again; the same disk, the same group.
	held.Store(false)
	want := produced + submitted
	rep2 := b.runUntilWith(int64(want-handled1), nil, nil)
	waitFor(t, "everything committed", func() bool { return b.committed() == int64(produced) })
	unique, total := b.counts()
	if unique != want || total != want {
		t.Errorf("produced %d and submitted %d: handled %d unique, %d in all (%d twice; %d handled behind an unfinished message at the stop)",
			produced, submitted, unique, total, total-unique, len(again))
	}
	b.mu.Lock()
	for id, n := range b.handled {
		if n != 1 {
			t.Errorf("%s handled %d times, want 1 (handled behind an unfinished message at the stop: %v)", id, n, again[id])
		}
	}
	b.mu.Unlock()
	if rep2.Repushed != submitted {
		t.Errorf("the restart re-pushed %d, want the %d submitted", rep2.Repushed, submitted)
	}
	t.Logf("restart on the same disk: repushed %d, restored %d", rep2.Repushed, rep2.Restored)
}

// committedByPartition returns the group's committed offsets by topic
// and partition.
func (b *bundle) committedByPartition() map[string]map[int]int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o := devbroker.NewOffsets(b.broker.Addrs())
	defer o.Close()
	off, err := o.Committed(ctx, b.group, b.topics)
	if err != nil {
		b.t.Fatal(err)
	}
	return off
}
