package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
)

// keyFor returns a key that Kafka's default partitioner puts in
// partition p of n, the n-th such key of prefix.
func keyFor(prefix string, p, n int32, nth int) string {
	for i, found := 0, 0; ; i++ {
		key := fmt.Sprintf("%s-%d", prefix, i)
		if keyPartition([]byte(key), n) != p {
			continue
		}
		if found == nth {
			return key
		}
		found++
	}
}

// ownedPartitions returns the partitions whose state rt restored and
// owns; none before its changelog is open.
func ownedPartitions(rt *Runtime) []kclient.Partition {
	return rt.clog.owned()
}

// twoOwners runs instances a and b of a group on a topic "orders" of 2
// partitions, each with the handler hFor returns for its name, and waits
// until each owns one partition. stop shuts both down.
func twoOwners(t *testing.T, hFor func(instance string) handoff.HandlerFunc, mod func(*Class)) (rtA, rtB *Runtime, stop func()) {
	t.Helper()
	b := setup(t, 2, "orders")
	rtA, waitA := b.instance("a", b.config(hFor("a"), mod))
	waitFor(t, "a ready", rtA.Ready)
	rtB, waitB := b.instance("b", b.config(hFor("b"), mod))
	waitFor(t, "each instance owning one partition", func() bool {
		return rtB.Ready() && len(ownedPartitions(rtA)) == 1 && len(ownedPartitions(rtB)) == 1
	})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			shutdownAndWait(t, rtA, waitA)
			shutdownAndWait(t, rtB, waitB)
		})
	}
	t.Cleanup(stop)
	return rtA, rtB, stop
}

// instanceRuns records, for each message whose ID has a prefix, the
// instances it ran on.
type instanceRuns struct {
	prefix string
	mu     sync.Mutex
	on     map[string][]string
}

func newInstanceRuns(prefix string) *instanceRuns {
	return &instanceRuns{prefix: prefix, on: map[string][]string{}}
}

// handler returns instance name's handler: it records the run.
func (r *instanceRuns) handler(name string) handoff.HandlerFunc {
	return func(ctx context.Context, m *handoff.Message) error {
		if strings.HasPrefix(m.ID, r.prefix) {
			r.mu.Lock()
			r.on[m.ID] = append(r.on[m.ID], name)
			r.mu.Unlock()
		}
		return nil
	}
}

// ran returns how many messages ran, and a copy of where each did.
func (r *instanceRuns) ran() (int, map[string][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]string, len(r.on))
	for id, on := range r.on {
		out[id] = slices.Clone(on)
	}
	return len(r.on), out
}

// TestScheduleForAnotherInstancesPartition: a message scheduled through
// an instance that does not own the partition its key belongs to is
// delivered when due by the instance that does, once: the owner applies
// the other instance's changelog write while it runs, not only when the
// partition is next assigned (which, with static membership, may never
// come). Messages scheduled for the instance's own partition are
// delivered by it, as before; none runs twice.
func TestScheduleForAnotherInstancesPartition(t *testing.T) {
	t.Parallel()
	runs := newInstanceRuns("later-")
	rtA, _, stop := twoOwners(t, runs.handler, nil)
	mineA := int32(ownedPartitions(rtA)[0].Partition)
	due := time.Now().Add(time.Second)
	want := map[string]string{} // ID -> the instance that owns its partition
	for p := range int32(2) {
		owner := "b"
		if p == mineA {
			owner = "a"
		}
		for n := range 2 {
			id := fmt.Sprintf("later-%d-%d", p, n)
			m := &handoff.Message{ID: id, Key: []byte(keyFor("k", p, 2, n)), Value: []byte("later")}
			if err := rtA.Schedule(context.Background(), "orders", m, due); err != nil {
				t.Fatal(err)
			}
			want[id] = owner
		}
	}
	waitFor(t, "every scheduled message run", func() bool { n, _ := runs.ran(); return n == len(want) })
	stop()
	_, ranOn := runs.ran()
	for id, owner := range want {
		if got := ranOn[id]; len(got) != 1 || got[0] != owner {
			t.Errorf("%s ran on %v, want once, on %s", id, got, owner)
		}
	}
}

