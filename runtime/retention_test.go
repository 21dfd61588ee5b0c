package runtime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// retentionTurn is how often the retention turns in these tests.
const retentionTurn = 50 * time.Millisecond

// retentionRun starts a runtime on b with one class, "orders", whose
// handler fails every message whose value starts with "bad" for good and
// records the others; mod adjusts the class. It returns the runtime, its
// registry and the wait for Run.
func retentionRun(t *testing.T, b *bundle, statePath string, mod func(*Class)) (*Runtime, *prometheus.Registry, func() (*Report, error)) {
	t.Helper()
	return retentionRunWith(t, b, statePath, mod, nil)
}

// retentionRunWith is retentionRun with before called on the runtime
// before it runs.
func retentionRunWith(t *testing.T, b *bundle, statePath string, mod func(*Class), before func(*Runtime)) (*Runtime, *prometheus.Registry, func() (*Report, error)) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := b.config(nil, nil)
	cfg.StatePath = statePath
	cfg.Registerer = reg
	c := Class{Name: "orders", Topics: []string{"orders"}, Workers: 1,
		Handler: func(_ context.Context, m *handoff.Message) error {
			if len(m.Value) >= 3 && string(m.Value[:3]) == "bad" {
				return handoff.Permanent(errors.New("cannot parse"))
			}
			b.record(m)
			return nil
		}}
	if mod != nil {
		mod(&c)
	}
	cfg.Classes = []Class{c}
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rt.retain.every = retentionTurn
	if before != nil {
		before(rt)
	}
	return rt, reg, start(t, rt, context.Background())
}

// deadValues lists rt's dead letters' values, in the order they failed.
func deadValues(t *testing.T, rt *Runtime) []string {
	t.Helper()
	dls, _, err := rt.DeadLetters("", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(dls))
	for i, dl := range dls {
		out[i] = string(dl.Message.Value)
	}
	return out
}

// listed reports whether rt's dead letters' values are want; false
// too before rt runs.
func listed(rt *Runtime, want []string) bool {
	dls, _, err := rt.DeadLetters("", "", 1000)
	if err != nil || len(dls) != len(want) {
		return false
	}
	for i, dl := range dls {
		if string(dl.Message.Value) != want[i] {
			return false
		}
	}
	return true
}

// droppedOnDLQ returns the values of the records of topic that carry
// HeaderDropped with reason, and how many records the topic holds.
func droppedOnDLQ(t *testing.T, b *bundle, topic, reason string) (values []string, all int) {
	t.Helper()
	recs := readRaw(t, b.broker.Addr(), topic)
	for _, r := range recs {
		for _, h := range r.headers {
			if h.Key == HeaderDropped && string(h.Value) == reason {
				values = append(values, string(r.value))
			}
		}
	}
	slices.Sort(values)
	return values, len(recs)
}

// waitTurns waits until rt's retention turned n more times.
func waitTurns(t *testing.T, rt *Runtime, n uint64) {
	t.Helper()
	from := rt.retain.turns.Load()
	waitFor(t, fmt.Sprintf("%d turns of the retention", n), func() bool { return rt.retain.turns.Load() >= from+n })
}

// emptyDiskLists starts an instance of b's group without bounds on an
// empty disk, waits until it is ready (its partitions restored from the
// changelog) and returns the dead letters it lists.
func emptyDiskLists(t *testing.T, b *bundle) []string {
	t.Helper()
	rt, _, wait := retentionRun(t, b, filepath.Join(t.TempDir(), "empty.db"), nil)
	waitFor(t, "the instance on an empty disk to be ready", rt.Ready)
	got := deadValues(t, rt)
	shutdownAndWait(t, rt, wait)
	return got
}

