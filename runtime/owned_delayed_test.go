package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestDelayedOfMovedPartition: with the changelog, the delayed messages
// of a partition that moved to another instance stay in the former
// owner's file, unused (the new owner restored them and delivers them),
// and the former owner's Delayed leaves them out, as its DeadLetters
// does its dead letters: listed by both, an operator sees each such
// message twice across the instances' admin APIs and dashboards, and
// waits on the former owner for a delivery it never makes. Its pages
// are cut by what they read, so a page that leaves records out still
// leads to the next.
func TestDelayedOfMovedPartition(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "orders")
	h := func(context.Context, *handoff.Message) error { return nil }
	cfgA := b.config(h, nil)
	cfgA.Instance = "a"
	rtA, waitA := startNew(t, cfgA)
	waitFor(t, "A ready", rtA.Ready)
	due := time.Now().Add(time.Hour)
	for p := range int32(2) {
		for n := range 2 {
			key := ""
			for i := 0; ; i++ {
				key = fmt.Sprintf("key-%d-%d", n, i)
				if keyPartition([]byte(key), 2) == p {
					break
				}
			}
			m := &handoff.Message{ID: fmt.Sprintf("delayed-%d-%d", p, n), Key: []byte(key), Value: []byte("later")}
			if err := rtA.Schedule(context.Background(), "orders", m, due.Add(time.Duration(2*n+int(p))*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ds, _, err := rtA.Delayed("", 10); err != nil || len(ds) != 4 {
		t.Fatalf("A's delayed messages: %d, %v", len(ds), err)
	}

	rtB, waitB := b.instance("b", b.config(h, nil))
	waitFor(t, "B restored the delayed messages of its partition, and A its own", func() bool {
		ds, _, err := rtB.Delayed("", 10)
		// A kafka-go rebalance revokes A's partitions too: A lists
		// none until it has restored the one it gets back.
		return err == nil && len(ds) == 2 && len(ownedPartitions(rtA)) == 1
	})
	ds, _, _ := rtB.Delayed("", 10)
	moved := int(keyPartition(ds[0].Message.Key, 2))
	// A pages through its own, one a page.
	var mine []string
	for after := Cursor(""); ; {
		page, next, err := rtA.Delayed(after, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page {
			mine = append(mine, d.Message.ID)
		}
		if next == "" {
			break
		}
		after = next
	}
	want := []string{fmt.Sprintf("delayed-%d-0", 1-moved), fmt.Sprintf("delayed-%d-1", 1-moved)}
	if fmt.Sprint(mine) != fmt.Sprint(want) {
		t.Errorf("A lists delayed %v, want only its own partition's %v", mine, want)
	}
	shutdownAndWait(t, rtA, waitA)
	shutdownAndWait(t, rtB, waitB)
}