// TestDeadLetterOfAnotherInstanceListedByOwner: a submitted message that
// failed for good on an instance that does not own its key's partition
// is a dead letter of that partition: its owner lists it while it runs
// (the instance that wrote it does not, as for any partition it does
// not own), and a requeue through the owner runs it there, once.
func TestDeadLetterOfAnotherInstanceListedByOwner(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	runs := map[string]int{}
	fail := true
	h := func(ctx context.Context, m *handoff.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if !strings.HasPrefix(m.ID, "sub-") {
			return nil
		}
		if fail {
			return handoff.Permanent(errors.New("bad input"))
		}
		runs[m.ID]++
		return nil
	}
	rtA, rtB, _ := twoOwners(t, func(string) handoff.HandlerFunc { return h }, func(c *Class) { c.Retry = RetryPolicy{MaxAttempts: 1} })
	other := int32(ownedPartitions(rtB)[0].Partition)
	m := &handoff.Message{ID: "sub-1", Key: []byte(keyFor("k", other, 2, 0)), Value: []byte("v")}
	if err := rtA.Submit(context.Background(), "orders", m); err != nil {
		t.Fatal(err)
	}
	var key string
	waitFor(t, "b listing a's dead letter of its partition", func() bool {
		ds, _, err := rtB.DeadLetters("orders", "", 10)
		if err != nil || len(ds) != 1 {
			return false
		}
		key = ds[0].Key
		return ds[0].Message.ID == "sub-1"
	})
	if ds, _, err := rtA.DeadLetters("orders", "", 10); err != nil || len(ds) != 0 {
		t.Errorf("a lists %d dead letters (err %v), want none: the partition is b's", len(ds), err)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	if err := rtB.Requeue(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the requeued dead letter run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return runs["sub-1"] == 1
	})
	waitFor(t, "b's dead letters empty", func() bool {
		ds, _, err := rtB.DeadLetters("orders", "", 10)
		return err == nil && len(ds) == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if runs["sub-1"] != 1 {
		t.Errorf("sub-1 ran %d times after its requeue, want 1", runs["sub-1"])
	}
}

// TestSubmittedSavedByAnotherInstanceRunsOnOwner: a submitted message
// whose key belongs to another instance's partition, cut short by its
// instance's stop and saved, runs on the partition's owner while the
// owner runs: the stop's snapshot goes to that partition's changelog,
// and the owner pushes what other instances saved there to its pools
// (before, it waited for the partition's next assignment). Counted:
// submitted 1, saved by a 1, followed and re-pushed by b 1, run on b 1.
func TestSubmittedSavedByAnotherInstanceRunsOnOwner(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	ranOn := map[string][]string{}
	started := make(chan struct{}, 1)
	hFor := func(name string) handoff.HandlerFunc {
		return func(ctx context.Context, m *handoff.Message) error {
			if !strings.HasPrefix(m.ID, "sub-") {
				return nil
			}
			if name == "a" {
				started <- struct{}{}
				<-ctx.Done() // the hard stop: interrupted, saved
				return ctx.Err()
			}
			mu.Lock()
			ranOn[m.ID] = append(ranOn[m.ID], name)
			mu.Unlock()
			return nil
		}
	}
	b := setup(t, 2, "orders")
	cfgA := b.config(hFor("a"), nil)
	cfgA.DrainTimeout, cfgA.HardStopGrace = 50*time.Millisecond, time.Second
	rtA, waitA := b.instance("a", cfgA)
	waitFor(t, "a ready", rtA.Ready)
	rtB, waitB := b.instance("b", b.config(hFor("b"), nil))
	waitFor(t, "each instance owning one partition", func() bool {
		return rtB.Ready() && len(ownedPartitions(rtA)) == 1 && len(ownedPartitions(rtB)) == 1
	})
	other := int32(ownedPartitions(rtB)[0].Partition)
	m := &handoff.Message{ID: "sub-1", Key: []byte(keyFor("k", other, 2, 0)), Value: []byte("v")}
	if err := rtA.Submit(context.Background(), "orders", m); err != nil {
		t.Fatal(err)
	}
	<-started
	repA := stopAndWait(t, rtA, waitA)
	if repA.Snapshotted != 1 || repA.Interrupted != 1 {
		t.Fatalf("a's stop: snapshotted %d, interrupted %d; want 1 and 1 (%v)", repA.Snapshotted, repA.Interrupted, repA)
	}
	waitFor(t, "b running a's saved message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ranOn["sub-1"]) > 0
	})
	repB := shutdownAndWait(t, rtB, waitB)
	mu.Lock()
	defer mu.Unlock()
	if got := ranOn["sub-1"]; len(got) != 1 {
		t.Errorf("sub-1 ran on %v, want once, on b", got)
	}
	// On kafka-go a's leaving revokes b's partition too (an eager
	// rebalance), whose restore may push the message before b follows.
	if testClient() == ClientFranzGo && (repB.Followed < 1 || repB.Repushed < 1) {
		t.Errorf("b's report: followed %d, repushed %d; want at least 1 each", repB.Followed, repB.Repushed)
	}
}

// TestPartLocksRevokeEndsFollow: a revocation ends the follow of its
// partition under way (its context) and waits for it to unlock before it
// goes on; a follow of another partition goes on untouched.
func TestPartLocksRevokeEndsFollow(t *testing.T) {
	t.Parallel()
	var pl partLocks
	p, q := kclient.Partition{Topic: "t", Partition: 0}, kclient.Partition{Topic: "t", Partition: 1}
	ctxP, cancelP := context.WithCancel(context.Background())
	defer cancelP()
	ctxQ, cancelQ := context.WithCancel(context.Background())
	defer cancelQ()
	unlockP := pl.lock(p, cancelP)
	unlockQ := pl.lock(q, cancelQ)
	revoked := make(chan struct{})
	go func() {
		unlock := pl.revoke(p)
		close(revoked)
		unlock()
	}()
	<-ctxP.Done() // the revocation ended the follow's work
	select {
	case <-revoked:
		t.Fatal("revoke returned while the follow of its partition still held the lock")
	case <-time.After(20 * time.Millisecond):
	}
	unlockP()
	<-revoked
	if ctxQ.Err() != nil {
		t.Error("revoking one partition ended another's follow")
	}
	unlockQ()
	// The lock is free again, with no follow to end.
	pl.revoke(p)()
}

// TestScheduledAcrossRebalanceRunOnce: messages scheduled through one
// instance for every partition, followed by their owners, then moved by a
// rebalance (a third instance joins) before they are due, each run once:
// only a partition's owner delivers, the old owner's copy stays unused in
// its file, and the new owner's restore brings the schedule from the
// changelog. Counted: scheduled 16, run 16, none twice.
func TestScheduledAcrossRebalanceRunOnce(t *testing.T) {
	t.Parallel()
	const parts, n = 4, 16
	runs := newInstanceRuns("later-")
	hFor := runs.handler
	b := setup(t, parts, "orders")
	rtA, waitA := b.instance("a", b.config(hFor("a"), nil))
	waitFor(t, "a ready", rtA.Ready)
	rtB, waitB := b.instance("b", b.config(hFor("b"), nil))
	waitFor(t, "a and b owning two partitions each", func() bool {
		return rtB.Ready() && len(ownedPartitions(rtA)) == 2 && len(ownedPartitions(rtB)) == 2
	})
	due := time.Now().Add(3 * time.Second)
	for i := range n {
		p := int32(i % parts)
		m := &handoff.Message{ID: fmt.Sprintf("later-%d", i), Key: []byte(keyFor("k", p, parts, i/parts)), Value: []byte("later")}
		if err := rtA.Schedule(context.Background(), "orders", m, due); err != nil {
			t.Fatal(err)
		}
	}
	// b follows a's writes to its partitions within about a second.
	waitFor(t, "b holding the schedules of its partitions", func() bool {
		ds, _, err := rtB.Delayed("", 100)
		return err == nil && len(ds) == n/2
	})
	rtC, waitC := b.instance("c", b.config(hFor("c"), nil))
	waitFor(t, "c owning a partition", func() bool { return len(ownedPartitions(rtC)) > 0 })
	if time.Now().After(due) {
		t.Logf("the rebalance ended %s after the messages were due", time.Since(due))
	}
	waitFor(t, "every scheduled message run", func() bool { k, _ := runs.ran(); return k == n })
	shutdownAndWait(t, rtC, waitC)
	shutdownAndWait(t, rtB, waitB)
	shutdownAndWait(t, rtA, waitA)
	_, ranOn := runs.ran()
	for id, on := range ranOn {
		if len(on) != 1 {
			t.Errorf("%s ran %d times, on %v; want once", id, len(on), on)
		}
	}
}

// TestRollingDeployScheduled: messages scheduled through random
// instances of a group of three while each instance in turn is replaced
// by a new pod on an empty disk (a Deployment's rollout), due at random
// times across the rollout, each run once, by whichever instance owns
// its key's partition when it is due: the owner follows the schedules
// others write, and a new owner restores them from the changelog.
// Counted: scheduled 30, run 30, none twice.
func TestRollingDeployScheduled(t *testing.T) {
	t.Parallel()
	const instances, parts, perStep = 3, 4, 10
	b := setup(t, parts, "orders")
	dir := t.TempDir()
	var mu sync.Mutex
	runs := map[string]int{}
	early := 0
	dueOf := map[string]time.Time{}
	h := func(ctx context.Context, m *handoff.Message) error {
		mu.Lock()
		defer mu.Unlock()
		runs[m.ID]++
		if time.Now().Before(dueOf[m.ID]) {
			early++
		}
		return nil
	}
	pod := 0
	newPod := func() (*Runtime, func() (*Report, error)) {
		cfg := b.config(h, nil)
		cfg.Instance = fmt.Sprintf("pod-%d", pod)
		cfg.StatePath = filepath.Join(dir, fmt.Sprintf("pod-%d.db", pod)) // a new pod: an empty disk
		pod++
		rt, err := newRuntime(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return rt, start(t, rt, context.Background())
	}
	rts := make([]*Runtime, instances)
	waits := make([]func() (*Report, error), instances)
	for i := range instances {
		rts[i], waits[i] = newPod()
		waitFor(t, "ready", rts[i].Ready)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	n := 0
	for step := range instances {
		for range perStep {
			id := fmt.Sprintf("s-%03d", n)
			n++
			due := time.Now().Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			mu.Lock()
			dueOf[id] = due
			mu.Unlock()
			via := rts[rng.IntN(instances)]
			m := &handoff.Message{ID: id, Key: fmt.Appendf(nil, "key-%d", rng.IntN(100)), Value: []byte(id)}
			if err := via.Schedule(context.Background(), "orders", m, due); err != nil {
				t.Fatal(err)
			}
		}
		shutdownAndWait(t, rts[step], waits[step])
		rts[step], waits[step] = newPod()
		waitFor(t, "the new pod ready", rts[step].Ready)
	}
	waitFor(t, "every scheduled message run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == n
	})
	for i := range instances {
		shutdownAndWait(t, rts[i], waits[i])
	}
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for id, k := range runs {
		if k > 1 {
			twice++
			t.Errorf("%s ran %d times", id, k)
		}
	}
	if early > 0 {
		t.Errorf("%d runs before their due time", early)
	}
	t.Logf("scheduled %d through %d pods, ran %d, twice %d", n, pod, len(runs), twice)
}
