package runtime

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// changelogTopic is the changelog topic of the bundle's input topic.
func (b *bundle) changelogTopic(topic string) string {
	return b.group + "." + topic + ".handoff-changelog"
}

// changelogRecords reads every record of topic's changelog, partition by
// partition, to its end.
func (b *bundle) changelogRecords(topic string) map[int32][]*kgo.Record {
	b.t.Helper()
	name := b.changelogTopic(topic)
	offsets := map[string]map[int32]kgo.Offset{name: {}}
	for p := range b.topics[topic] {
		offsets[name][int32(p)] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.broker.Addrs()...), kgo.ConsumePartitions(offsets), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		b.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends := map[int32]int64{}
	for p := range b.topics[topic] {
		ends[int32(p)] = b.changelogEnd(ctx, cl, name, int32(p))
	}
	out := map[int32][]*kgo.Record{}
	done := func() bool {
		for p, end := range ends {
			rs := out[p]
			if end > 0 && (len(rs) == 0 || rs[len(rs)-1].Offset < end-1) {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			b.t.Fatalf("reading %s: %v (read %d partitions)", name, err, len(out))
		}
		fs.EachRecord(func(r *kgo.Record) { out[r.Partition] = append(out[r.Partition], r) })
	}
	return out
}

// changelogEnd returns the high watermark of the changelog partition.
func (b *bundle) changelogEnd(ctx context.Context, cl *kgo.Client, name string, p int32) int64 {
	b.t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = name
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = p, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		b.t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0].Offset
}

// expireTombstones makes topic's changelog what compaction leaves once
// delete.retention.ms has passed since the last write: the topic's
// delete.retention.ms is set to 0, a filler record (a tombstone of a
// key no file has) is written to each partition, since the embedded
// broker keeps the last batch of a partition whole, and the broker's
// compaction runs (kfake's Cluster.Compact, which drops the records
// that later ones of their key replaced and the tombstones older than
// delete.retention.ms, offsets kept). It returns how many tombstones the
// changelog held before, fillers left out, and fails when one is left
// after.
func (b *bundle) expireTombstones(topic string) int {
	b.t.Helper()
	name := b.changelogTopic(topic)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.broker.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		b.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, name
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value = "delete.retention.ms", kmsg.StringPtr("0")
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerrOf(resp.Resources[0].ErrorCode)
	}
	if err != nil {
		b.t.Fatalf("set delete.retention.ms of %s: %v", name, err)
	}
	isFiller := func(r *kgo.Record) bool { return len(r.Key) > 2 && r.Key[0] == 1 && string(r.Key[2:8]) == "filler" }
	tombstones := func() int {
		n := 0
		for _, rs := range b.changelogRecords(topic) {
			for _, r := range rs {
				if r.Value == nil && !isFiller(r) {
					n++
				}
			}
		}
		return n
	}
	before := tombstones()
	for p := range b.topics[topic] {
		key := append([]byte{1, 'p'}, "filler"...)
		key = append(key, make([]byte, 10+8)...)
		rand.Read(key[len(key)-8:])
		r := &kgo.Record{Topic: name, Partition: int32(p), Key: key}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			b.t.Fatalf("filler to %s/%d: %v", name, p, err)
		}
	}
	b.broker.Cluster().Compact()
	if after := tombstones(); after != 0 {
		b.t.Fatalf("%d tombstones left in %s after compaction", after, name)
	}
	return before
}

// kerrOf returns nil for code 0, else an error naming it.
func kerrOf(code int16) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("kafka error code %d", code)
}

