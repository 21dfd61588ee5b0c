package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
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
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
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
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	accepted := -1.0
	for _, mf := range mfs {
		if mf.GetName() != "handoff_share_acks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "ack" && l.GetValue() == "accepted" {
					accepted = m.GetCounter().GetValue()
				}
			}
		}
	}
	if accepted != float64(n) {
		t.Fatalf("handoff_share_acks_total{ack=\"accepted\"} = %v; want %d", accepted, n)
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
		batch      bool
	}{{"fewer members than partitions", 4, false}, {"more members than partitions", 2, false}, {"batch handler", 2, true}} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t, tc.partitions, "jobs")
			b.shareBroker(5*time.Second, 5)
			n := b.produce(1500)
			cfg := b.shareConfig(func(_ context.Context, m *handoff.Message) error {
				time.Sleep(time.Millisecond) // the work
				b.record(m)
				return nil
			}, func(c *Class) {
				c.Workers, c.QueueSize = 4, 16
				if tc.batch {
					h := c.Handler
					c.Handler, c.MaxBatch = nil, 8
					c.BatchHandler = func(ctx context.Context, ms []*handoff.Message) error {
						for _, m := range ms {
							_ = h(ctx, m)
						}
						return nil
					}
				}
			})
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

// valueCalls counts a handler's calls per record value (successful or
// not).
type valueCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *valueCalls) add(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[id]++
	return c.n[id]
}

func (c *valueCalls) of(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// idOf keeps the ID of each record value the handler saw.
type idOf struct {
	mu  sync.Mutex
	ids map[string]string
}

func (x *idOf) note(m *handoff.Message) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ids == nil {
		x.ids = map[string]string{}
	}
	x.ids[string(m.Value)] = m.ID
}

func (x *idOf) get(v string) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.ids[v]
}

// TestShareHandlerLongerThanLock: a handler that runs three times the
// record's lock is not delivered again to the other member: its lock is
// renewed while it runs (and while the records behind it wait).
func TestShareHandlerLongerThanLock(t *testing.T) {
	shareOnly(t)
	b := setup(t, 1, "jobs")
	const lock = time.Second
	b.shareBroker(lock, 5)
	var c valueCalls
	n := b.produceValues("jobs", "k", "slow", "a", "b", "c")
	cfg := b.shareConfig(func(_ context.Context, m *handoff.Message) error {
		c.add(string(m.Value))
		if string(m.Value) == "slow" {
			time.Sleep(3 * lock) // the work, longer than the lock
		}
		b.record(m)
		return nil
	}, func(c *Class) { c.Workers, c.QueueSize = 2, 4 })
	rtA, waitA := b.instance("a", cfg)
	rtB, waitB := b.instance("b", cfg)
	waitFor(t, "every record handled", func() bool { u, _ := b.counts(); return u == n })
	for _, rt := range []*Runtime{rtA, rtB} {
		cancelStop(t, rt)
	}
	for _, w := range []func() (*Report, error){waitA, waitB} {
		if _, err := w(); err != nil {
			t.Fatal(err)
		}
	}
	renewed := rtA.Stats()[0].Share.Renewed + rtB.Stats()[0].Share.Renewed
	u, total := b.counts()
	t.Logf("records %d handled %d, %d times; slow called %d times; renewals %d", n, u, total, c.of("slow"), renewed)
	if c.of("slow") != 1 || total != n {
		t.Fatalf("slow handler called %d times, records handled %d times; want 1 and %d", c.of("slow"), total, n)
	}
	if renewed == 0 {
		t.Fatal("no lock renewed")
	}
}

