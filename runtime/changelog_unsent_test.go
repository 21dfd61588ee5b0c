package runtime

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
)

// TestChangelogUnsentDeletesResent: the records of re-pushed saved
// messages that are done are deleted while the changelog refuses writes,
// so their tombstones are kept as unsent in the state file. No message
// waits for them (the done messages have no offset to commit), yet once
// the changelog takes writes again they must reach it: the next owner of
// the partition, on an empty disk, must not run those messages again.
func TestChangelogUnsentDeletesResent(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	produced := b.produceValues("orders", "k", "a", "b", "c", "d", "e")

	// refuse, while set, answers every Produce to the changelog topic
	// with an authorization error: the writes fail at once.
	var refuse atomic.Bool
	var refused atomic.Int64
	cl := b.group + ".orders.handoff-changelog"
	b.broker.Cluster().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.broker.Cluster().KeepControl()
		if !refuse.Load() {
			return nil, nil, false
		}
		preq := req.(*kmsg.ProduceRequest)
		id := b.broker.Cluster().TopicInfo(cl)
		mine := false
		for _, tp := range preq.Topics {
			if tp.Topic == cl || (id != nil && tp.TopicID == id.TopicID) {
				mine = true
			}
		}
		if !mine {
			return nil, nil, false
		}
		refused.Add(1)
		resp := preq.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range preq.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
			for _, pp := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = pp.Partition
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	cfg := func(h handoff.HandlerFunc) Config {
		cfg := b.config(h, func(c *Class) { c.Workers = 1 })
		cfg.DrainTimeout = 50 * time.Millisecond
		cfg.HardStopGrace = time.Second
		cfg.ChangelogTimeout = time.Second
		return cfg
	}

	// The first run saves all five, in the file and the changelog.
	rt1, wait1 := startNew(t, cfg(func(ctx context.Context, m *handoff.Message) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}))
	snapshotAll(t, rt1, wait1, produced)

	// The second run, on the same disk, runs them while the changelog
	// refuses writes: their records' deletes reach the file only.
	refuse.Store(true)
	cfg2 := cfg(func(ctx context.Context, m *handoff.Message) error { b.record(m); return nil })
	log, failed := countLogs(t, "records of done messages not deleted; they will run again")
	cfg2.Logger = log
	rt2, wait2 := startNew(t, cfg2)
	waitFor(t, "the five handled", func() bool {
		unique, _ := b.counts()
		return unique == produced
	})
	waitFor(t, "their deletes refused by the changelog", func() bool { return failed.Load() > 0 })
	refuse.Store(false)
	stopAndWait(t, rt2, wait2)
	if refused.Load() == 0 {
		t.Fatal("no changelog write was refused")
	}

	// The next owner starts on an empty disk.
	b.state = filepath.Join(t.TempDir(), "new-pod.db")
	log3, restored := countLogs(t, "partition state restored")
	cfg3 := cfg(func(ctx context.Context, m *handoff.Message) error { b.record(m); return nil })
	cfg3.Logger = log3
	rt3, wait3 := startNew(t, cfg3)
	waitFor(t, "the partition restored", func() bool { return restored.Load() == 1 })
	rep3 := stopAndWait(t, rt3, wait3)
	if rep3.Repushed != 0 {
		t.Errorf("the next owner re-pushed %d messages done already", rep3.Repushed)
	}
	if unique, total := b.counts(); total != unique {
		t.Errorf("handled %d unique, %d in all", unique, total)
	}
}