// TestDeadLetterRetentionAge checks that dead letters older than their
// class's DeadLetterRetention are published to its DeadLetterTopic with
// HeaderDropped, then leave the state file and the changelog (an
// instance on an empty disk does not list them), counted.
func TestDeadLetterRetentionAge(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders", "orders-dlq")
	rt, reg, wait := retentionRun(t, b, b.state, func(c *Class) {
		c.DeadLetterTopic = "orders-dlq"
		c.DeadLetterRetention = 300 * time.Millisecond
	})
	bad := []string{"bad0", "bad1", "bad2", "bad3", "bad4", "bad5"}
	produced := b.produceValues("orders", "k", append(slices.Clone(bad), "ok")...)
	waitFor(t, "every dead letter dropped for its age", func() bool {
		n, _ := metricValue(t, reg, "handoff_dead_letters_dropped_total", "reason", dropAge)
		return n == float64(len(bad))
	})
	if got := deadValues(t, rt); len(got) != 0 {
		t.Errorf("dead letters listed after their retention: %v", got)
	}
	if n, _ := metricValue(t, reg, "handoff_dead_letters_dropped_total", "reason", dropCount); n != 0 {
		t.Errorf("%v dead letters dropped for their count without MaxDeadLetters", n)
	}
	waitTurns(t, rt, 2)
	if age, ok := metricValue(t, reg, "handoff_dead_letter_oldest_age_seconds", "class", "orders"); !ok || age != 0 {
		t.Errorf("handoff_dead_letter_oldest_age_seconds = %v (found %v) with no dead letter, want 0", age, ok)
	}
	rep := shutdownAndWait(t, rt, wait)
	dropped, onTopic := droppedOnDLQ(t, b, "orders-dlq", dropAge)
	t.Logf("produced %d, handled %d, dead-lettered %d, published when failed %d, dropped %d, published as dropped %d (topic holds %d)",
		produced, rep.Succeeded, rep.DeadLettered, rep.Published, len(bad), len(dropped), onTopic)
	if rep.DeadLettered != uint64(len(bad)) {
		t.Errorf("dead-lettered %d, want %d", rep.DeadLettered, len(bad))
	}
	if !slices.Equal(dropped, bad) {
		t.Errorf("dropped dead letters on the DLQ topic: %v, want %v", dropped, bad)
	}
	assertCount(t, b.state, snapshot.BucketDead, 0)
	if got := emptyDiskLists(t, b); len(got) != 0 {
		t.Errorf("an instance on an empty disk lists dropped dead letters from the changelog: %v", got)
	}
}

// TestDeadLetterRetentionCount checks that MaxDeadLetters keeps the
// newest dead letters of the class, in the file and the changelog, and
// that the gauge reads their oldest's age.
func TestDeadLetterRetentionCount(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	rt, _, wait := retentionRun(t, b, b.state, func(c *Class) { c.MaxDeadLetters = 3 })
	var values []string
	for i := range 8 {
		values = append(values, fmt.Sprintf("bad%d", i))
	}
	produced := b.produceValues("orders", "k", values...)
	want := values[5:]
	waitFor(t, "the oldest dead letters dropped for their count", func() bool {
		return rt.retain.dropped[0][1].Load() == 5 && listed(rt, want)
	})
	waitTurns(t, rt, 2)
	if got := deadValues(t, rt); !slices.Equal(got, want) {
		t.Errorf("dead letters kept: %v, want the newest 3 %v", got, want)
	}
	rep := shutdownAndWait(t, rt, wait)
	t.Logf("produced %d, dead-lettered %d, dropped for count %d, dropped for age %d",
		produced, rep.DeadLettered, rt.retain.dropped[0][1].Load(), rt.retain.dropped[0][0].Load())
	if rep.DeadLettered != uint64(produced) || rt.retain.dropped[0][1].Load() != 5 || rt.retain.dropped[0][0].Load() != 0 {
		t.Errorf("dead-lettered %d, dropped %d for count and %d for age; want %d, 5, 0", rep.DeadLettered,
			rt.retain.dropped[0][1].Load(), rt.retain.dropped[0][0].Load(), produced)
	}
	assertCount(t, b.state, snapshot.BucketDead, 3)
	if got := emptyDiskLists(t, b); !slices.Equal(got, want) {
		t.Errorf("an instance on an empty disk lists %v, want %v", got, want)
	}
}