// TestStaleDiskAfterTombstonesExpired: instance a stops with saved
// messages, a dead letter and a delayed record in its file; b, on a new
// disk, owns the partitions, runs the saved and the delayed messages
// and discards the dead letter, then stops; the changelog's tombstones
// of what b finished expire (delete.retention.ms, see expireTombstones
// for what is simulated); a comes back on its old disk. Its file is a
// stale copy of partitions owned elsewhere since: none of its saved
// messages runs again, and its dead letter and delayed record are not
// back.
func TestStaleDiskAfterTombstonesExpired(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	produced := b.produce(36)
	b.produceValues("orders", "poisoned", "poison")
	runs := newInstanceRuns("")

	// a: every message but the poison waits for the stop.
	block := func(ctx context.Context, m *handoff.Message) error {
		if string(m.Value) == "poison" {
			return handoff.Permanent(errors.New("poison"))
		}
		<-ctx.Done()
		return context.Cause(ctx)
	}
	roomy := func(c *Class) { c.Workers, c.QueueSize = 64, 64 }
	cfgA := b.config(block, roomy)
	cfgA.Instance, cfgA.DrainTimeout, cfgA.HardStopGrace = "a", 50*time.Millisecond, 2*time.Second
	rtA, err := newRuntime(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	ctxA, stopA := context.WithCancel(context.Background())
	waitA := start(t, rtA, ctxA)
	waitFor(t, "a ready", rtA.Ready)
	due := time.Now().Add(4 * time.Second)
	later := &handoff.Message{ID: "later-1", Key: []byte("later"), Value: []byte("later")}
	if err := rtA.Schedule(context.Background(), "orders", later, due); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a dead letter, every other message in a's pool", func() bool {
		dl, _, err := rtA.DeadLetters("", "", 10)
		s := rtA.classes.order[0].pool.Stats()
		return err == nil && len(dl) == 1 && s.Running+s.Queued == produced
	})
	if d, _, err := rtA.Delayed("", 10); err != nil || len(d) != 1 {
		t.Fatalf("a's delayed records before its stop: %v, %v; want later-1", d, err)
	}
	stopA()
	repA, err := waitA()
	if err != nil {
		t.Fatal(err)
	}
	if repA.Snapshotted != produced {
		t.Fatalf("a's stop saved %d of %d", repA.Snapshotted, produced)
	}

	// b, on a new disk: runs everything, discards the dead letter.
	rtB, waitB := b.instance("b", b.config(runs.handler("b"), nil))
	waitFor(t, "b ran the saved and the delayed messages", func() bool { n, _ := runs.ran(); return n == produced+1 })
	var dl []DeadLetter
	waitFor(t, "the dead letter listed by b", func() bool {
		dl, _, err = rtB.DeadLetters("", "", 10)
		return err == nil && len(dl) == 1
	})
	if err := rtB.Discard(context.Background(), dl[0].Key); err != nil {
		t.Fatal(err)
	}
	shutdownAndWait(t, rtB, waitB)

	if n := b.expireTombstones("orders"); n < produced+2 {
		t.Fatalf("the changelog held %d tombstones before the expiry, want at least %d", n, produced+2)
	}

	// a again, on its old disk.
	cfgA2 := b.config(runs.handler("a"), nil)
	cfgA2.Instance = "a"
	rtA2, waitA2 := startNew(t, cfgA2)
	waitFor(t, "a owning both partitions", func() bool { return rtA2.Ready() && len(ownedPartitions(rtA2)) == 2 })
	dlA, _, err := rtA2.DeadLetters("", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	delayedA, _, err := rtA2.Delayed("", 10)
	if err != nil {
		t.Fatal(err)
	}
	// One new message per partition, after whatever a re-pushed.
	for p := range int32(2) {
		b.produceValues("orders", keyFor("after", p, 2, 0), "after")
	}
	waitFor(t, "the new messages run", func() bool {
		_, on := runs.ran()
		n := 0
		for id := range on {
			if !strings.HasPrefix(id, "later") && len(on[id]) > 0 && on[id][0] == "a" {
				n++
			}
		}
		return n >= 2
	})
	repA2 := shutdownAndWait(t, rtA2, waitA2)
	if len(dlA) != 0 {
		t.Errorf("a lists %d dead letters b discarded", len(dlA))
	}
	if len(delayedA) != 0 {
		t.Errorf("a lists %d delayed records b ran", len(delayedA))
	}
	if repA2.Repushed != 0 || repA2.Snapshotted != 0 {
		t.Errorf("a re-pushed %d stale saved messages (%d saved at its stop)", repA2.Repushed, repA2.Snapshotted)
	}
	_, on := runs.ran()
	twice := 0
	for id, where := range on {
		if len(where) != 1 {
			twice++
			t.Logf("%s ran on %v", id, where)
		}
	}
	if twice != 0 || len(on) != produced+1+2 {
		t.Errorf("%d messages ran, %d of them more than once; want %d, each once", len(on), twice, produced+3)
	}
	if got, _ := rtA2.clog.cl().Counts(); got != 2 {
		t.Errorf("a rebuilt %d partitions, want 2", got)
	}
}

