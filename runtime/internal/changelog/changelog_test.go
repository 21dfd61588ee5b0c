package changelog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func cluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newClient(t testing.TB, c *kfake.Cluster, mod func(*Config)) *Client {
	t.Helper()
	cfg := Config{Brokers: c.ListenAddrs(), ClientID: "test", Group: "g", Log: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	cl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// metaClient returns a client of a cluster of its own whose topics
// (the meta topic) exist, and the test's timeout.
func metaClient(t *testing.T) (*Client, context.Context) {
	t.Helper()
	cl := newClient(t, cluster(t), nil)
	ctx := timeout(t)
	if err := cl.Ensure(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return cl, ctx
}

func timeout(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// describe returns each topic's partition count and cleanup.policy, as
// an admin sees them.
func describe(t *testing.T, c *kfake.Cluster, topics ...string) map[string]string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DisableClientMetrics())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := timeout(t)
	got := map[string]string{}
	md := kmsg.NewPtrMetadataRequest()
	cf := kmsg.NewPtrDescribeConfigsRequest()
	for _, tp := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(tp)
		md.Topics = append(md.Topics, rt)
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType = kmsg.ConfigResourceTypeTopic
		r.ResourceName = tp
		r.ConfigNames = []string{"cleanup.policy"}
		cf.Resources = append(cf.Resources, r)
	}
	mresp, err := md.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range mresp.Topics {
		got[*rt.Topic] = fmt.Sprintf("%d partitions", len(rt.Partitions))
		if rt.ErrorCode != 0 {
			got[*rt.Topic] = fmt.Sprintf("error %d", rt.ErrorCode)
		}
	}
	cresp, err := cf.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range cresp.Resources {
		for _, c := range r.Configs {
			if c.Value != nil {
				got[r.ResourceName] += ", " + c.Name + "=" + *c.Value
			}
		}
	}
	return got
}

func TestEnsure(t *testing.T) {
	t.Parallel()
	t.Run("creates", func(t *testing.T) {
		t.Parallel()
		c := cluster(t)
		cl := newClient(t, c, nil)
		ctx := timeout(t)
		inputs := map[string]int32{"orders": 3, "users": 1}
		for range 2 { // the second finds them all
			if err := cl.Ensure(ctx, inputs); err != nil {
				t.Fatal(err)
			}
		}
		got := describe(t, c, "g.orders.handoff-changelog", "g.users.handoff-changelog", "g.handoff-meta")
		want := map[string]string{
			"g.orders.handoff-changelog": "3 partitions, cleanup.policy=compact",
			"g.users.handoff-changelog":  "1 partitions, cleanup.policy=compact",
			"g.handoff-meta":             "1 partitions, cleanup.policy=compact",
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %q, want %q", k, got[k], v)
			}
		}
	})
	t.Run("race", func(t *testing.T) {
		t.Parallel()
		c := cluster(t)
		ctx := timeout(t)
		inputs := map[string]int32{"orders": 4, "users": 2, "items": 1}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			cl := newClient(t, c, nil)
			wg.Go(func() { errs[i] = cl.Ensure(ctx, inputs) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if got := describe(t, c, "g.orders.handoff-changelog")["g.orders.handoff-changelog"]; got != "4 partitions, cleanup.policy=compact" {
			t.Errorf("orders changelog: %s", got)
		}
	})
	t.Run("existing wrong", func(t *testing.T) {
		t.Parallel()
		// Made beforehand by hand: too few partitions, and not compacted.
		c := cluster(t, kfake.SeedTopics(2, "g.orders.handoff-changelog"))
		cl := newClient(t, c, nil)
		err := cl.Ensure(timeout(t), map[string]int32{"orders": 3})
		if err == nil {
			t.Fatal("no error")
		}
		for _, want := range []string{"g.orders.handoff-changelog has 2 partitions, fewer than the 3 of input topic orders", "cleanup.policy=delete"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if !errors.Is(err, ErrNotCompacted) {
			t.Errorf("error %v is not ErrNotCompacted", err)
		}
	})
	t.Run("more partitions", func(t *testing.T) {
		t.Parallel()
		c := cluster(t)
		admin := newClient(t, c, nil)
		if err := admin.Ensure(timeout(t), map[string]int32{"orders": 5}); err != nil {
			t.Fatal(err)
		}
		// The input shrank (recreated): the changelog has more, which is fine.
		if err := newClient(t, c, nil).Ensure(timeout(t), map[string]int32{"orders": 3}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestNewChecks(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Replication: -1, Timeout: -1})
	for _, want := range []string{"no brokers", "no group", "replication", "timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
}

// TestTopicAllocatesOnce: Send names the changelog topic of every record
// it queues; the name is made once per input topic, not per record.
func TestTopicAllocatesOnce(t *testing.T) {
	cl, err := New(Config{Brokers: []string{"127.0.0.1:1"}, Group: "g"}) // no I/O
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got := cl.Topic("orders"); got != "g.orders.handoff-changelog" {
		t.Fatalf("Topic(orders) = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = cl.Topic("orders") }); n != 0 {
		t.Errorf("Topic allocates %.0f times a call once the name is known, want 0", n)
	}
}
