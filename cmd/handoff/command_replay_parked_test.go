package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/internal/testio"
	"github.com/handoff-go/handoff/runtime"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// parkedDelayedFile writes a state file with a dead letter of orders'
// key k and two messages parked behind it; a redelivery of orders' key r
// due at due1 and two messages parked behind it; a users message
// deferred by its handoff-deliver-at header to due2; and a users message
// parked with no blocker in the file.
func parkedDelayedFile(t *testing.T, due1, due2 time.Time) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	rec := func(topic string, partition int, offset int64, key, reason string, hs ...handoff.Header) snapshot.Record {
		return snapshot.Record{
			Message: handoff.Message{ID: fmt.Sprintf("%s/%d/%d", topic, partition, offset), Class: topic, Key: []byte(key),
				Value: fmt.Appendf(nil, "v-%s-%d-%d", topic, partition, offset), Headers: hs,
				Origin: handoff.Origin{Topic: topic, Partition: partition, Offset: offset}},
			Reason: reason, SavedAt: time.Now(),
		}
	}
	snapshottest.SeedDead(t, path, rec("orders", 0, 5, "k", "failed"))
	snapshottest.SeedParked(t, path, "orders", []byte("k"), rec("orders", 0, 6, "k", "parked"), rec("orders", 0, 7, "k", "parked"))
	snapshottest.SeedParked(t, path, "orders", []byte("r"), rec("orders", 1, 3, "r", "parked"), rec("orders", 1, 4, "r", "parked"))
	snapshottest.SeedParked(t, path, "users", []byte("x"), rec("users", 1, 1, "x", "parked"))
	snapshottest.SeedDelayed(t, path,
		snapshot.Delayed{Due: due1, Record: rec("orders", 1, 2, "r", "redelivery")},
		snapshot.Delayed{Due: due2, Record: rec("users", 0, 9, "u", "scheduled",
			handoff.Header{Key: "trace", Value: []byte("t1")},
			handoff.Header{Key: runtime.HeaderDeliverAt, Value: []byte(due2.Format(time.RFC3339))})})
	return path
}

// headerValues returns m's values of header key.
func headerValues(m kafka.Message, key string) []string {
	var out []string
	for _, h := range m.Headers {
		if h.Key == key {
			out = append(out, string(h.Value))
		}
	}
	return out
}

// TestReplayParkedAndDelayed: replay sends delayed messages with their
// due time in a handoff-deliver-at header (replacing the one a deferred
// message had), messages parked behind a redelivery with its due time
// plus a nanosecond each, parked messages with no blocker at once, and
// keeps those parked behind a dead letter until --dead sends them after
// it, on its partition, in order.
func TestReplayParkedAndDelayed(t *testing.T) {
	t.Parallel()
	due1 := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	due2 := due1.Add(time.Hour).Truncate(time.Second)
	path := parkedDelayedFile(t, due1, due2)
	b := startBroker(t)

	r := run(t, "replay", path, "--brokers", b.Addr(), "--batch", "2")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("replayed 5 of 5 messages (pending 0, delayed 2, parked 3) from %s\n", path),
		"kept 2 parked messages behind the dead letters of their keys: replay with --dead sends them after those\n",
		fmt.Sprintf("left in %s: dead 1, parked 2 (", path),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output does not say %q:\n%s", want, r.stdout)
		}
	}
	byID := map[string]kafka.Message{}
	for _, m := range readTopics(t, b.Addr()) {
		ids := headerValues(m, headerReplayedFrom)
		if len(ids) != 1 {
			t.Fatalf("message %s/%d/%d with replayed-from %v", m.Topic, m.Partition, m.Offset, ids)
		}
		if _, dup := byID[ids[0]]; dup {
			t.Errorf("%s sent twice", ids[0])
		}
		byID[ids[0]] = m
	}
	ns := func(t time.Time, n int) string { return t.Add(time.Duration(n)).Format(time.RFC3339Nano) }
	want := map[string][]string{ // ID -> its handoff-deliver-at values
		"orders/1/2": {ns(due1, 0)},
		"orders/1/3": {ns(due1, 1)},
		"orders/1/4": {ns(due1, 2)},
		"users/0/9":  {due2.Format(time.RFC3339Nano)},
		"users/1/1":  nil,
	}
	if len(byID) != len(want) {
		t.Errorf("sent %d messages, want %d", len(byID), len(want))
	}
	for id, at := range want {
		m, ok := byID[id]
		if !ok {
			t.Errorf("%s not sent", id)
			continue
		}
		if got := headerValues(m, runtime.HeaderDeliverAt); fmt.Sprint(got) != fmt.Sprint(at) {
			t.Errorf("%s: %s %q, want %q", id, runtime.HeaderDeliverAt, got, at)
		}
		if origin := strings.Split(id, "/"); m.Topic != origin[0] || fmt.Sprint(m.Partition) != origin[1] ||
			string(m.Value) != "v-"+strings.Join(origin, "-") {
			t.Errorf("%s: on %s/%d with value %q", id, m.Topic, m.Partition, m.Value)
		}
	}
	if got := headerValues(byID["users/0/9"], "trace"); fmt.Sprint(got) != "[t1]" {
		t.Errorf("deferred message's other headers %q", got)
	}
	// The due times parse as the runtime parses them, in order.
	var prev time.Time
	for _, id := range []string{"orders/1/2", "orders/1/3", "orders/1/4"} {
		at, err := time.Parse(time.RFC3339Nano, headerValues(byID[id], runtime.HeaderDeliverAt)[0])
		if err != nil || !at.After(prev) {
			t.Errorf("%s due %v (%v), not after %v", id, at, err, prev)
		}
		prev = at
	}

	r = run(t, "replay", path, "--brokers", b.Addr(), "--dead")
	if r.code != 0 {
		t.Fatalf("--dead: exit %d: %s", r.code, r.stderr)
	}
	if want := fmt.Sprintf("replayed 3 of 3 messages (pending 0, dead letters 1, delayed 0, parked 2) from %s\n%s holds no more messages\n", path, path); r.stdout != want {
		t.Errorf("--dead: output %q, want %q", r.stdout, want)
	}
	var order []string
	for _, m := range readTopics(t, b.Addr()) {
		if m.Topic == "orders" && m.Partition == 0 {
			order = append(order, headerValues(m, headerReplayedFrom)[0])
			if at := headerValues(m, runtime.HeaderDeliverAt); at != nil {
				t.Errorf("%s sent with %s %q", order[len(order)-1], runtime.HeaderDeliverAt, at)
			}
		}
	}
	if got := strings.Join(order, " "); got != "orders/0/5 orders/0/6 orders/0/7" {
		t.Errorf("orders/0 holds %s, want the dead letter, then what was parked behind it, in order", got)
	}
}