// TestSharePermanentFailure: a record whose handler fails for good
// becomes a dead letter (in the state file and on DeadLetterTopic, with
// the broker's delivery count in its headers), is rejected, and is never
// delivered again, to this member or another.
func TestSharePermanentFailure(t *testing.T) {
	shareOnly(t)
	b := setup(t, 2, "jobs")
	b.shareBroker(2*time.Second, 5)
	if err := b.broker.Cluster().CreateTopic("jobs-dead", 1, nil); err != nil {
		t.Fatal(err)
	}
	var c valueCalls
	var ids idOf
	n := b.produce(20)
	h := func(_ context.Context, m *handoff.Message) error {
		c.add(string(m.Value))
		ids.note(m)
		if string(m.Value) == "jobs-7" {
			return handoff.Permanent(errors.New("bad record"))
		}
		b.record(m)
		return nil
	}
	cfg := b.shareConfig(h, func(c *Class) { c.DeadLetterTopic = "jobs-dead" })
	rt, wait := b.instance("a", cfg)
	waitFor(t, "the others handled and the dead letter published", func() bool {
		u, _ := b.counts()
		return u == n-1 && rt.Stats()[0].Share.Rejected == 1
	})
	cancelStop(t, rt)
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	dead := fileDead(t, rt)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters in the state file; want 1", len(dead))
	}
	if got := headerOf(dead[0].Message.Headers, HeaderDeliveryCount); got != "1" || dead[0].Message.ID != ids.get("jobs-7") {
		t.Fatalf("dead letter %s has %s %q; want %s and \"1\"", dead[0].Message.ID, HeaderDeliveryCount, got, ids.get("jobs-7"))
	}
	if rep.DeadLettered != 1 || rep.Published != 1 {
		t.Fatalf("report: dead_lettered %d published %d; want 1 and 1", rep.DeadLettered, rep.Published)
	}
	pub := readTopic(t, b, "jobs-dead", 1)
	if got := kgoHeader(pub[0], HeaderDeliveryCount); got != "1" {
		t.Fatalf("published dead letter's %s is %q; want \"1\"", HeaderDeliveryCount, got)
	}
	// Another member joins; a record produced now reaches it. The
	// rejected record does not: the broker archived it.
	b.mu.Lock()
	b.handled = map[string]int{}
	b.mu.Unlock()
	rt2, wait2 := b.instance("b", cfg)
	b.produceValues("jobs", "k", "marker")
	waitFor(t, "the marker handled", func() bool { return c.of("marker") == 1 })
	cancelStop(t, rt2)
	if _, err := wait2(); err != nil {
		t.Fatal(err)
	}
	t.Logf("bad record called %d times; stats %+v", c.of("jobs-7"), rt.Stats()[0].Share)
	if c.of("jobs-7") != 1 {
		t.Fatalf("bad record called %d times; want 1", c.of("jobs-7"))
	}
	if u, total := b.counts(); u != 1 || total != 1 {
		t.Fatalf("the second member handled %d records (%d times); want only the marker", u, total)
	}
}

