package runtime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime/internal/changelog"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// addPartitions grows topic to n partitions on the bundle's broker, as
// an operator's kafka-topics --alter does.
func addPartitions(t *testing.T, b *bundle, topic string, n int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.broker.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreatePartitionsRequest()
	req.TimeoutMillis = 10_000
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, n
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Topics {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			t.Fatalf("adding partitions to %s: %v", r.Topic, err)
		}
	}
}

// topicPartitions returns how many partitions topic has on the bundle's
// broker.
func topicPartitions(t *testing.T, b *bundle, topic string) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.broker.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Topics {
		if r.Topic != nil && *r.Topic == topic && r.ErrorCode == 0 {
			return len(r.Partitions)
		}
	}
	return 0
}

// twoInstances starts watched instances "a" (until it is ready) and then
// "b" of b's group on its 2 partitions, each with the config cfg gives
// for its name, and waits until each owns one partition. stop shuts both
// down and waits for their runs, once; the test's cleanup calls it too.
func twoInstances(t *testing.T, b *bundle, cfg func(name string) Config) (rtA, rtB *Runtime, stop func()) {
	t.Helper()
	rtA, waitA := watchedInstance(t, b, "a", cfg("a"))
	waitFor(t, "a ready", rtA.Ready)
	rtB, waitB := watchedInstance(t, b, "b", cfg("b"))
	var once sync.Once
	stop = func() {
		once.Do(func() {
			shutdownAndWait(t, rtA, waitA)
			shutdownAndWait(t, rtB, waitB)
		})
	}
	t.Cleanup(stop)
	waitFor(t, "each instance owning one partition", func() bool {
		return rtB.Ready() && len(ownedPartitions(rtA)) == 1 && len(ownedPartitions(rtB)) == 1
	})
	return rtA, rtB, stop
}

// watchedInstance starts instance name of the bundle, looking at the
// input topics' partition counts every 100ms (not countInterval).
func watchedInstance(t *testing.T, b *bundle, name string, cfg Config) (*Runtime, func() (*Report, error)) {
	t.Helper()
	cfg.Instance = name
	cfg.StatePath = filepath.Join(t.TempDir(), name+".db")
	cfg.Logger = cfg.Logger.With("instance", name) // HANDOFF_TEST_LOG=1 tells them apart
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rt.clog.grow.every = 100 * time.Millisecond
	return rt, start(t, rt, context.Background())
}

