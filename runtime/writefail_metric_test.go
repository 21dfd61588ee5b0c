package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
)

// TestStateWriteFailuresCounted: a write the state file refuses (a full
// disk) and one the changelog refuses after the file committed are each
// counted in handoff_state_write_failures_total, by target, so that an
// alert sees what before showed only as ERROR lines.
func TestStateWriteFailuresCounted(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	refuse, _ := refuseChangelogWrites(b, "orders")
	reg := prometheus.NewRegistry()
	cfg := b.config(func(context.Context, *handoff.Message) error {
		return handoff.Permanent(errors.New("bad order"))
	}, func(c *Class) { c.Workers = 1 })
	cfg.Registerer = reg
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var diskFull atomic.Bool
	rt.state.beforeWrite = func(string, *item) error {
		if diskFull.Load() {
			return errDiskFull
		}
		return nil
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "ready", rt.Ready)
	failures := func(target string) float64 {
		v, _ := metricValue(t, reg, "handoff_state_write_failures_total", "target", target)
		return v
	}
	if f, c := failures("file"), failures("changelog"); f != 0 || c != 0 {
		t.Fatalf("failures before any write: file %v, changelog %v", f, c)
	}

	diskFull.Store(true)
	b.produce(1) // its dead letter's write fails in the file
	waitFor(t, "a file write failure counted", func() bool { return failures("file") > 0 })
	diskFull.Store(false)
	refuse.Store(true)
	b.produce(1) // its dead letter commits to the file, not to the changelog
	waitFor(t, "a changelog write failure counted", func() bool { return failures("changelog") > 0 })
	refuse.Store(false)
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
}

// refuseChangelogWrites makes b's broker answer every Produce to the
// changelog of topic, while the returned flag is set, with an
// authorization error: the writes fail at once. refused counts them.
func refuseChangelogWrites(b *bundle, topic string) (refuse *atomic.Bool, refused *atomic.Int64) {
	refuse, refused = new(atomic.Bool), new(atomic.Int64)
	cl := b.group + "." + topic + ".handoff-changelog"
	c := b.broker.Cluster()
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !refuse.Load() {
			return nil, nil, false
		}
		preq := req.(*kmsg.ProduceRequest)
		id := c.TopicInfo(cl)
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
	return refuse, refused
}
