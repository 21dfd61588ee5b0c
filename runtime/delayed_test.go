package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestScheduleSurvivesRestart: scheduled messages wait in the state file,
// a duplicate ID is ignored, a restart loses none, and each is handed over
// when due, not before.
func TestScheduleSurvivesRestart(t *testing.T) {
	t.Parallel()
	state := t.TempDir() + "/s.db"
	type run struct {
		id string
		at time.Time
	}
	got := make(chan run, 10)
	cfg := Config{StatePath: state, Logger: testLogger(t), Classes: []Class{{Name: "mail",
		Handler: func(_ context.Context, m *handoff.Message) error { got <- run{m.ID, time.Now()}; return nil }}}}
	rt, _ := newRuntime(cfg)
	wait := start(t, rt, context.Background())
	waitFor(t, "ready", rt.Ready)
	due := time.Now().Add(700 * time.Millisecond)
	for _, id := range []string{"a", "b", "a"} {
		if err := rt.Schedule(context.Background(), "mail", &handoff.Message{ID: id}, due); err != nil {
			t.Fatal(err)
		}
	}
	if err := rt.Schedule(context.Background(), "mail", &handoff.Message{ID: "now"}, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.id != "now" {
		t.Fatalf("first handled %s", r.id)
	}
	list, _, err := rt.Delayed("", 10)
	if err != nil || len(list) != 2 {
		t.Fatalf("delayed: %v %v", list, err)
	}
	rt.Shutdown(context.Background())
	rep, err := wait()
	if err != nil || rep.Scheduled != 2 {
		t.Fatalf("%v %v", rep, err)
	}

	rt2, _ := newRuntime(cfg)
	wait2 := start(t, rt2, context.Background())
	a, b := <-got, <-got
	rt2.Shutdown(context.Background())
	if _, err := wait2(); err != nil {
		t.Fatal(err)
	}
	// Both are due at once and the class has 8 workers: they may finish
	// in either order.
	if ids := a.id + b.id; ids != "ab" && ids != "ba" {
		t.Errorf("handled %s %s", a.id, b.id)
	}
	if a.at.Before(due) || b.at.Before(due) {
		t.Errorf("handled before due: %s", due.Sub(a.at))
	}
	select {
	case r := <-got:
		t.Errorf("duplicate ID handled: %s", r.id)
	default:
	}
	assertCount(t, state, snapshot.BucketDelayed, 0)
}

func assertCount(t *testing.T, path, bucket string, want int) {
	t.Helper()
	counts := snapshottest.Counts(t, path)
	if counts[bucket] != want {
		t.Errorf("%s records: %d, want %d (all: %v)", bucket, counts[bucket], want, counts)
	}
}

// TestSchedulerDoesNotScan: with 2000 messages due at 20 different times,
// the scheduler reads each record about once: it sleeps until the next due
// time instead of polling the bucket, and hands each over when due.
func TestSchedulerDoesNotScan(t *testing.T) {
	t.Parallel()
	state := t.TempDir() + "/s.db"
	const n, times = 2000, 20
	base := time.Now().Add(500 * time.Millisecond)
	var items []snapshot.Delayed
	for i := range n {
		at := base.Add(time.Duration(i%times) * 40 * time.Millisecond)
		items = append(items, snapshot.Delayed{Due: at, Record: snapshot.Record{Message: handoff.Message{ID: fmt.Sprint(i), Class: "mail",
			Value: []byte(at.Format(time.RFC3339Nano))}}})
	}
	snapshottest.SeedDelayed(t, state, items...)

	done := make(chan struct{})
	count, early := 0, 0
	logger, delayedRead := countDelayedReads(t)
	cfg := Config{StatePath: state, Logger: logger, Classes: []Class{{Name: "mail", Workers: 1, QueueSize: n,
		Handler: func(_ context.Context, m *handoff.Message) error {
			// One worker: no lock needed.
			if due, _ := time.Parse(time.RFC3339Nano, string(m.Value)); time.Now().Before(due) {
				early++
			}
			count++
			if count == n {
				close(done)
			}
			return nil
		}}}}
	rt, _ := newRuntime(cfg)
	wait := start(t, rt, context.Background())
	<-done
	reads := delayedRead.Load()
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if early != 0 {
		t.Errorf("%d messages handed over before they were due", early)
	}
	// Each read returns its due records plus one look at the next: about
	// n + one per due time (and per batch of 256).
	if limit := uint64(n + 2*times + n/schedBatch + 5); reads > limit {
		t.Errorf("scheduler read %d records for %d messages (limit %d): it scans", reads, n, limit)
	}
	if reads < n {
		t.Errorf("scheduler read %d records for %d messages: the count misses reads", reads, n)
	}
	t.Logf("%d delayed messages at %d due times, %d records read", n, times, reads)
}

// TestDeliverAtHeader: a Kafka record with a future deliver-at header
// waits in the state file (its offset committed) until due; a malformed
// header makes a dead letter. The due time is 3s ahead: the runtime's
// start (the group's join) must end before it, or the record is due when
// fetched and runs at once (it took over 500ms once under a loaded CI
// run on kafka-go).
func TestDeliverAtHeader(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	due := time.Now().Add(3 * time.Second)
	w := devbroker.NewWriter(b.broker.Addrs())
	err := w.WriteMessages(context.Background(),
		kafka.Message{Topic: "orders", Value: []byte("later"), Headers: []kafka.Header{{Key: HeaderDeliverAt, Value: []byte(due.Format(time.RFC3339Nano))}}},
		kafka.Message{Topic: "orders", Value: []byte("bad"), Headers: []kafka.Header{{Key: HeaderDeliverAt, Value: []byte("tomorrow")}}},
		kafka.Message{Topic: "orders", Value: []byte("now")},
	)
	devbroker.CloseWriter(w)
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		v  string
		at time.Time
	}
	got := make(chan run, 5)
	rt, _ := newRuntime(b.config(func(_ context.Context, m *handoff.Message) error {
		got <- run{string(m.Value), time.Now()}
		return nil
	}, nil))
	wait := start(t, rt, context.Background())
	first, second := <-got, <-got
	waitFor(t, "commit", func() bool { return b.committed() == 3 })
	rt.Shutdown(context.Background())
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if first.v != "now" || second.v != "later" || second.at.Before(due) {
		t.Errorf("handled %s then %s (%s before due)", first.v, second.v, due.Sub(second.at))
	}
	if rep.Deferred != 1 || rep.DeadLettered != 1 || rep.Delivered != 1 {
		t.Errorf("report %v", rep)
	}
	dead := snapshottest.Dead(t, b.state)
	if len(dead) != 1 || !strings.Contains(dead[0].Record.Err, HeaderDeliverAt) || dead[0].Record.Message.Attempt != 1 {
		t.Errorf("dead letters %+v", dead)
	}
}

