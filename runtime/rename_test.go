package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestClassRenames: a state file written when the class was "bookings"
// starts under a runtime whose class is "orders" with ClassRenames
// bookings -> orders: its pending messages are re-pushed as orders' (the
// handler sees the new name) and its dead letter requeues, instead of
// becoming dead letters of an unknown class; the messages of "gone",
// which no mapping names, become dead letters logged as ONE line, not
// one per message. Before, each of them logged its own warning, and the
// requeue answered ErrUnknownClass.
func TestClassRenames(t *testing.T) {
	t.Parallel()
	state := t.TempDir() + "/s.db"
	var recs []snapshot.Record
	for i := range 5 {
		recs = append(recs, snapshot.Record{Message: handoff.Message{ID: fmt.Sprintf("b%d", i), Class: "bookings"}, Reason: "unstarted"})
	}
	for i := range 3 {
		recs = append(recs, snapshot.Record{Message: handoff.Message{ID: fmt.Sprintf("g%d", i), Class: "gone"}, Reason: "unstarted"})
	}
	snapshottest.SeedPending(t, state, recs...)
	snapshottest.SeedDead(t, state, snapshot.Record{Message: handoff.Message{ID: "dead-1", Class: "bookings"}, Reason: "failed", Err: "boom"})

	got := make(chan string, 10)
	logs := &logBuffer{}
	rt, err := newRuntime(Config{StatePath: state, Logger: logs.logger(), ClassRenames: map[string]string{"bookings": "orders"},
		Classes: []Class{{Name: "orders", Workers: 1, Handler: func(_ context.Context, m *handoff.Message) error {
			got <- m.Class + " " + m.ID
			return nil
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	for i := range 5 {
		if g, want := <-got, fmt.Sprintf("orders b%d", i); g != want {
			t.Errorf("handled %q, want %q", g, want)
		}
	}
	dead, _, err := rt.DeadLetters("", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	var requeued bool
	for _, dl := range dead {
		if dl.Message.ID != "dead-1" {
			continue
		}
		if dl.Message.Class != "orders" {
			t.Errorf("dead letter class %q, want orders", dl.Message.Class)
		}
		if err := rt.Requeue(context.Background(), dl.Key); err != nil {
			t.Fatalf("requeue of the renamed class's dead letter: %v", err)
		}
		requeued = true
	}
	if !requeued {
		t.Fatalf("dead letter dead-1 not found: %+v", dead)
	}
	if g := <-got; g != "orders dead-1" {
		t.Errorf("requeued handled %q", g)
	}
	rt.Shutdown(context.Background())
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if rep.UnknownClass != 3 || rep.Repushed != 5 {
		t.Errorf("report: unknown class %d, repushed %d; want 3, 5", rep.UnknownClass, rep.Repushed)
	}
	out := logs.String()
	if n := strings.Count(out, "renamed classes in the state file"); n != 1 ||
		!strings.Contains(out, `renamed="bookings -> orders: dead 1, pending 5"`) {
		t.Errorf("%d rename lines, want 1 naming bookings -> orders:\n%s", n, out)
	}
	if n := strings.Count(out, "became a dead letter") + strings.Count(out, "became dead letters"); n != 1 ||
		!strings.Contains(out, "dead_lettered=3 classes=\"gone 3\"") {
		t.Errorf("%d lines about dead letters of unknown classes, want 1 with the count:\n%s", n, out)
	}
}

// TestClassRenamesConfig: a mapping from a configured class, to a class
// that is not configured, or with an empty name is refused by New.
func TestClassRenamesConfig(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *handoff.Message) error { return nil }
	for name, renames := range map[string]map[string]string{
		"from a configured class": {"orders": "users"},
		"to no configured class":  {"bookings": "nope"},
		"empty":                   {"": "orders"},
	} {
		_, err := newRuntime(Config{StatePath: t.TempDir() + "/s.db", ClassRenames: renames,
			Classes: []Class{{Name: "orders", Handler: h}, {Name: "users", Handler: h}}})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "ClassRenames") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