// changelogState reads input topic's partition p's changelog whole with
// rt's client and returns the last record of each changelog key (nil:
// a tombstone).
func changelogState(t *testing.T, rt *Runtime, topic string, p int32) map[string][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	last := map[string][]byte{}
	_, err := rt.clog.client.Read(ctx, topic, p, 0, func(batch []changelog.Rec) error {
		for _, r := range batch {
			last[string(r.Key)] = slices.Clone(r.Value)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// routeCount returns the partition count rt routes topic's records by.
func routeCount(rt *Runtime, topic string) int32 {
	if !rt.clog.on() {
		return 0
	}
	return (*rt.clog.parts.Load())[topic]
}

// TestAddedPartitionsMoveRecords (issue 43, case 4): messages scheduled
// across a topic's 2 partitions, through both instances; the input topic
// gains a third partition while they run. The instances notice it, grow
// the changelog topic to 3 partitions, route by 3, and the owner of each
// old partition moves the records whose keys route elsewhere now: each is
// in its new partition's changelog and tombstoned in the old one. Before
// they are due every scheduled message is listed (Runtime.Delayed) by
// exactly the instance that owns the partition its key routes to, and
// every one runs once. Before, the records stayed in their old
// partition, which no owner ran nor listed them from once routed by 3.
func TestAddedPartitionsMoveRecords(t *testing.T) {
	t.Parallel()
	runs := newInstanceRuns("later-")
	b := setup(t, 2, "orders")
	rtA, rtB, stop := twoInstances(t, b, func(name string) Config { return b.config(runs.handler(name), nil) })
	rts := map[string]*Runtime{"a": rtA, "b": rtB}

	const n = 24
	due := time.Now().Add(dueIn)
	keys := scheduleSpread(t, n, due, rtA, rtB)

	addPartitions(t, b, "orders", 3)
	waitFor(t, "both instances routing by 3 and the 3 partitions owned", func() bool {
		return routeCount(rtA, "orders") == 3 && routeCount(rtB, "orders") == 3 &&
			len(ownedPartitions(rtA))+len(ownedPartitions(rtB)) == 3
	})
	if got := topicPartitions(t, b, rtA.clog.client.Topic("orders")); got != 3 {
		t.Fatalf("changelog topic has %d partitions, want 3", got)
	}

	checkRouted(t, rts, keys, due)
	waitRan(t, runs, n, due)
	stop()
	_, ranOn := runs.ran()
	for id := range keys {
		if got := ranOn[id]; len(got) != 1 {
			t.Errorf("%s ran on %v, want once", id, got)
		}
	}
}

// dueIn is how far ahead the tests of added partitions schedule their
// messages: time for the instances to learn the new count, grow the
// changelog, move the records and rebalance on a loaded machine (the
// listings are checked before the messages come due).
const dueIn = 40 * time.Second

// waitRan waits until n scheduled messages ran, due at due, for at most
// 20 s past it.
func waitRan(t *testing.T, runs *instanceRuns, n int, due time.Time) {
	t.Helper()
	for deadline := due.Add(20 * time.Second); ; {
		if got, _ := runs.ran(); got == n {
			return
		}
		if time.Now().After(deadline) {
			got, _ := runs.ran()
			t.Fatalf("%d of %d scheduled messages ran, 20s after they were due", got, n)
		}
		time.Sleep(10 * time.Millisecond) // the poll interval, not a wait for an event
	}
}

// checkRouted checks, before the messages keys lists (ID -> key) are
// due, that each is listed (Runtime.Delayed) by exactly the instance of
// rts that owns its key's partition of 3, and is live in that
// partition's changelog alone; one whose key routed elsewhere by 2 is
// tombstoned in its old partition.
func checkRouted(t *testing.T, rts map[string]*Runtime, keys map[string]string, due time.Time) {
	t.Helper()
	var rtA *Runtime
	for _, rt := range rts {
		rtA = rt
		break
	}
	// Each message is listed by exactly the owner of its key's partition.
	owner := func(key string) string {
		p := kclient.Partition{Topic: "orders", Partition: int(keyPartition([]byte(key), 3))}
		for name, rt := range rts {
			if slices.Contains(ownedPartitions(rt), p) {
				return name
			}
		}
		return ""
	}
	listedBy := func() map[string][]string {
		out := map[string][]string{}
		for name, rt := range rts {
			ds, _, err := rt.Delayed("", 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				out[d.Message.ID] = append(out[d.Message.ID], name)
			}
		}
		return out
	}
	var lastListed map[string][]string
	listedRight := func() bool {
		lastListed = listedBy()
		for id, key := range keys {
			if got := lastListed[id]; len(got) != 1 || got[0] != owner(key) {
				return false
			}
		}
		return true
	}
	// The listings must settle before the messages come due (then they
	// run and leave them).
	deadline := due.Add(-time.Second)
	for !listedRight() {
		if time.Now().After(deadline) {
			t.Fatalf("listings (ID -> instances) %v a second before the messages are due; want each once, by the owner of its key's partition", lastListed)
		}
		time.Sleep(10 * time.Millisecond) // the poll interval, not a wait for an event
	}

	// The changelog: each record in the partition its key routes to by 3,
	// and a record that moved tombstoned in its old partition. The owner
	// of an old partition moves its records after it learned the count,
	// which may be after the listings are right (an instance that owns
	// both partitions lists a record from its file before it moved it in
	// the changelog), so the changelog is read until it is right or the
	// messages come due.
	var wrong []string
	for {
		wrong = misplaced(t, rtA, keys)
		if len(wrong) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the poll interval, not a wait for an event
	}
	for _, w := range wrong {
		t.Error(w)
	}
}

// misplaced returns what is wrong with where keys' records (ID -> key)
// are in topic orders' changelog of 3 partitions: each must be live in
// the partition its key routes to by 3 alone, and a record that moved
// from its partition of 2 tombstoned there.
func misplaced(t *testing.T, rt *Runtime, keys map[string]string) []string {
	t.Helper()
	state := map[int32]map[string][]byte{}
	for p := range int32(3) {
		state[p] = changelogState(t, rt, "orders", p)
	}
	liveIn := func(id string) (parts []int32, ckey string) {
		for p, recs := range state {
			for k, v := range recs {
				if v == nil {
					continue
				}
				if e, err := snapshottest.ParseChangelog([]byte(k), v); err == nil && e.Record != nil && e.Record.Message.ID == id {
					parts, ckey = append(parts, p), k
				}
			}
		}
		return parts, ckey
	}
	var wrong []string
	for id, key := range keys {
		was, now := keyPartition([]byte(key), 2), keyPartition([]byte(key), 3)
		parts, ckey := liveIn(id)
		if len(parts) != 1 || parts[0] != now {
			wrong = append(wrong, fmt.Sprintf("%s (key %s, partition %d of 2, %d of 3) is live in changelog partitions %v, want only %d", id, key, was, now, parts, now))
			continue
		}
		if was != now {
			if v, ok := state[was][ckey]; !ok || v != nil {
				wrong = append(wrong, fmt.Sprintf("%s moved from partition %d to %d: its key's last record in %d is not a tombstone (present %v)", id, was, now, was, ok))
			}
		}
	}
	slices.Sort(wrong)
	return wrong
}

// scheduleSpread schedules n messages "later-<i>" of keys "k-<i>" due at
// due, alternately through each of through, and returns ID -> key; it
// fails the test unless some keys route elsewhere by 3 partitions than by
// 2 and some do not.
func scheduleSpread(t *testing.T, n int, due time.Time, through ...*Runtime) map[string]string {
	t.Helper()
	keys := map[string]string{}
	movers := 0
	for i := range n {
		id, key := fmt.Sprintf("later-%d", i), fmt.Sprintf("k-%d", i)
		keys[id] = key
		if keyPartition([]byte(key), 2) != keyPartition([]byte(key), 3) {
			movers++
		}
		m := &handoff.Message{ID: id, Key: []byte(key), Value: []byte("v")}
		if err := through[i%len(through)].Schedule(context.Background(), "orders", m, due); err != nil {
			t.Fatal(err)
		}
	}
	if movers == 0 || movers == n {
		t.Fatalf("%d of %d keys route elsewhere by 3 partitions: the test needs some of each", movers, n)
	}
	return keys
}

// TestAddedPartitionsAfterRestart (issue 43, case 4): messages scheduled
// across a topic's 2 partitions; the instances stop, the input topic and
// then its changelog gain a partition (by the operator, or by the
// runtime at its start), and the instances start again on new disks, as
// a Deployment's pods do. The
// records whose keys route elsewhere by 3 are moved by the owners of
// their old partitions: each message is listed by exactly the owner of
// its key's partition, lives in that partition's changelog alone
// (tombstoned in the old one), and runs once. Before, a record whose key
// routed to a partition of another instance than its old one was
// stranded: routed by 3 but in the old partition's changelog, run and
// listed by nobody.
func TestAddedPartitionsAfterRestart(t *testing.T) {
	t.Parallel()
	for _, operator := range []bool{true, false} {
		name := map[bool]string{true: "operator grows changelog", false: "runtime grows changelog"}[operator]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addedPartitionsAfterRestart(t, operator)
		})
	}
}

// addedPartitionsAfterRestart is TestAddedPartitionsAfterRestart, the
// changelog topic grown beforehand when operator.
func addedPartitionsAfterRestart(t *testing.T, operator bool) {
	runs := newInstanceRuns("later-")
	b := setup(t, 2, "orders")
	rtA, waitA := b.instance("a", b.config(runs.handler("a"), nil))
	waitFor(t, "a ready", rtA.Ready)
	rtB, waitB := b.instance("b", b.config(runs.handler("b"), nil))
	waitFor(t, "each instance owning one partition", func() bool {
		return rtB.Ready() && len(ownedPartitions(rtA)) == 1 && len(ownedPartitions(rtB)) == 1
	})
	const n = 24
	due := time.Now().Add(dueIn)
	keys := scheduleSpread(t, n, due, rtA, rtB)
	clTopic := rtA.clog.client.Topic("orders")
	shutdownAndWait(t, rtA, waitA)
	shutdownAndWait(t, rtB, waitB)
	if got, _ := runs.ran(); got != 0 {
		t.Fatalf("%d scheduled messages ran before they were due", got)
	}

	addPartitions(t, b, "orders", 3)
	if operator {
		addPartitions(t, b, clTopic, 3)
	}
	rtA, waitA = b.instance("a", b.config(runs.handler("a"), nil))
	rtB, waitB = b.instance("b", b.config(runs.handler("b"), nil))
	var once sync.Once
	stop := func() {
		once.Do(func() {
			shutdownAndWait(t, rtA, waitA)
			shutdownAndWait(t, rtB, waitB)
		})
	}
	t.Cleanup(stop)
	waitFor(t, "the 3 partitions owned", func() bool {
		return rtA.Ready() && rtB.Ready() && len(ownedPartitions(rtA))+len(ownedPartitions(rtB)) == 3
	})
	checkRouted(t, map[string]*Runtime{"a": rtA, "b": rtB}, keys, due)
	if got := topicPartitions(t, b, clTopic); got != 3 {
		t.Errorf("changelog topic has %d partitions, want 3", got)
	}
	waitRan(t, runs, n, due)
	stop()
	_, ranOn := runs.ran()
	for id := range keys {
		if got := ranOn[id]; len(got) != 1 {
			t.Errorf("%s ran on %v, want once", id, got)
		}
	}
}

// blocks reports whether rt's class orders holds a block or release of
// key.
func blocks(rt *Runtime, key string) bool {
	k := rt.classes.byName["orders"].keys
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys[key] != nil
}

// TestAddedPartitionsMoveKeyBlocks (issue 43, cases 4 and 5): in an
// ordered class, a dead letter of a key in each partition of 2 blocks
// its key on the partition's owner; the input topic gains a third
// partition, to which both keys route now. The dead letters move there:
// the new partition's owner lists them and blocks their keys, the other
// instance holds no block of them (it dropped the one it held), and once
// they are requeued there and run, later submits of the keys through
// either instance run, none parks.
func TestAddedPartitionsMoveKeyBlocks(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	runs := map[string]int{}
	fail := map[string]bool{}
	h := func(ctx context.Context, m *handoff.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if fail[m.ID] {
			return handoff.Permanent(errors.New("bad input"))
		}
		runs[m.ID]++
		return nil
	}
	ran := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return runs[id]
	}
	b := setup(t, 2, "orders")
	mod := func(c *Class) { c.Ordered, c.Retry = true, RetryPolicy{MaxAttempts: 1} }
	rtA, rtB, stop := twoInstances(t, b, func(string) Config { return b.config(h, mod) })
	rts := map[string]*Runtime{"a": rtA, "b": rtB}
	// A key of each instance's partition of 2 that routes to 2 of 3,
	// dead-lettered through its owner.
	keys := map[string]string{} // instance -> key
	for name, rt := range rts {
		mine := int32(ownedPartitions(rt)[0].Partition)
		for i := 0; ; i++ {
			if k := keyFor("k", mine, 2, i); keyPartition([]byte(k), 3) == 2 {
				keys[name] = k
				break
			}
		}
		id := "dead-" + name
		mu.Lock()
		fail[id] = true
		mu.Unlock()
		if err := rt.Submit(context.Background(), "orders", &handoff.Message{ID: id, Key: []byte(keys[name]), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, name+" blocking its dead letter's key", func() bool { return blocks(rt, keys[name]) })
	}

	addPartitions(t, b, "orders", 3)
	var owner string
	waitFor(t, "both instances routing by 3 and the 3 partitions owned", func() bool {
		if routeCount(rtA, "orders") != 3 || routeCount(rtB, "orders") != 3 || len(ownedPartitions(rtA))+len(ownedPartitions(rtB)) != 3 {
			return false
		}
		for name, rt := range rts {
			if slices.Contains(ownedPartitions(rt), kclient.Partition{Topic: "orders", Partition: 2}) {
				owner = name
			}
		}
		return true
	})
	var dead []string
	waitFor(t, "the new partition's owner listing both dead letters and blocking their keys", func() bool {
		ds, _, err := rts[owner].DeadLetters("orders", "", 10)
		if err != nil || len(ds) != 2 {
			return false
		}
		dead = []string{ds[0].Key, ds[1].Key}
		return blocks(rts[owner], keys["a"]) && blocks(rts[owner], keys["b"])
	})
	for name, rt := range rts {
		if name == owner {
			continue
		}
		waitFor(t, name+" dropping its blocks of the keys", func() bool { return !blocks(rt, keys["a"]) && !blocks(rt, keys["b"]) })
		if ds, _, err := rt.DeadLetters("orders", "", 10); err != nil || len(ds) != 0 {
			t.Errorf("%s lists %d dead letters (err %v), want none: the keys' partition is %s's", name, len(ds), err, owner)
		}
	}
	mu.Lock()
	clear(fail)
	mu.Unlock()
	for _, k := range dead {
		if err := rts[owner].Requeue(context.Background(), k); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the requeued dead letters run", func() bool { return ran("dead-a") == 1 && ran("dead-b") == 1 })
	var later []string
	for name, rt := range rts {
		for kn, k := range keys {
			id := fmt.Sprintf("later-%s-%s", name, kn)
			later = append(later, id)
			if err := rt.Submit(context.Background(), "orders", &handoff.Message{ID: id, Key: []byte(k), Value: []byte("v")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, "the later submits of the keys run", func() bool {
		for _, id := range later {
			if ran(id) != 1 {
				return false
			}
		}
		return true
	})
	stop()
	for _, id := range append(later, "dead-a", "dead-b") {
		if n := ran(id); n != 1 {
			t.Errorf("%s ran %d times, want 1", id, n)
		}
	}
}
