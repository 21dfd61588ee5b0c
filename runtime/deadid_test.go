package runtime

import (
	"context"
	"errors"
	"maps"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/handoff-go/handoff"
)

// ownerNamed reports whether owner, a NotOwnerError's Owner, names the
// test's instance: its Instance, the group.instance.id with franz-go
// (static membership), in the subscription's user data with kafka-go.
func ownerNamed(owner, instance string) bool { return owner == instance }

// deadByValue lists rt's dead letters: message value -> dead letter ID.
func deadByValue(t *testing.T, rt *Runtime) map[string]string {
	t.Helper()
	dls, _, err := rt.DeadLetters("", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, dl := range dls {
		out[string(dl.Message.Value)] = dl.Key
	}
	return out
}

var deadIDForm = regexp.MustCompile(`^[0-9a-f]{16}-[1-9][0-9]*$`)

// TestDeadLetterIDAcrossInstances: a dead letter has one ID on every
// instance: listed through its writer and through the instance that
// restored its partition, the ID is the same (though the restorer keeps
// it under another key of its own file); a discard or requeue through an
// instance that does not own its partition is refused with an error
// naming the owner and deletes nothing; through the owner it deletes
// exactly that record; and after the owner stops and the other restores
// the partition, the same ID still names it.
func TestDeadLetterIDAcrossInstances(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	var handled atomic.Int64
	poison := func(_ context.Context, m *handoff.Message) error {
		handled.Add(1)
		return handoff.Permanent(errors.New("poison"))
	}
	cfgA := b.config(poison, nil)
	cfgA.Instance = "a"
	rtA, waitA := startNew(t, cfgA)
	waitFor(t, "A ready", rtA.Ready)
	ctx := context.Background()

	// Partition 0's dead letters first, then 1's, so that A's keys are
	// in that order; A's discard of the first makes every key the other
	// instance restores differ from A's (B numbers its restored records
	// from 1).
	produced := b.produceValues("orders", keyOn(0, 2), "p0-a", "p0-b")
	waitFor(t, "A's dead letters of partition 0", func() bool { return len(deadByValue(t, rtA)) == 2 })
	produced += b.produceValues("orders", keyOn(1, 2), "p1-a", "p1-b")
	waitFor(t, "A's dead letters of both partitions", func() bool { return len(deadByValue(t, rtA)) == 4 })
	ids := deadByValue(t, rtA)
	for v, id := range ids {
		if !deadIDForm.MatchString(id) {
			t.Fatalf("dead letter %s has ID %q, want <16 hex digits>-<number>", v, id)
		}
	}
	if err := rtA.Discard(ctx, ids["p0-a"]); err != nil {
		t.Fatal(err)
	}
	delete(ids, "p0-a")

	rtB, waitB := b.instance("b", b.config(poison, nil))
	waitFor(t, "B ready", rtB.Ready)
	var onA, onB map[string]string
	waitFor(t, "one partition and its dead letters moved to B", func() bool {
		onA, onB = deadByValue(t, rtA), deadByValue(t, rtB)
		return len(onA) > 0 && len(onB) > 0 && len(onA)+len(onB) == len(ids)
	})
	// The same IDs through either instance.
	for v, id := range onA {
		if ids[v] != id {
			t.Errorf("A lists %s as %s, it was %s", v, id, ids[v])
		}
	}
	for v, id := range onB {
		if ids[v] != id {
			t.Errorf("B, which restored it, lists %s as %s; A listed it as %s", v, id, ids[v])
		}
		if dl, err := rtB.GetDeadLetter(ctx, id); err != nil || string(dl.Message.Value) != v || dl.Key != id {
			t.Errorf("B's GetDeadLetter(%s) = %s %q, %v; want %s", id, dl.Key, dl.Message.Value, err, v)
		}
	}

	// Through the instance that does not own it: refused, naming the
	// owner; nothing deleted or requeued.
	var moved string // a dead letter B owns
	for v := range onB {
		moved = v
		break
	}
	var ne *NotOwnerError
	if _, err := rtA.GetDeadLetter(ctx, ids[moved]); !errors.As(err, &ne) || !ownerNamed(ne.Owner, "b") || ne.Topic != "orders" || ne.Key != ids[moved] {
		t.Errorf("A's GetDeadLetter of B's dead letter: %v, want a NotOwnerError naming b", err)
	} else if !strings.Contains(err.Error(), ne.Owner) || !errors.Is(err, ErrNotOwner) {
		t.Errorf("A's refusal %q does not name the owner %q", err, ne.Owner)
	}
	var stayed string // a dead letter A owns
	for v := range onA {
		stayed = v
		break
	}
	if err := rtA.Discard(ctx, "1"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "16 hex digits") {
		t.Errorf("a bare number: %v, want ErrNotFound saying the ID's form", err)
	}

	// A discard through the instance that does not own it is carried
	// out by the owner (issue 45: it used to be refused with a
	// NotOwnerError): exactly that record, on B.
	if err := rtA.Discard(ctx, ids[moved]); err != nil {
		t.Fatalf("A's Discard of B's dead letter %s, carried out by B: %v", ids[moved], err)
	}
	delete(onB, moved)
	if got := deadByValue(t, rtB); !maps.Equal(got, onB) {
		t.Errorf("after the discard of %s B lists %v, want %v", moved, got, onB)
	}
	if got := deadByValue(t, rtA); !maps.Equal(got, onA) {
		t.Errorf("after the discard of %s A lists %v, want %v", moved, got, onA)
	}
	if err := rtA.Discard(ctx, ids[moved]); !errors.Is(err, ErrNotFound) {
		t.Errorf("A's Discard of a dead letter discarded by B: %v, want ErrNotFound (it exists nowhere)", err)
	}
	if err := rtB.Discard(ctx, ids[moved]); !errors.Is(err, ErrNotFound) {
		t.Errorf("B's Discard of the dead letter it discarded: %v, want ErrNotFound", err)
	}
	delete(ids, moved)

	// A stops: B restores A's partitions; the IDs still name the same
	// dead letters, now B's.
	shutdownAndWait(t, rtA, waitA)
	waitFor(t, "B owning every dead letter", func() bool { return maps.Equal(deadByValue(t, rtB), ids) })
	if err := rtB.Discard(ctx, ids[stayed]); err != nil {
		t.Fatal(err)
	}
	delete(ids, stayed)
	if got := deadByValue(t, rtB); !maps.Equal(got, ids) {
		t.Errorf("after B's discard of %s B lists %v, want %v", stayed, got, ids)
	}
	shutdownAndWait(t, rtB, waitB)
	if n := handled.Load(); n != int64(produced) {
		t.Errorf("handled %d messages, produced %d: each poison runs once", n, produced)
	}
}