// TestDeadLettersKeptWithoutBound checks that a class without bounds
// keeps every dead letter however many turns pass, and that the gauge
// reads the oldest's age.
func TestDeadLettersKeptWithoutBound(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	rt, reg, wait := retentionRun(t, b, b.state, nil)
	before := time.Now()
	produced := b.produceValues("orders", "k", "bad0", "bad1", "bad2", "bad3")
	waitFor(t, "every message dead-lettered", func() bool { return listed(rt, []string{"bad0", "bad1", "bad2", "bad3"}) })
	waitTurns(t, rt, 5)
	dls, _, err := rt.DeadLetters("", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	age, ok := metricValue(t, reg, "handoff_dead_letter_oldest_age_seconds", "class", "orders")
	oldest := dls[0].LastFailed
	for _, dl := range dls {
		if dl.LastFailed.Before(oldest) {
			oldest = dl.LastFailed
		}
	}
	// The gauge is sampled at the last turn and read now: it is at most
	// the age now, and at least the age when the turns were awaited.
	if upper := time.Since(oldest).Seconds(); !ok || age <= 0 || age > upper || age > time.Since(before).Seconds() {
		t.Errorf("handoff_dead_letter_oldest_age_seconds = %v (found %v), want in (0, %v]", age, ok, upper)
	}
	rep := shutdownAndWait(t, rt, wait)
	d0, d1 := rt.retain.dropped[0][0].Load(), rt.retain.dropped[0][1].Load()
	t.Logf("produced %d, dead-lettered %d, kept %d, dropped %d; oldest age %.3fs", produced, rep.DeadLettered, len(dls), d0+d1, age)
	if len(dls) != produced || d0+d1 != 0 {
		t.Errorf("without a bound: %d of %d dead letters kept, %d dropped", len(dls), produced, d0+d1)
	}
	assertCount(t, b.state, snapshot.BucketDead, produced)
}

// TestDeadLetterRetentionReleasesParked checks that dropping the dead
// letter that blocks a key of an ordered class releases the key's parked
// messages, in order, as a discard does.
func TestDeadLetterRetentionReleasesParked(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	rt, _, wait := retentionRun(t, b, b.state, func(c *Class) {
		c.Ordered = true
		c.DeadLetterRetention = 300 * time.Millisecond
	})
	produced := b.produceValues("orders", "k", "bad", "ok1", "ok2")
	waitFor(t, "the parked messages handled once the blocker is dropped", func() bool {
		u, _ := b.counts()
		return u == 2
	})
	rep := shutdownAndWait(t, rt, wait)
	b.mu.Lock()
	order := slices.Clone(b.order)
	b.mu.Unlock()
	t.Logf("produced %d, dead-lettered %d, handled %v, dropped %d", produced, rep.DeadLettered, order, rt.retain.dropped[0][0].Load())
	if rep.DeadLettered != 1 || rt.retain.dropped[0][0].Load() != 1 || len(order) != 2 {
		t.Errorf("dead-lettered %d, dropped %d, handled %d; want 1, 1, 2", rep.DeadLettered, rt.retain.dropped[0][0].Load(), len(order))
	}
	assertCount(t, b.state, snapshot.BucketDead, 0)
	assertCount(t, b.state, snapshot.BucketParked, 0)
}

// TestDeadLetterRetentionConfig checks that negative bounds are refused,
// naming the class.
func TestDeadLetterRetentionConfig(t *testing.T) {
	cfg := Config{StatePath: filepath.Join(t.TempDir(), "s.db"), Classes: []Class{{Name: "orders",
		Handler:             func(context.Context, *handoff.Message) error { return nil },
		DeadLetterRetention: -time.Second, MaxDeadLetters: -1}}}
	_, err := newRuntime(cfg)
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("New with negative bounds: %v, want ErrConfig", err)
	}
	for _, want := range []string{`class "orders": DeadLetterRetention must not be negative`, `class "orders": MaxDeadLetters must not be negative`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestDeadLetterRetentionKeepsUnpublished checks that a dead letter
// beyond its retention whose publish to the DeadLetterTopic fails stays
// in the state, and is dropped at a later turn once its publish
// succeeds.
func TestDeadLetterRetentionKeepsUnpublished(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders", "orders-dlq")
	var failing atomic.Bool
	failing.Store(true)
	var refused atomic.Int64
	rt, _, wait := retentionRunWith(t, b, b.state, func(c *Class) {
		c.DeadLetterTopic = "orders-dlq"
		c.DeadLetterRetention = 100 * time.Millisecond
	}, func(rt *Runtime) {
		publish := rt.retain.publish
		rt.retain.publish = func(ctx context.Context, c *class, rec snapshot.Record, reason string) error {
			if failing.Load() {
				refused.Add(1)
				return errors.New("broker refused the write (test)")
			}
			return publish(ctx, c, rec, reason)
		}
	})
	produced := b.produceValues("orders", "k", "bad0", "bad1")
	waitFor(t, "the publishes of both dead letters beyond their retention refused at a few turns", func() bool {
		return refused.Load() >= 6 && listed(rt, []string{"bad0", "bad1"})
	})
	waitTurns(t, rt, 2)
	if got := deadValues(t, rt); !slices.Equal(got, []string{"bad0", "bad1"}) {
		t.Errorf("dead letters whose publish failed: %v listed, want both kept", got)
	}
	if n := rt.retain.dropped[0][0].Load(); n != 0 {
		t.Errorf("%d dead letters dropped unpublished", n)
	}
	failing.Store(false)
	waitFor(t, "the dead letters dropped once published", func() bool { return listed(rt, nil) })
	rep := shutdownAndWait(t, rt, wait)
	dropped, onTopic := droppedOnDLQ(t, b, "orders-dlq", dropAge)
	t.Logf("produced %d, dead-lettered %d, publishes refused %d, dropped %d, published as dropped %d (topic holds %d)",
		produced, rep.DeadLettered, refused.Load(), rt.retain.dropped[0][0].Load(), len(dropped), onTopic)
	if !slices.Equal(dropped, []string{"bad0", "bad1"}) || rt.retain.dropped[0][0].Load() != 2 {
		t.Errorf("dropped %d, on the DLQ topic as dropped %v; want 2, [bad0 bad1]", rt.retain.dropped[0][0].Load(), dropped)
	}
	assertCount(t, b.state, snapshot.BucketDead, 0)
}

// TestDeadLetterRetentionOwnerOnly checks that an instance bounds only
// the dead letters of the partitions it owns: the copies a partition that
// moved left in its file are neither counted nor dropped, and the new
// owner keeps them.
func TestDeadLetterRetentionOwnerOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	failing := func(_ context.Context, m *handoff.Message) error {
		return handoff.Permanent(errors.New("cannot parse"))
	}
	for p := range 2 {
		b.produceValues("orders", keyOn(p, 2), fmt.Sprintf("p%d-0", p), fmt.Sprintf("p%d-1", p))
	}
	regA := prometheus.NewRegistry()
	cfgA := b.config(failing, func(c *Class) { c.Workers = 1; c.MaxDeadLetters = 4 })
	cfgA.Instance, cfgA.Registerer = "a", regA
	rtA, err := newRuntime(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	rtA.retain.every = retentionTurn
	waitA := start(t, rtA, context.Background())
	waitFor(t, "A's four dead letters", func() bool { dls, _, err := rtA.DeadLetters("", "", 10); return err == nil && len(dls) == 4 })

	rtB, waitB := b.instance("b", b.config(failing, func(c *Class) { c.Workers = 1 }))
	moved := -1
	waitFor(t, "one partition and its dead letters moved to B, the other A's alone", func() bool {
		dlB, _, err := rtB.DeadLetters("", "", 10)
		if err != nil || len(dlB) != 2 || dlB[0].Message.Origin.Partition != dlB[1].Message.Origin.Partition {
			return false
		}
		moved = dlB[0].Message.Origin.Partition
		dlA, _, err := rtA.DeadLetters("", "", 10)
		return err == nil && len(dlA) == 2 && dlA[0].Message.Origin.Partition == 1-moved
	})
	kept := 1 - moved
	// A owns 2 + 3 = 5 dead letters (and keeps 2 copies of the moved
	// partition): the bound of 4 drops 1, the oldest of its own.
	b.produceValues("orders", keyOn(kept, 2), "n0", "n1", "n2")
	want := []string{fmt.Sprintf("p%d-1", kept), "n0", "n1", "n2"}
	waitFor(t, "A's oldest own dead letter dropped", func() bool { return listed(rtA, want) })
	waitTurns(t, rtA, 3)
	if got := deadValues(t, rtA); !slices.Equal(got, want) {
		t.Errorf("A lists %v, want %v", got, want)
	}
	wantB := []string{fmt.Sprintf("p%d-0", moved), fmt.Sprintf("p%d-1", moved)}
	if got := deadValues(t, rtB); !slices.Equal(got, wantB) {
		t.Errorf("B lists %v, want the moved partition's %v", got, wantB)
	}
	dropped, _ := metricValue(t, regA, "handoff_dead_letters_dropped_total", "reason", dropCount)
	repB := shutdownAndWait(t, rtB, waitB)
	repA := shutdownAndWait(t, rtA, waitA)
	t.Logf("produced 7, dead-lettered by A %d and B %d, dropped by A %v (moved partition %d)", repA.DeadLettered, repB.DeadLettered, dropped, moved)
	if dropped != 1 {
		t.Errorf("A dropped %v dead letters, want 1 (its own oldest)", dropped)
	}
	if repA.DeadLettered+repB.DeadLettered != 7 {
		t.Errorf("dead-lettered %d by A and %d by B, want 7 in all", repA.DeadLettered, repB.DeadLettered)
	}
}