// TestRequeueAndDiscard: the dead-letter API on a running runtime; in an
// ordered class, parked messages follow their key's dead letter in order
// once it is requeued with success, or discarded.
func TestRequeueAndDiscard(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	w := devbroker.NewWriter(b.broker.Addrs())
	var msgs []kafka.Message
	for i, k := range []string{"a", "a", "b", "a", "b", "c"} {
		msgs = append(msgs, kafka.Message{Topic: "orders", Key: []byte(k), Value: fmt.Appendf(nil, "%s%d", k, i)})
	}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	devbroker.CloseWriter(w)
	poisoned := map[string]bool{"a0": true, "b2": true}
	handled := make(chan string, 10)
	rt, _ := newRuntime(b.config(func(_ context.Context, m *handoff.Message) error {
		if poisoned[string(m.Value)] {
			return handoff.Permanent(errors.New("poison"))
		}
		handled <- string(m.Value)
		return nil
	}, func(c *Class) { c.Ordered = true; c.Workers = 2 }))
	wait := start(t, rt, context.Background())
	if v := <-handled; v != "c5" {
		t.Fatalf("handled %s; a and b should be parked", v)
	}
	waitFor(t, "parking", func() bool { return rt.tally.total(evParked) == 3 })
	keys, err := rt.ParkedKeys()
	if err != nil || len(keys) != 2 || keys[0].Count+keys[1].Count != 3 {
		t.Fatalf("parked keys %+v %v", keys, err)
	}
	dls, next, err := rt.DeadLetters("orders", "", 1)
	if err != nil || len(dls) != 1 || next == "" {
		t.Fatalf("page 1: %+v %q %v", dls, next, err)
	}
	dlA := dls[0]
	dls, next, err = rt.DeadLetters("orders", next, 1)
	if err != nil || len(dls) != 1 || next != "" {
		t.Fatalf("page 2: %+v %q %v", dls, next, err)
	}
	dlB := dls[0]
	if string(dlA.Message.Value) == "b2" { // two workers: either may fail first
		dlA, dlB = dlB, dlA
	}
	if string(dlA.Message.Value) != "a0" || string(dlB.Message.Value) != "b2" || dlA.Err == "" {
		t.Fatalf("dead letters %+v %+v", dlA, dlB)
	}
	if _, err := rt.GetDeadLetter(t.Context(), "0000000000000000-12345"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown key: %v", err)
	}
	if _, err := rt.GetDeadLetter(t.Context(), "12345"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a bare number with the changelog: %v, want ErrNotFound", err)
	}
	// Requeue a's dead letter with the poison cured: a0, a1, a3 in order.
	delete(poisoned, "a0")
	if err := rt.Requeue(context.Background(), dlA.Key); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a0", "a1", "a3"} {
		if v := <-handled; v != want {
			t.Fatalf("handled %s, want %s", v, want)
		}
	}
	// Discard b's: b4 runs.
	if err := rt.Discard(context.Background(), dlB.Key); err != nil {
		t.Fatal(err)
	}
	if v := <-handled; v != "b4" {
		t.Fatalf("handled %s, want b4", v)
	}
	if err := rt.Discard(context.Background(), dlB.Key); !errors.Is(err, ErrNotFound) {
		t.Errorf("second discard: %v", err)
	}
	waitFor(t, "dead letter removed", func() bool { d, _, _ := rt.DeadLetters("", "", 10); return len(d) == 0 })
	rt.Shutdown(context.Background())
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Parked != 3 || rep.Released != 3 || rep.Requeued != 1 || rep.Discarded != 1 {
		t.Errorf("report %v", rep)
	}
	assertCount(t, b.state, snapshot.BucketParked, 0)
}

