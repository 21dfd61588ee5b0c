package runtime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
)

// The share-class tests run on franz-go alone: kafka-go has no share
// groups, and New refuses a share class on it (TestShareRefusals).

// shareOnly skips the test on the kafka-go run.
func shareOnly(t testing.TB) {
	t.Helper()
	onlyClient(t, ClientFranzGo, "share groups (Class.ShareGroup) need franz-go; kafka-go has none")
}

// shareBroker sets the embedded broker's share-group configs: the
// records' lock, the sweep of expired locks (200ms), the delivery limit
// and the heartbeat (100ms, so members join and see their assignments
// quickly).
func (b *bundle) shareBroker(lock time.Duration, limit int) {
	b.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.broker.Addrs()...))
	if err != nil {
		b.t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeBroker
	for k, v := range map[string]string{
		"group.share.record.lock.duration.ms": strconv.Itoa(int(lock.Milliseconds())),
		"share.record.lock.sweep.interval.ms": "200",
		"group.share.delivery.count.limit":    strconv.Itoa(limit),
		"group.share.heartbeat.interval.ms":   "100",
		"group.share.session.timeout.ms":      "6000",
	} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = k, kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(v)
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	if err != nil {
		b.t.Fatalf("set the broker's share-group configs: %v", err)
	}
}

// shareConfig is the bundle's config with every class a share class of
// group <Group>.<class>.
func (b *bundle) shareConfig(h handoff.HandlerFunc, mod func(*Class)) Config {
	cfg := b.config(h, func(c *Class) {
		c.ShareGroup = b.group + "." + c.Name
		if mod != nil {
			mod(c)
		}
	})
	cfg.Client = ClientFranzGo
	return cfg
}

// shareCounts returns the IDs handled to success once, and how many
// handlings there were in all.
func shareDups(b *bundle) (dups []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, n := range b.handled {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s×%d", id, n))
		}
	}
	return dups
}

// TestShareRefusals: New refuses what a share class cannot do, each with
// an error naming the class and the reason.
func TestShareRefusals(t *testing.T) {
	h := func(context.Context, *handoff.Message) error { return nil }
	base := func(mod func(*Config)) Config {
		cfg := Config{Brokers: []string{"127.0.0.1:1"}, Group: "g", StatePath: t.TempDir() + "/s.db", Client: ClientFranzGo,
			Classes: []Class{{Name: "jobs", Topics: []string{"jobs"}, Handler: h, ShareGroup: "g.jobs"}}}
		mod(&cfg)
		return cfg
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"ordered", func(c *Config) { c.Classes[0].Ordered = true }, "ShareGroup and Ordered"},
		{"kafka-go", func(c *Config) { c.Client = ClientKafkaGo }, "kafka-go has no share groups"},
		{"no topics", func(c *Config) { c.Classes[0].Topics = nil }, "needs Topics"},
		{"redeliveries", func(c *Config) { c.Classes[0].Retry.Redeliveries = 2 }, "Retry.Redeliveries"},
		{"batch", func(c *Config) {
			c.Classes[0].Handler = nil
			c.Classes[0].BatchHandler = func(context.Context, []*handoff.Message) error { return nil }
		}, "BatchHandler"},
		{"group's ID", func(c *Config) { c.Classes[0].ShareGroup = "g" }, "consumer group's ID"},
		{"same group", func(c *Config) {
			c.Classes = append(c.Classes, Class{Name: "more", Topics: []string{"more"}, Handler: h, ShareGroup: "g.jobs"})
		}, "same ShareGroup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newRuntime(base(tc.mod))
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"jobs"`) {
				t.Fatalf("New: %v, want an ErrConfig naming class \"jobs\" and %q", err, tc.want)
			}
		})
	}
	if _, err := newRuntime(base(func(*Config) {})); err != nil {
		t.Fatalf("a share class with topics on franz-go: %v", err)
	}
}

// TestShareSmoke: one instance handles every record of a share class,
// once, and accepts each.
func TestShareSmoke(t *testing.T) {
	shareOnly(t)
	b := setup(t, 4, "jobs")
	b.shareBroker(5*time.Second, 5)
	n := b.produce(200)
	cfg := b.shareConfig(func(_ context.Context, m *handoff.Message) error { b.record(m); return nil }, nil)
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "every record handled", func() bool { u, _ := b.counts(); return u == n })
	cancelStop(t, rt)
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	u, total := b.counts()
	st := rt.Stats()[0].Share
	t.Logf("produced %d handled %d (total %d) accepted %d report %s", n, u, total, st.Accepted, rep)
	if total != n || st.Accepted != uint64(n) {
		t.Fatalf("handled %d times (%d records), accepted %d; want %d each", total, u, st.Accepted, n)
	}
}

// cancelStop starts rt's graceful stop and waits up to a minute for it.
func cancelStop(t *testing.T, rt *Runtime) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rt.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestShareStopUnderLoad: three instances share a class's records, with
// fewer members than partitions and with more; one stops gracefully
// while every one is busy (it releases what it had not started, finishes
// and accepts what ran), the others take over: every record is handled
// once, none lost, none twice.
func TestShareStopUnderLoad(t *testing.T) {
	shareOnly(t)
	for _, tc := range []struct {
		name       string
		partitions int
	}{{"fewer members than partitions", 4}, {"more members than partitions", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t, tc.partitions, "jobs")
			b.shareBroker(5*time.Second, 5)
			n := b.produce(1500)
			cfg := b.shareConfig(func(_ context.Context, m *handoff.Message) error {
				time.Sleep(time.Millisecond) // the work
				b.record(m)
				return nil
			}, func(c *Class) { c.Workers, c.QueueSize = 4, 16 })
			var rts []*Runtime
			var waits []func() (*Report, error)
			for i := range 3 {
				rt, wait := b.instance(fmt.Sprintf("i%d", i), cfg)
				rts, waits = append(rts, rt), append(waits, wait)
			}
			waitFor(t, "every instance handling", func() bool {
				for _, rt := range rts {
					if rt.Stats()[0].Succeeded == 0 {
						return false
					}
				}
				u, _ := b.counts()
				return u >= n/4
			})
			cancelStop(t, rts[0])
			rep0, err := waits[0]()
			if err != nil {
				t.Fatal(err)
			}
			u0, _ := b.counts()
			waitFor(t, "every record handled", func() bool { u, _ := b.counts(); return u == n })
			var accepted, released uint64
			for i, rt := range rts {
				if i > 0 {
					cancelStop(t, rt)
					if _, err := waits[i](); err != nil {
						t.Fatal(err)
					}
				}
				st := rt.Stats()[0].Share
				accepted += st.Accepted
				released += st.Released
			}
			u, total := b.counts()
			t.Logf("produced %d; at the stop of i0 %d handled; handled %d, %d times in all (lost %d, duplicates %d); accepted %d, released %d; i0 stop: share_released=%d drained=%d interrupted=%d snapshotted=%d took %s",
				n, u0, u, total, n-u, total-u, accepted, released, rep0.ShareReleased, rep0.Drained, rep0.Interrupted, rep0.Snapshotted, rep0.Stop)
			if dups := shareDups(b); u != n || total != n || len(dups) > 0 {
				t.Fatalf("handled %d of %d records, %d times in all; duplicates %v", u, n, total, dups)
			}
			if rep0.Snapshotted != 0 || rep0.Interrupted != 0 {
				t.Fatalf("the stop snapshotted %d and interrupted %d; want 0 and 0", rep0.Snapshotted, rep0.Interrupted)
			}
			if accepted != uint64(n) {
				t.Fatalf("accepted %d; want %d", accepted, n)
			}
		})
	}
}