// TestSameOwnerNotRebuilt: a file that owned its partitions without a
// break is trusted. Stopped with saved messages and started again on its
// disk (its partitions assigned back with nobody owning them in between),
// it restores only what the changelog holds past its checkpoint
// (nothing), writes no owner marker again and rebuilds nothing; its saved
// messages run there, once. Then another member joins the group for
// another topic: on kafka-go that rebalance revokes this instance's
// partitions and assigns them back (franz-go's cooperative one keeps
// them), and again nothing is rebuilt or claimed.
func TestSameOwnerNotRebuilt(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders", "other")
	only := func(cfg Config, class string) Config {
		cfg.Classes = slices.DeleteFunc(cfg.Classes, func(c Class) bool { return c.Name != class })
		return cfg
	}
	b.topics = map[string]int{"orders": 2} // produce, counts and stopUnderLoad: orders alone
	produced := b.produce(100)
	rep, release := b.stopUnderLoad(nil)
	release()
	if rep.Snapshotted == 0 {
		t.Fatalf("the stop saved nothing: %v", rep)
	}
	handled, _ := b.counts()
	markers := func() int {
		n := 0
		for _, rs := range b.changelogRecords("orders") {
			for _, r := range rs {
				if e, _ := snapshottest.ParseChangelog(r.Key, r.Value); e.Owner {
					n++
				}
			}
		}
		return n
	}
	if got := markers(); got != 2 {
		t.Fatalf("%d owner markers after the first run, want 2", got)
	}
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error { b.record(m); return nil }, nil)
	rt, wait := startNew(t, cfg)
	waitFor(t, "everything handled", func() bool { n, _ := b.counts(); return n == produced })
	restoredBefore := rt.clog.restoredParts.Load()

	// Another member, of topic "other" only, joins and leaves.
	b.topics = map[string]int{"orders": 2, "other": 2}
	rtX, waitX := b.instance("x", only(b.config(func(context.Context, *handoff.Message) error { return nil }, nil), "other"))
	waitFor(t, "x owning other's partitions, this instance orders'", func() bool {
		return rtX.Ready() && len(ownedPartitions(rtX)) == 2 && len(ownedPartitions(rt)) == 2
	})
	shutdownAndWait(t, rtX, waitX)
	b.topics = map[string]int{"orders": 2}
	rep2 := shutdownAndWait(t, rt, wait)
	if testClient() == ClientKafkaGo && rt.clog.restoredParts.Load() <= restoredBefore {
		t.Errorf("kafka-go: x's join restored no partition here (%d restores before, %d after)", restoredBefore, rt.clog.restoredParts.Load())
	}
	if rebuilt, claimed := rt.clog.cl().Counts(); rebuilt != 0 || claimed != 0 {
		t.Errorf("the same disk's run rebuilt %d partitions and wrote %d owner markers, want none", rebuilt, claimed)
	}
	if rep2.Restored != 0 || rep2.Repushed != rep.Snapshotted || rep2.RestoredPartitions < 2 {
		t.Errorf("saved %d; the same disk's run restored %d records of %d partitions and re-pushed %d",
			rep.Snapshotted, rep2.Restored, rep2.RestoredPartitions, rep2.Repushed)
	}
	if got := markers(); got != 2 {
		t.Errorf("%d owner markers after the second run, want 2", got)
	}
	unique, total := b.counts()
	if unique != produced || total != produced {
		t.Errorf("produced %d: handled %d unique, %d total (%d before the restart)", produced, unique, total, handled)
	}
}

// TestLocalOnlyFileJoinsChangelog: a file written with LocalStateOnly
// holds 200 messages its stop saved over 4 partitions; the changelog
// never saw them. Started again with the changelog, in a group where
// instance b owns the partitions first and keeps some of them, it sends
// them to the changelog before any restore: all 200 run, once, some on
// b.
func TestLocalOnlyFileJoinsChangelog(t *testing.T) {
	t.Parallel()
	b := setup(t, 4, "orders")
	produced := b.produce(200)
	block := func(ctx context.Context, m *handoff.Message) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}
	roomy := func(c *Class) { c.QueueSize = 256 }
	cfg := b.config(block, roomy)
	cfg.Instance, cfg.LocalStateOnly = "a", true
	cfg.DrainTimeout, cfg.HardStopGrace = 50*time.Millisecond, 2*time.Second
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	wait := start(t, rt, ctx)
	waitFor(t, "every message in the pool", func() bool {
		s := rt.classes.order[0].pool.Stats()
		return s.Running+s.Queued == produced
	})
	stop()
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Snapshotted != produced {
		t.Fatalf("the local stop saved %d of %d", rep.Snapshotted, produced)
	}
	parts := map[int]bool{}
	for _, e := range snapshottest.Pending(t, b.state) {
		parts[e.Record.Message.Origin.Partition] = true
	}
	if len(parts) != 4 {
		t.Fatalf("saved messages in partitions %v, want 4", parts)
	}

	runs := newInstanceRuns("")
	rtB, waitB := b.instance("b", b.config(runs.handler("b"), nil))
	waitFor(t, "b owning every partition", func() bool { return rtB.Ready() && len(ownedPartitions(rtB)) == 4 })
	cfgA := b.config(runs.handler("a"), nil)
	cfgA.Instance = "a"
	rtA, waitA := startNew(t, cfgA)
	waitFor(t, "a and b owning 2 partitions each", func() bool {
		return rtA.Ready() && len(ownedPartitions(rtA)) == 2 && len(ownedPartitions(rtB)) == 2
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		n, _ := runs.ran()
		if n >= produced {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d saved messages ran", n, produced)
		}
		time.Sleep(5 * time.Millisecond) // the poll interval, as waitFor's
	}
	shutdownAndWait(t, rtA, waitA)
	shutdownAndWait(t, rtB, waitB)
	_, on := runs.ran()
	onB, twice := 0, 0
	for id, where := range on {
		if len(where) != 1 {
			twice++
			t.Logf("%s ran on %v", id, where)
		}
		if where[0] == "b" {
			onB++
		}
	}
	if len(on) != produced || twice != 0 {
		t.Errorf("%d of %d saved messages ran, %d more than once", len(on), produced, twice)
	}
	if onB == 0 {
		t.Errorf("none ran on b, which owned partitions of a's records")
	}
}