// TestReplayBatchKeepsParkedWithBlocker: a batch never ends between a
// redelivery and the messages parked behind it.
func TestReplayBatchKeepsParkedWithBlocker(t *testing.T) {
	t.Parallel()
	items := []replayItem{{}, {blocks: "k"}, {follows: true}, {follows: true}, {}, {}}
	var got []int
	for start, end := 0, 0; start < len(items); start = end {
		end = batchEnd(items, start, 2)
		got = append(got, end)
	}
	if fmt.Sprint(got) != "[4 6]" {
		t.Errorf("batch ends %v, want [4 6]", got)
	}
	if end := batchEnd(items, 0, 1); end != 1 {
		t.Errorf("batch of 1 from 0 ends at %d", end)
	}
	if end := batchEnd(items, 1, 1); end != 4 {
		t.Errorf("batch of 1 from the blocker ends at %d, want 4", end)
	}
}

// TestReplayedDelayedWaitsInRuntime: what replay sends with a due time
// waits in the consuming runtime's delayed bucket until that time (the
// parked messages behind a redelivery just after it, in order), and a
// parked message with no blocker runs at once.
func TestReplayedDelayedWaitsInRuntime(t *testing.T) {
	t.Parallel()
	due1 := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	due2 := due1.Add(time.Hour).Truncate(time.Second)
	path := parkedDelayedFile(t, due1, due2)
	b := startBroker(t)
	if r := run(t, "replay", path, "--brokers", b.Addr()); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}

	handled := make(chan string, 16)
	h := func(_ context.Context, m *handoff.Message) error { handled <- string(m.Value); return nil }
	rt, err := runtime.New(runtime.Config{
		Client:    runtime.Client(testio.Client()),
		Brokers:   []string{b.Addr()},
		Group:     "replayed",
		StatePath: filepath.Join(t.TempDir(), "consumer.db"),
		Logger:    slog.New(slog.DiscardHandler),
		Classes: []runtime.Class{
			{Name: "orders", Topics: []string{"orders"}, Handler: h, Ordered: true},
			{Name: "users", Topics: []string{"users"}, Handler: h},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := rt.Run(ctx); done <- err }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	select {
	case v := <-handled:
		if v != "v-users-1-1" {
			t.Fatalf("handled %s first, want the parked message with no blocker", v)
		}
	case err := <-done:
		t.Fatalf("runtime stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the parked message with no blocker was not handled")
	}
	var got []string
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < 4 && time.Now().Before(deadline) {
		ds, _, err := rt.Delayed("", 100)
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, d := range ds {
			got = append(got, fmt.Sprintf("%s@%s", d.Message.Value, d.Due.UTC().Format(time.RFC3339Nano)))
		}
		if len(got) < 4 {
			time.Sleep(10 * time.Millisecond) // polls the runtime's consumption, not a timer
		}
	}
	ns := func(t time.Time, n int) string { return t.Add(time.Duration(n)).Format(time.RFC3339Nano) }
	want := []string{"v-orders-1-2@" + ns(due1, 0), "v-orders-1-3@" + ns(due1, 1), "v-orders-1-4@" + ns(due1, 2), "v-users-0-9@" + ns(due2, 0)}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("delayed in the consuming runtime:\n%v\nwant\n%v", got, want)
	}
	select {
	case v := <-handled:
		t.Errorf("%s handled before its time", v)
	default:
	}
}