// TestParkedSurviveRestart: a blocked key stays blocked across a restart
// and its parked messages run in order after the dead letter is requeued.
func TestParkedSurviveRestart(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	w := devbroker.NewWriter(b.broker.Addrs())
	var msgs []kafka.Message
	for i := range 5 {
		msgs = append(msgs, kafka.Message{Topic: "orders", Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", i)})
	}
	w.WriteMessages(context.Background(), msgs...)
	devbroker.CloseWriter(w)
	poison := true
	handled := make(chan string, 10)
	cfg := b.config(func(_ context.Context, m *handoff.Message) error {
		if poison && string(m.Value) == "v1" {
			return handoff.Permanent(errors.New("poison"))
		}
		handled <- string(m.Value)
		return nil
	}, func(c *Class) { c.Ordered = true })
	rt, _ := newRuntime(cfg)
	wait := start(t, rt, context.Background())
	<-handled // v0
	waitFor(t, "parking", func() bool { return rt.tally.total(evParked) == 3 })
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	poison = false
	rt2, _ := newRuntime(cfg)
	wait2 := start(t, rt2, context.Background())
	waitFor(t, "ready", rt2.Ready)
	dls, _, _ := rt2.DeadLetters("", "", 10)
	if len(dls) != 1 {
		t.Fatalf("dead letters after restart: %d", len(dls))
	}
	select {
	case v := <-handled:
		t.Fatalf("%s ran while its key is blocked", v)
	case <-time.After(200 * time.Millisecond):
	}
	if err := rt2.Requeue(context.Background(), dls[0].Key); err != nil {
		t.Fatal(err)
	}
	var order []string
	for range 4 {
		order = append(order, <-handled)
	}
	rt2.Shutdown(context.Background())
	rep, err := wait2()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, ",") != "v1,v2,v3,v4" || rep.BlockedKeys != 1 {
		t.Errorf("order %v, report %v", order, rep)
	}
}

// TestDeadLetterTopic: a class's dead letters are also published, with
// headers naming their origin, attempts and error.
func TestDeadLetterTopic(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders", "orders-dlq")
	w := devbroker.NewWriter(b.broker.Addrs())
	if err := w.WriteMessages(context.Background(), kafka.Message{Topic: "orders", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	devbroker.CloseWriter(w)
	cfg := b.config(nil, nil)
	cfg.Classes = []Class{{Name: "orders", Topics: []string{"orders"}, DeadLetterTopic: "orders-dlq",
		Handler: func(context.Context, *handoff.Message) error { return handoff.Permanent(errors.New("cannot parse")) }}}
	h := deadLetterHeaders(t, b, cfg)
	if h[HeaderOriginTopic] != "orders" || h[HeaderOriginOffset] != "0" || h[HeaderAttempts] != "1" ||
		!strings.Contains(h[HeaderError], "cannot parse") || h[HeaderClass] != "orders" {
		t.Errorf("headers %v", h)
	}
}

// deadLetterHeaders runs cfg until it has published one dead letter,
// stops it and returns the headers of the first record on orders-dlq
// (partition 0), by key.
func deadLetterHeaders(t *testing.T, b *bundle, cfg Config) map[string]string {
	t.Helper()
	rt, wait := startNew(t, cfg)
	waitFor(t, "published", func() bool { return rt.tally.total(evPublished) == 1 })
	stopAndWait(t, rt, wait)
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: b.broker.Addrs(), Topic: "orders-dlq", Partition: 0, MaxWait: 100 * time.Millisecond})
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := rd.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{}
	for _, x := range m.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

// TestOfflineRequeueRunsFirst: a dead letter requeued offline (the CLI
// moves it to pending) runs before the messages parked behind it.
func TestOfflineRequeueRunsFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	w := devbroker.NewWriter(b.broker.Addrs())
	var msgs []kafka.Message
	for i := range 4 {
		msgs = append(msgs, kafka.Message{Topic: "orders", Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", i)})
	}
	w.WriteMessages(context.Background(), msgs...)
	devbroker.CloseWriter(w)
	var poison atomic.Bool
	poison.Store(true)
	handled := make(chan string, 10)
	cfg := b.config(func(_ context.Context, m *handoff.Message) error {
		if poison.Load() && string(m.Value) == "v1" {
			return handoff.Permanent(errors.New("poison"))
		}
		handled <- string(m.Value)
		return nil
	}, func(c *Class) { c.Ordered = true })
	rt, _ := newRuntime(cfg)
	wait := start(t, rt, context.Background())
	<-handled
	waitFor(t, "parking", func() bool { return rt.tally.total(evParked) == 2 })
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	// The dead letter requeued offline, as the CLI's dead requeue does it.
	dead := snapshottest.Dead(t, b.state)
	st, err := snapshot.Open(b.state, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, ok, err := st.DeadByID(dead[0].ID)
	if err == nil && !ok {
		err = fmt.Errorf("dead letter %s not found", dead[0].ID)
	}
	if err == nil {
		_, err = st.RequeueDead(e.Key)
	}
	if err := errors.Join(err, st.Close()); err != nil {
		t.Fatal(err)
	}
	poison.Store(false)
	rt2, _ := newRuntime(cfg)
	wait2 := start(t, rt2, context.Background())
	var order []string
	for range 3 {
		order = append(order, <-handled)
	}
	rt2.Shutdown(context.Background())
	if _, err := wait2(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, ",") != "v1,v2,v3" {
		t.Errorf("order %v", order)
	}
	assertCount(t, b.state, snapshot.BucketParked, 0)
}
