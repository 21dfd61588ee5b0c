package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// TestChangelogStopWriteFailsSameDisk stops an instance whose snapshot
// has interrupted, unstarted and submitted messages to save while the
// broker holds every Produce to the changelog topics unanswered: Run says
// the snapshot did not reach the changelog, and no offset is committed
// past the messages handled. The next instance starts on the same state
// file with the broker answering again: every produced and every
// submitted message is handled, none twice (the interrupted handlers
// recorded nothing).
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
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		if started.Add(1) > handledFirst {
			blocked.Add(1)
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
	committed1 := b.committed()
	if committed1 > int64(handled1) {
		t.Errorf("committed %d, past the %d handled", committed1, handled1)
	}
	t.Logf("stop with the changelog hung: committed %d of %d handled; %v; err %v", committed1, handled1, rep, err)

	// The broker answers again; the same disk, the same group.
	held.Store(false)
	want := produced + submitted
	rep2 := b.runUntilWith(int64(want-handled1), nil, nil)
	waitFor(t, "everything committed", func() bool { return b.committed() == int64(produced) })
	unique, total := b.counts()
	if unique != want || total != want {
		t.Errorf("produced %d and submitted %d: handled %d unique, %d in all (%d twice)", produced, submitted, unique, total, total-unique)
	}
	for i := range submitted {
		id := fmt.Sprintf("submitted-%d", i)
		b.mu.Lock()
		n := b.handled[id]
		b.mu.Unlock()
		if n != 1 {
			t.Errorf("%s handled %d times, want 1", id, n)
		}
	}
	if rep2.Repushed != submitted {
		t.Errorf("the restart re-pushed %d, want the %d submitted", rep2.Repushed, submitted)
	}
	t.Logf("restart on the same disk: repushed %d, restored %d", rep2.Repushed, rep2.Restored)
}