// TestShareDeliveryLimit: a record whose handler never succeeds (retried
// in place without end) is released by each stop; at the group's
// delivery limit the stop makes it a dead letter, with the delivery
// count, instead of a release the broker would archive unseen.
func TestShareDeliveryLimit(t *testing.T) {
	shareOnly(t)
	b := setup(t, 1, "jobs")
	b.shareBroker(5*time.Second, 2)
	var c valueCalls
	b.produceValues("jobs", "k", "poison")
	cfg := b.shareConfig(func(_ context.Context, m *handoff.Message) error {
		c.add(string(m.Value))
		if string(m.Value) == "poison" {
			return errors.New("still failing")
		}
		b.record(m)
		return nil
	}, func(c *Class) {
		c.Retry = RetryPolicy{MaxAttempts: 1 << 30, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
		c.Suspend = SuspendPolicy{After: -1} // one record failing is no outage
	})
	cfg.DrainTimeout = 200 * time.Millisecond
	run := func(name string, wantDelivery int) *Report {
		t.Helper()
		rt, wait := b.instance(name, cfg)
		before := c.of("poison")
		waitFor(t, name+" retrying the record", func() bool { return c.of("poison") >= before+3 })
		cancelStop(t, rt)
		rep, err := wait()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: calls %d, share_released %d, dead_lettered %d, stats %+v", name, c.of("poison"), rep.ShareReleased, rep.DeadLettered, rt.Stats()[0].Share)
		if rt.Stats()[0].Share.DeliveryLimit != 2 {
			t.Fatalf("delivery limit read as %d; want 2", rt.Stats()[0].Share.DeliveryLimit)
		}
		dead := fileDead(t, rt)
		if wantDelivery == 0 {
			if rep.ShareReleased != 1 || rep.DeadLettered != 0 || len(dead) != 0 {
				t.Fatalf("%s: released %d, dead-lettered %d (%d in the file); want 1, 0, 0", name, rep.ShareReleased, rep.DeadLettered, len(dead))
			}
			return rep
		}
		if rep.ShareReleased != 0 || rep.DeadLettered != 1 || len(dead) != 1 {
			t.Fatalf("%s: released %d, dead-lettered %d (%d in the file); want 0, 1, 1", name, rep.ShareReleased, rep.DeadLettered, len(dead))
		}
		if got := headerOf(dead[0].Message.Headers, HeaderDeliveryCount); got != strconv.Itoa(wantDelivery) {
			t.Fatalf("dead letter's delivery count %q; want %d", got, wantDelivery)
		}
		if rt.Stats()[0].Share.Rejected != 1 {
			t.Fatalf("rejected %d; want 1", rt.Stats()[0].Share.Rejected)
		}
		return rep
	}
	run("a", 0) // delivery 1: released
	run("b", 2) // delivery 2, the limit: a dead letter
	// The record is gone from the group: a third member gets only what
	// is produced now.
	called := c.of("poison")
	rt, wait := b.instance("c", cfg)
	b.produceValues("jobs", "k", "marker")
	waitFor(t, "the marker handled", func() bool { return c.of("marker") == 1 })
	cancelStop(t, rt)
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if c.of("poison") != called {
		t.Fatalf("the dead-lettered record was delivered again (%d calls, %d before)", c.of("poison"), called)
	}
}

// TestShareOutage: a dependency outage suspends the share class (no
// dead letter); the stop releases what it holds, and a later member
// handles every record once the dependency is back: nothing lost.
func TestShareOutage(t *testing.T) {
	shareOnly(t)
	b := setup(t, 2, "jobs")
	b.shareBroker(3*time.Second, 5)
	n := b.produce(60)
	var down atomic.Bool
	down.Store(true)
	cfg := b.shareConfig(func(_ context.Context, m *handoff.Message) error {
		if down.Load() {
			return handoff.Unavailable(errors.New("database down"))
		}
		b.record(m)
		return nil
	}, func(c *Class) { c.Workers, c.QueueSize = 2, 8 })
	cfg.DrainTimeout = 300 * time.Millisecond
	rt, wait := b.instance("a", cfg)
	waitFor(t, "the class suspended", func() bool { return rt.Stats()[0].Hold.State == "suspended" })
	held := rt.Stats()[0]
	cancelStop(t, rt)
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	dead := fileDead(t, rt)
	t.Logf("suspended with %d queued, %d waiting; stop: share_released %d dead_lettered %d snapshotted %d", held.Queued, held.Waiting, rep.ShareReleased, rep.DeadLettered, rep.Snapshotted)
	if rep.DeadLettered != 0 || len(dead) != 0 || rep.Snapshotted != 0 {
		t.Fatalf("outage made %d dead letters (%d in the file), snapshotted %d; want none", rep.DeadLettered, len(dead), rep.Snapshotted)
	}
	if rep.ShareReleased == 0 || uint64(rep.ShareReleased) != rt.Stats()[0].Share.Released {
		t.Fatalf("stop released %d (stats %d); want every held record", rep.ShareReleased, rt.Stats()[0].Share.Released)
	}
	down.Store(false)
	rt2, wait2 := b.instance("b", cfg)
	waitFor(t, "every record handled", func() bool { u, _ := b.counts(); return u == n })
	cancelStop(t, rt2)
	if _, err := wait2(); err != nil {
		t.Fatal(err)
	}
	if u, total := b.counts(); u != n || total != n {
		t.Fatalf("handled %d of %d, %d times; want each once", u, n, total)
	}
}

// fileDead returns the dead letters in the state file of rt, which has
// stopped.
func fileDead(t *testing.T, rt *Runtime) []snapshot.Record {
	t.Helper()
	var out []snapshot.Record
	for _, e := range snapshottest.Dead(t, rt.cfg.StatePath) {
		out = append(out, e.Record)
	}
	return out
}

// headerOf returns the value of the last header named key, "" if none.
func headerOf(hs []handoff.Header, key string) string {
	v := ""
	for _, h := range hs {
		if h.Key == key {
			v = string(h.Value)
		}
	}
	return v
}

// kgoHeader returns the value of r's header key, "" if none.
func kgoHeader(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// readTopic reads the first n records of topic from its start.
func readTopic(t *testing.T, b *bundle, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.broker.Addrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records of %s: %v", len(out), n, topic, err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// TestShareKill: a member that dies without acknowledging or leaving
// (its connections cut, its handlers hung: a kill -9's equivalent) loses
// nothing: the records it held come back to the other member after
// their locks (or its session) ran out. Duplicates are allowed: what it
// finished was never acknowledged.
func TestShareKill(t *testing.T) {
	shareOnly(t)
	b := setup(t, 2, "jobs")
	b.shareBroker(2*time.Second, 5)
	cluster := b.broker.Cluster()
	var mu sync.Mutex
	members := map[string]bool{} // the doomed member's IDs, seen before the other starts
	var watching, killed atomic.Bool
	watching.Store(true)
	cluster.ControlKey(int16(kmsg.ShareGroupHeartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if watching.Load() {
			mu.Lock()
			members[req.(*kmsg.ShareGroupHeartbeatRequest).MemberID] = true
			mu.Unlock()
		}
		return nil, nil, false
	})
	doomed := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return killed.Load() && members[id]
	}
	cluster.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		var id string
		switch r := req.(type) {
		case *kmsg.ShareGroupHeartbeatRequest:
			id = r.MemberID
		case *kmsg.ShareFetchRequest:
			id = deref(r.MemberID)
		case *kmsg.ShareAcknowledgeRequest:
			id = deref(r.MemberID)
		default:
			return nil, nil, false
		}
		if !doomed(id) {
			return nil, nil, false
		}
		cluster.KeepControl()
		return nil, errors.New("member killed"), true // the connection closes
	})
	n := b.produce(400)
	hang := make(chan struct{})
	var byK atomic.Int64
	cfgK := b.shareConfig(func(ctx context.Context, m *handoff.Message) error {
		if killed.Load() {
			<-hang // hung: the process is gone
			return errors.New("killed")
		}
		time.Sleep(time.Millisecond)
		b.record(m)
		byK.Add(1)
		return nil
	}, func(c *Class) { c.Workers, c.QueueSize = 4, 16 })
	cfgK.DrainTimeout, cfgK.HardStopGrace = time.Second, time.Second
	rtK, waitK := b.instance("k", cfgK)
	waitFor(t, "the doomed member handling", func() bool { return byK.Load() >= 50 })
	killed.Store(true)
	watching.Store(false)
	atKill, _ := b.counts()
	cfgS := b.shareConfig(func(_ context.Context, m *handoff.Message) error { b.record(m); return nil }, nil)
	rtS, waitS := b.instance("s", cfgS)
	waitFor(t, "every record handled", func() bool { u, _ := b.counts(); return u == n })
	close(hang)
	if err := rtK.Close(); err != nil {
		t.Logf("the killed member's Close: %v", err)
	}
	if _, err := waitK(); err != nil {
		t.Logf("the killed member's Run: %v", err)
	}
	cancelStop(t, rtS)
	if _, err := waitS(); err != nil {
		t.Fatal(err)
	}
	u, total := b.counts()
	t.Logf("produced %d; handled %d at the kill; in all %d records handled %d times (lost %d, duplicates %d)", n, atKill, u, total, n-u, total-u)
	if u != n {
		t.Fatalf("lost %d records", n-u)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestShareMissingTopic: a share class none of whose topics exists
// fails the start with a TopicError naming it (the consumer group's
// classes do the same), and the teardown of that start ends cleanly.
func TestShareMissingTopic(t *testing.T) {
	shareOnly(t)
	b := setup(t, 1, "jobs")
	cfg := b.shareConfig(func(context.Context, *handoff.Message) error { return nil }, nil)
	cfg.Classes[0].Topics = []string{"nope"}
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = rt.Run(ctx)
	te, ok := errors.AsType[*TopicError](err)
	if !errors.Is(err, ErrStart) || !ok || te.Class != "jobs" || !slices.Equal(te.Topics, []string{"nope"}) {
		t.Fatalf("Run: %v; want a start error with the TopicError of class jobs, topic nope", err)
	}
}

// TestShareDeliverAt: a share record whose HeaderDeliverAt is in the
// future is kept in the state file (accepted at once: the broker is done
// with it) and handled when due, once; one due now runs at once.
func TestShareDeliverAt(t *testing.T) {
	shareOnly(t)
	b := setup(t, 1, "jobs")
	b.shareBroker(5*time.Second, 5)
	due := time.Now().Add(1500 * time.Millisecond)
	w := b.writer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := w.WriteMessages(ctx,
		kafka.Message{Topic: "jobs", Key: []byte("k"), Value: []byte("later"),
			Headers: []kafka.Header{{Key: HeaderDeliverAt, Value: []byte(due.Format(time.RFC3339Nano))}}},
		kafka.Message{Topic: "jobs", Key: []byte("k"), Value: []byte("now")})
	devbroker.CloseWriter(w)
	if err != nil {
		t.Fatal(err)
	}
	var at sync.Map
	cfg := b.shareConfig(func(_ context.Context, m *handoff.Message) error {
		at.Store(string(m.Value), time.Now())
		b.record(m)
		return nil
	}, nil)
	rt, wait := b.instance("a", cfg)
	waitFor(t, "both handled", func() bool { u, _ := b.counts(); return u == 2 })
	cancelStop(t, rt)
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	later, _ := at.Load("later")
	st := rt.Stats()[0].Share
	t.Logf("deferred %d, delivered %d, accepted %d; later handled %s after its due time", rep.Deferred, rep.Delivered, st.Accepted, later.(time.Time).Sub(due))
	if later.(time.Time).Before(due) {
		t.Fatalf("the deferred record ran %s before its due time", due.Sub(later.(time.Time)))
	}
	if _, total := b.counts(); total != 2 || rep.Deferred != 1 || st.Accepted != 2 {
		t.Fatalf("handled %d times, deferred %d, accepted %d; want 2, 1, 2", total, rep.Deferred, st.Accepted)
	}
}

// TestShareBackoffRenewed: a record waiting out retry backoffs longer
// than its lock keeps its lock (renewed while it waits): the other member
// never gets it, and it succeeds on its third attempt, where it failed.
func TestShareBackoffRenewed(t *testing.T) {
	shareOnly(t)
	b := setup(t, 1, "jobs")
	const lock = time.Second
	b.shareBroker(lock, 5)
	b.produceValues("jobs", "k", "flaky")
	var onA, onB atomic.Int64
	mod := func(c *Class) {
		c.Retry = RetryPolicy{MaxAttempts: 5, InitialBackoff: 3 * lock, MaxBackoff: 3 * lock}
		c.Suspend = SuspendPolicy{After: -1}
	}
	cfgA := b.shareConfig(func(_ context.Context, m *handoff.Message) error {
		if onA.Add(1) < 3 {
			return errors.New("not yet")
		}
		b.record(m)
		return nil
	}, mod)
	cfgB := b.shareConfig(func(_ context.Context, m *handoff.Message) error {
		onB.Add(1)
		b.record(m)
		return nil
	}, mod)
	rtA, waitA := b.instance("a", cfgA)
	waitFor(t, "the first attempt failed", func() bool { return onA.Load() >= 1 })
	rtB, waitB := b.instance("b", cfgB)
	waitFor(t, "the record handled", func() bool { u, _ := b.counts(); return u == 1 })
	for _, rt := range []*Runtime{rtA, rtB} {
		cancelStop(t, rt)
	}
	for _, w := range []func() (*Report, error){waitA, waitB} {
		if _, err := w(); err != nil {
			t.Fatal(err)
		}
	}
	renewed := rtA.Stats()[0].Share.Renewed
	t.Logf("attempts on a %d, on b %d; renewals on a %d", onA.Load(), onB.Load(), renewed)
	if onA.Load() != 3 || onB.Load() != 0 || renewed == 0 {
		t.Fatalf("attempts on a %d, on b %d, renewals %d; want 3, 0 and some", onA.Load(), onB.Load(), renewed)
	}
}

// TestShareHardStop: handlers still running at the end of the drain are
// interrupted and their records released with the unstarted ones and
// those waiting out a backoff (nothing snapshotted); another member then
// handles every record: none lost, none handled twice (an interrupted
// handler succeeded nowhere).
func TestShareHardStop(t *testing.T) {
	shareOnly(t)
	b := setup(t, 2, "jobs")
	b.shareBroker(5*time.Second, 5)
	n := b.produce(40)
	cfgA := b.shareConfig(func(ctx context.Context, m *handoff.Message) error {
		if m.Origin.Offset%5 == 1 {
			return errors.New("retry later") // waits out a long backoff
		}
		<-ctx.Done() // runs until the hard stop
		return ctx.Err()
	}, func(c *Class) {
		c.Workers, c.QueueSize = 3, 6
		c.Retry = RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Minute, MaxBackoff: time.Minute}
		c.Suspend = SuspendPolicy{After: -1}
	})
	cfgA.DrainTimeout, cfgA.HardStopGrace = 200*time.Millisecond, time.Second
	rtA, waitA := b.instance("a", cfgA)
	waitFor(t, "a's workers all busy", func() bool { return rtA.Stats()[0].Running == 3 })
	cancelStop(t, rtA)
	rep, err := waitA()
	if err != nil {
		t.Fatal(err)
	}
	st := rtA.Stats()[0].Share
	t.Logf("a's stop: interrupted %d, waiting %d, unstarted %d, share_released %d, snapshotted %d; released %d accepted %d",
		rep.Interrupted, rep.Waiting, rep.Unstarted, rep.ShareReleased, rep.Snapshotted, st.Released, st.Accepted)
	if rep.Interrupted != 3 || rep.Snapshotted != 0 || uint64(rep.ShareReleased) != st.Released || st.Accepted != 0 {
		t.Fatalf("interrupted %d, snapshotted %d, released %d (stats %d), accepted %d; want 3, 0, all held, 0",
			rep.Interrupted, rep.Snapshotted, rep.ShareReleased, st.Released, st.Accepted)
	}
	cfgB := b.shareConfig(func(_ context.Context, m *handoff.Message) error { b.record(m); return nil }, nil)
	rtB, waitB := b.instance("b", cfgB)
	waitFor(t, "every record handled", func() bool { u, _ := b.counts(); return u == n })
	cancelStop(t, rtB)
	if _, err := waitB(); err != nil {
		t.Fatal(err)
	}
	if u, total := b.counts(); u != n || total != n {
		t.Fatalf("handled %d of %d, %d times", u, n, total)
	}
}

// TestSharePause: a paused share class polls no more (what it holds is
// finished): the records produced meanwhile all go to another member;
// once resumed it takes records again.
func TestSharePause(t *testing.T) {
	shareOnly(t)
	b := setup(t, 2, "jobs")
	b.shareBroker(2*time.Second, 5)
	b.produceValues("jobs", "k", "first")
	var onA atomic.Int64
	cfgA := b.shareConfig(func(_ context.Context, m *handoff.Message) error { onA.Add(1); b.record(m); return nil }, nil)
	rtA, waitA := b.instance("a", cfgA)
	waitFor(t, "a handling", func() bool { return onA.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rtA.Pause(ctx, "jobs", "test"); err != nil {
		t.Fatal(err)
	}
	cfgB := b.shareConfig(func(_ context.Context, m *handoff.Message) error { b.record(m); return nil }, nil)
	rtB, waitB := b.instance("b", cfgB)
	n := 1 + b.produce(30)
	deadline := time.Now().Add(20 * time.Second)
	for u, _ := b.counts(); u < n; u, _ = b.counts() {
		if time.Now().After(deadline) {
			t.Fatalf("handled %d of %d during the pause; a: %+v %+v; b: %+v %+v", u, n, rtA.Stats()[0].Share, rtA.Stats()[0].Hold, rtB.Stats()[0].Share, rtB.Stats()[0])
		}
		time.Sleep(10 * time.Millisecond) // the poll interval
	}
	if got := onA.Load(); got != 1 {
		t.Fatalf("the paused member handled %d records; want only the first", got)
	}
	cancelStop(t, rtB)
	if _, err := waitB(); err != nil {
		t.Fatal(err)
	}
	if err := rtA.Resume(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	b.produceValues("jobs", "k", "after")
	waitFor(t, "a handling again", func() bool { return onA.Load() == 2 })
	cancelStop(t, rtA)
	if _, err := waitA(); err != nil {
		t.Fatal(err)
	}
	if u, total := b.counts(); u != n+1 || total != n+1 {
		t.Fatalf("handled %d of %d, %d times", u, n+1, total)
	}
}
