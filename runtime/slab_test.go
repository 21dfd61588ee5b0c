package runtime

import (
	"context"
	"fmt"
	goruntime "runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/handoff-go/handoff"
)

// TestSlabFillsItsSizeClass: the batches of a class that does not
// recycle its messages make their items in 16 KiB chunks and take first
// what the last chunk left, so an item costs about its 256 bytes. Made
// per batch, with the allocation's 8-byte header, a batch of 64 items
// was an 18432-byte object (288 bytes an item), one of 20 a 5376-byte
// one (268.8).
func TestSlabFillsItsSizeClass(t *testing.T) {
	for _, n := range []int{chunkMin, 20, fetchBatch} {
		t.Run(strconv.Itoa(n), func(t *testing.T) { testSlabFillsItsSizeClass(t, n) })
	}
}

func testSlabFillsItsSizeClass(t *testing.T, n int) {
	if size := unsafe.Sizeof(item{}); size != 256 {
		t.Fatalf("an item is %d bytes; this test expects 256", size)
	}
	tr := newTracker("orders", 3, 0)
	const batches = 20_000
	var (
		sl       slab
		taken    int
		before   goruntime.MemStats
		after    goruntime.MemStats
		lastSeen *item
	)
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	for range batches {
		sl = newSlab(tr, n, stamp{}, sl.rest())
		for sl.left() {
			it := sl.next()
			if it == lastSeen || it.head != nil {
				t.Fatal("a slab handed out an item twice")
			}
			it.head = sl.head // as fetch's item does
			lastSeen = it
			taken++
		}
	}
	goruntime.ReadMemStats(&after)
	if taken != batches*n {
		t.Fatalf("took %d items, want %d", taken, batches*n)
	}
	perItem := float64(after.TotalAlloc-before.TotalAlloc) / float64(taken)
	t.Logf("batches of %d: %.1f bytes allocated per item", n, perItem)
	if perItem > 261 { // a 16384-byte object for 63 items: 260.1 an item
		t.Errorf("%.1f bytes allocated per item in batches of %d, want about %d (the rounding of each allocation carried to the next batch)", perItem, n, unsafe.Sizeof(item{}))
	}
}

// TestRecycledSlabKeepsNoRest: a recycled slab's unused items are not
// handed to the next batch (they go back with the slab), and its batch
// is capped at recycledLen.
func TestRecycledSlabKeepsNoRest(t *testing.T) {
	c := &class{slabs: newFreeSlabs(64, 8)}
	tr := newTracker("orders", 3, 0)
	sl := c.slab(tr, fetchBatch, stamp{}, nil)
	if sl.head.rs == nil {
		t.Fatal("a batch of fetchBatch records of a recycling class has no recycled slab")
	}
	took := 0
	for sl.left() {
		sl.next()
		took++
	}
	if took != recycledLen {
		t.Fatalf("a recycled slab gave %d items, want %d", took, recycledLen)
	}
	short := c.slab(tr, fetchBatch, stamp{}, nil)
	short.next()
	if rest := short.rest(); rest != nil {
		t.Fatalf("a recycled slab left %d items to the next batch, want none", len(rest))
	}
	small := c.slab(tr, recycledMin-1, stamp{}, nil)
	if small.head.rs != nil {
		t.Fatal("a batch under recycledMin took a recycled slab")
	}
}

// TestIdleFetchKeepsNoItems: once a partition's messages are done and
// its fetch loop waits for more, nothing of the runtime keeps their
// items alive (nor, through them, what was fetched): the loop drops the
// spare items of its last allocation before it waits, which would
// otherwise keep the allocation, and every item handed out of it.
func TestIdleFetchKeepsNoItems(t *testing.T) {
	skipIfRecycled(t) // a recycled slab is kept for reuse, as it should be
	t.Parallel()
	const n = 100 // in batches of up to 64: the last allocation has items to spare
	b := setup(t, 1, "orders")
	b.produce(n)
	var handled, freed atomic.Int64
	all := make(chan struct{})
	rt, wait := startNew(t, b.config(func(_ context.Context, m *handoff.Message) error {
		// m is the envelope inside its item (see item.env).
		goruntime.AddCleanup(m, func(*atomic.Int64) { freed.Add(1) }, &freed)
		if handled.Add(1) == n {
			close(all)
		}
		return nil
	}, nil))
	waitClosed(t, all, func() string { return fmt.Sprintf("handled %d of %d", handled.Load(), n) })
	waitFor(t, "every handled message's item collected while the runtime runs", func() bool {
		goruntime.GC()
		return freed.Load() == n
	})
	stopAndWait(t, rt, wait)
}
