package runtime

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/handoff-go/handoff"
)

// TestDeadLetterOfMovedPartition: with the changelog, a dead letter of a
// partition that moved to another instance stays in the former owner's
// file, unused, and that owner's DeadLetters leaves it out; the new owner
// restored it and lists it as its own. The former owner must not requeue,
// discard or show it by its ID (an ID an operator read from a page
// loaded before the rebalance): requeued there, the message would run on
// an instance that does not own it while the new owner still holds it as
// a dead letter, to be requeued and run again. GetDeadLetter refuses,
// naming the owner; a Requeue is asked of the owner, which runs it.
//
// It runs once per group protocol (forEachProtocol): under the consumer
// protocol (KIP-848) the owner comes from ConsumerGroupDescribe (before,
// DescribeGroups found no member and the former owner answered "no
// instance owns it now").
func TestDeadLetterOfMovedPartition(t *testing.T) {
	t.Parallel()
	forEachProtocol(t, testDeadLetterOfMovedPartition)
}

func testDeadLetterOfMovedPartition(t *testing.T, proto GroupProtocol) {
	b := setupProtocol(t, proto, 2, "orders")
	for p := range 2 {
		b.produceValues("orders", keyOn(p, 2), "poison")
	}
	var mu sync.Mutex
	runs := map[string]map[int]int{} // instance -> partition -> calls
	handler := func(instance string) handoff.HandlerFunc {
		return func(_ context.Context, m *handoff.Message) error {
			mu.Lock()
			if runs[instance] == nil {
				runs[instance] = map[int]int{}
			}
			runs[instance][m.Origin.Partition]++
			mu.Unlock()
			return handoff.Permanent(errors.New("poison"))
		}
	}
	cfgA := b.config(handler("a"), nil)
	cfgA.Instance = "a"
	rtA, waitA := startNew(t, cfgA)
	keyOf := map[int]string{} // partition -> the dead letter's ID
	waitFor(t, "A's two dead letters", func() bool {
		dls, _, err := rtA.DeadLetters("", "", 10)
		if err != nil || len(dls) != 2 {
			return false
		}
		for _, dl := range dls {
			keyOf[dl.Message.Origin.Partition] = dl.Key
		}
		return true
	})

	rtB, waitB := b.instance("b", b.config(handler("b"), nil))
	moved := -1
	waitFor(t, "one partition and its dead letter moved to B", func() bool {
		dlB, _, err := rtB.DeadLetters("", "", 10)
		if err != nil || len(dlB) != 1 {
			return false
		}
		dlA, _, err := rtA.DeadLetters("", "", 10)
		if err != nil || len(dlA) != 1 {
			return false
		}
		moved = dlB[0].Message.Origin.Partition
		return dlA[0].Message.Origin.Partition != moved
	})
	// A search counts and lists only what the instance owns: the moved
	// dead letter on B, the other on A, both orders.
	for _, newest := range []bool{false, true} {
		for _, c := range []struct {
			rt     *Runtime
			filter DeadFilter
			want   string // the ID found, "" none
		}{
			{rtA, DeadFilter{}, keyOf[1-moved]},
			{rtA, DeadFilter{Partition: &moved}, ""},
			{rtB, DeadFilter{Partition: &moved, Topic: "orders", ErrorContains: "poison"}, keyOf[moved]},
			{rtB, DeadFilter{ErrorContains: "not the error"}, ""},
		} {
			c.filter.Newest = newest
			page, next, total, err := c.rt.FindDeadLetters(c.filter, "", 10)
			want := 0
			if c.want != "" {
				want = 1
			}
			if err != nil || total != want || len(page) != want || next != "" || want == 1 && page[0].Key != c.want {
				t.Errorf("search %+v: %v, total %d, next %q, %v; want %q", c.filter, page, total, next, err, c.want)
			}
		}
	}
	key := keyOf[moved]
	var ne *NotOwnerError
	if _, err := rtA.GetDeadLetter(context.Background(), key); !errors.As(err, &ne) || !ownerNamed(ne.Owner, "b") {
		t.Errorf("A's GetDeadLetter of the moved partition's dead letter: %v, want a NotOwnerError naming b", err)
	}
	// A's Requeue is carried out by B, the owner (issue 45: it used to
	// be refused with a NotOwnerError), where it fails again: still one
	// dead letter of that ID, B's, and A never runs the message.
	if err := rtA.Requeue(context.Background(), key); err != nil {
		t.Errorf("A's Requeue of the moved partition's dead letter, carried out by B: %v", err)
	}
	waitFor(t, "B's run of the requeued message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return runs["b"][moved] == 1
	})
	waitFor(t, "the requeued message a dead letter of B's again", func() bool {
		dlB, _, err := rtB.DeadLetters("", "", 10)
		return err == nil && len(dlB) == 1 && dlB[0].Key == key && dlB[0].Message.Attempt > 0
	})
	shutdownAndWait(t, rtA, waitA)
	shutdownAndWait(t, rtB, waitB)
	mu.Lock()
	defer mu.Unlock()
	if n := runs["a"][moved]; n != 1 {
		t.Errorf("A ran the moved partition's message %d times, want once (before it moved)", n)
	}
}
