package runtime

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/internal/testio"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
)

// runKept waits for all to close (failing after 30s with how many of n
// messages kept holds, read under mu) and stops rt.
func runKept(t *testing.T, rt *Runtime, wait func() (*Report, error), all <-chan struct{}, mu *sync.Mutex, kept *[]*handoff.Message, n int) {
	t.Helper()
	waitClosed(t, all, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("handled %d of %d", len(*kept), n)
	})
	stopAndWait(t, rt, wait)
}

// TestKafkaIDs checks the IDs of Kafka records: "topic/partition/offset"
// for short and long topics and the extreme offsets.
func TestKafkaIDs(t *testing.T) {
	t.Parallel()
	for _, topic := range []string{"orders", strings.Repeat("t", 2048)} {
		prefix := kafkaIDPrefix(topic, 7)
		for _, off := range []int64{0, 1, 99, 1_000_003, 1<<63 - 1} {
			if got, want := kafkaID(prefix, off), fmt.Sprintf("%s/7/%d", topic, off); got != want {
				t.Fatalf("topic of %d bytes, offset %d: ID %q, want %q", len(topic), off, got, want)
			}
		}
	}
}

// TestHandlerKeepsMessages: a handler that keeps the *Message it is
// handed, its ID, Key, Value and Headers, and reads them after many more
// messages were fetched and handled, finds each exactly as it was
// delivered. (Before, the runtime recycled the envelope of a handled Kafka
// message and carved IDs from shared blocks: the kept *Message showed a
// later record.) A retry hands the handler a fresh copy too: the one kept
// from the first attempt still says Attempt 0.
func TestHandlerKeepsMessages(t *testing.T) {
	skipIfRecycled(t)
	t.Parallel()
	const n = 300
	b := setup(t, 1, "orders")
	b.produce(n)
	var (
		mu    sync.Mutex
		kept  []*handoff.Message
		ids   []string
		first = map[string]*handoff.Message{}
	)
	all := make(chan struct{})
	rt, wait := startNew(t, b.config(func(_ context.Context, m *handoff.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.Attempt == 0 && m.Origin.Offset%50 == 0 {
			first[m.ID] = m
			return fmt.Errorf("fail once")
		}
		kept = append(kept, m)
		ids = append(ids, m.ID)
		if len(kept) == n {
			close(all)
		}
		return nil
	}, func(c *Class) { c.Retry.InitialBackoff, c.Retry.MaxBackoff = time.Millisecond, time.Millisecond }))
	runKept(t, rt, wait, all, &mu, &kept, n)
	mu.Lock()
	defer mu.Unlock()
	seen := map[int64]bool{}
	for i, m := range kept {
		o := m.Origin
		if seen[o.Offset] {
			t.Fatalf("kept message %d is offset %d again: a kept *Message changed", i, o.Offset)
		}
		seen[o.Offset] = true
		want := kafkaID(kafkaIDPrefix(o.Topic, o.Partition), o.Offset)
		if m.ID != want || ids[i] != want {
			t.Fatalf("kept message %d: ID %q (kept ID %q), want %q", i, m.ID, ids[i], want)
		}
		// One partition: offset i holds produce's record i.
		wantKey, wantValue := fmt.Sprintf("key-%d", o.Offset%13), fmt.Sprintf("orders-%d", o.Offset)
		if string(m.Key) != wantKey || string(m.Value) != wantValue {
			t.Fatalf("kept message %s: key %q value %q, want %q %q", m.ID, m.Key, m.Value, wantKey, wantValue)
		}
	}
	if len(first) != n/50 {
		t.Fatalf("%d first attempts failed, want %d", len(first), n/50)
	}
	for id, m := range first {
		if m.Attempt != 0 || m.ID != id {
			t.Errorf("the first attempt's message of %s now says ID %q attempt %d", id, m.ID, m.Attempt)
		}
	}
}

// BenchmarkDelivery compares the per-message cost of the hand-off to
// the handler: "copy" is the old path (an item recycled through a
// sync.Pool, the handler handed a copy of its message of its own, one
// allocation per delivery), "batch" today's (the items and envelopes of
// a batch of fetchBatch records made in one allocation each, the handler
// handed the envelope), "recycled" a class with RecycleMessages (the
// batch's slab reused once its messages are done). Each iteration makes
// the item of one record (a batch's share), hands its message to a
// handler (one that keeps it, but in "recycled") and settles it. Run it
// with
//
//	go test -run='^$' -bench=Delivery -benchmem -count=5 ./runtime/
func BenchmarkDelivery(b *testing.B) {
	var kept *handoff.Message
	handler := handoff.HandlerFunc(func(_ context.Context, m *handoff.Message) error {
		kept = m // escapes, as with any handler
		return nil
	})
	r := &Runtime{life: lifecycle{epoch: time.Now()}}
	c := &class{cfg: Class{Name: "orders", Handler: handler}}
	key, value := []byte("customer-42"), make([]byte, 256)
	b.Run("copy", func(b *testing.B) {
		tr := newTracker("orders", 3, 0)
		ids := kafkaIDs{prefix: tr.idPrefix}
		items := sync.Pool{New: func() any { return new(item) }}
		b.ReportAllocs()
		var off int64
		for b.Loop() {
			it := items.Get().(*item)
			seen := r.mono()
			it.m = handoff.Message{ID: ids.id(off), Class: c.cfg.Name, Key: key, Value: value,
				Origin:    handoff.Origin{Topic: tr.topic, Partition: tr.partition, Offset: off},
				FirstSeen: r.life.epoch.Add(time.Duration(seen))}
			it.src, it.head = fromKafka, &tr.shared
			it.slot = tr.add(off, seen)
			m := it.m
			if err := c.cfg.Handler(context.Background(), &m); err != nil {
				b.Fatal(err)
			}
			it.settle()
			*it = item{}
			items.Put(it)
			off++
		}
	})
	b.Run("batch", func(b *testing.B) {
		f := &feeder{epoch: r.life.epoch}
		tr := newTracker("orders", 3, 0)
		ids := kafkaIDs{prefix: tr.idPrefix}
		var fetched uint64
		var sl slab
		b.ReportAllocs()
		var off int64
		for b.Loop() {
			// One record per iteration, in batches of fetchBatch.
			if !sl.left() {
				seen := r.mono()
				sl = newSlab(tr, fetchBatch, stamp{mono: seen, wall: r.life.epoch.Add(time.Duration(seen))}, sl.rest())
			}
			it := f.item(c, tr, &ids, &sl, &kclient.Record{Offset: off, Key: key, Value: value}, &fetched)
			if err := c.cfg.Handler(context.Background(), it.env()); err != nil {
				b.Fatal(err)
			}
			it.settle()
			off++
		}
	})
	b.Run("recycled", func(b *testing.B) {
		// Class.RecycleMessages: the batch's slab comes from the class's
		// free list and goes back once its messages are done. The
		// handler keeps nothing.
		c := &class{cfg: Class{Name: "orders", Handler: func(context.Context, *handoff.Message) error { return nil }},
			slabs: newFreeSlabs(64, 8)}
		f := &feeder{epoch: r.life.epoch}
		tr := newTracker("orders", 3, 0)
		ids := kafkaIDs{prefix: tr.idPrefix}
		var fetched uint64
		var sl slab
		batch := make([]*item, 0, recycledLen)
		b.ReportAllocs()
		var off int64
		for b.Loop() {
			if !sl.left() {
				for _, it := range batch {
					it.recycle()
				}
				batch = batch[:0]
				seen := r.mono()
				sl = c.slab(tr, fetchBatch, stamp{mono: seen, wall: r.life.epoch.Add(time.Duration(seen))}, nil)
				sl.handOut(len(sl.items))
			}
			it := f.item(c, tr, &ids, &sl, &kclient.Record{Offset: off, Key: key, Value: value}, &fetched)
			if err := c.cfg.Handler(context.Background(), it.env()); err != nil {
				b.Fatal(err)
			}
			it.settle()
			batch = append(batch, it)
			off++
		}
	})
	_ = kept
}

// TestBatchHandlerKeepsMessages: a BatchHandler that keeps the messages
// of its batches finds each as it was delivered after every later batch
// was handled (their items are recycled as a single class's are).
func TestBatchHandlerKeepsMessages(t *testing.T) {
	skipIfRecycled(t)
	t.Parallel()
	const n = 300
	b := setup(t, 1, "orders")
	b.produce(n)
	var (
		mu   sync.Mutex
		kept []*handoff.Message
	)
	all := make(chan struct{})
	cfg := b.config(nil, func(c *Class) {
		c.Handler = nil
		c.BatchHandler = func(_ context.Context, ms []*handoff.Message) error {
			mu.Lock()
			defer mu.Unlock()
			kept = append(kept, ms...)
			if len(kept) == n {
				close(all)
			}
			return nil
		}
		c.MaxBatch = 10
	})
	rt, wait := startNew(t, cfg)
	runKept(t, rt, wait, all, &mu, &kept, n)
	mu.Lock()
	defer mu.Unlock()
	seen := map[int64]bool{}
	for _, m := range kept {
		o := m.Origin.Offset
		if seen[o] || m.ID != kafkaID(kafkaIDPrefix("orders", 0), o) || string(m.Value) != fmt.Sprintf("orders-%d", o) {
			t.Fatalf("kept message %q: offset %d (seen %v), value %q", m.ID, o, seen[o], m.Value)
		}
		seen[o] = true
	}
}

// TestKafkaIDBlocks: the IDs carved from a partition's shared blocks are
// kafkaID's, for short and long topics (a long one gets strings of its
// own) and the extreme offsets, and an ID handed out stays what it was
// while many more are carved after it, across blocks.
func TestKafkaIDBlocks(t *testing.T) {
	t.Parallel()
	for _, topic := range []string{"orders", strings.Repeat("t", 200), strings.Repeat("t", 2048)} {
		prefix := kafkaIDPrefix(topic, 7)
		ids := kafkaIDs{prefix: prefix}
		var got []string
		var offs []int64
		for off := int64(0); off < 500; off++ {
			offs = append(offs, off)
		}
		offs = append(offs, 1_000_003, 1<<63-1, 0)
		for _, off := range offs {
			got = append(got, ids.id(off))
		}
		for i, off := range offs {
			if want := kafkaID(prefix, off); got[i] != want {
				t.Fatalf("topic of %d bytes, offset %d: ID %q, want %q", len(topic), off, got[i], want)
			}
		}
	}
}

// FuzzKafkaIDBlocks: whatever the offsets (mostly consecutive, as a
// partition's are, with gaps, restarts and runs across a power of ten,
// where the incremented ID grows by a digit), every ID carved is
// kafkaID's, and every ID handed out stays what it was while the ones
// after it are carved.
func FuzzKafkaIDBlocks(f *testing.F) {
	f.Add(int64(0), []byte{0, 0, 0})
	f.Add(int64(95), []byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(int64(999_999), []byte{0, 0, 255, 0, 200, 0})
	f.Add(int64(1<<63-3), []byte{0, 0})
	f.Fuzz(func(t *testing.T, start int64, steps []byte) {
		if start < 0 {
			start = -(start + 1)
		}
		for _, topic := range []string{"orders", strings.Repeat("t", 200)} {
			prefix := kafkaIDPrefix(topic, 7)
			ids := kafkaIDs{prefix: prefix}
			offs := []int64{start}
			for _, s := range steps {
				last := offs[len(offs)-1]
				var next int64
				switch {
				case s < 200: // the next offset
					next = last + 1
				case s < 230: // a gap (compaction, a transaction marker)
					next = last + int64(s-198)
				case s < 250: // a power of ten, minus a little
					next = max(int64(1)<<(s-230)*9-int64(s%3), 0)
				default: // back to the start (a retry, a new generation)
					next = start
				}
				if next < 0 { // past the largest offset
					next = start
				}
				offs = append(offs, next)
			}
			got := make([]string, len(offs))
			for i, off := range offs {
				got[i] = ids.id(off)
				if want := kafkaID(prefix, off); got[i] != want {
					t.Fatalf("topic of %d bytes, offsets %v: ID %d %q, want %q", len(topic), offs, i, got[i], want)
				}
			}
			for i, off := range offs {
				if want := kafkaID(prefix, off); got[i] != want {
					t.Fatalf("topic of %d bytes, offsets %v: ID %d became %q after the others, want %q", len(topic), offs, i, got[i], want)
				}
			}
		}
	})
}

// BenchmarkKafkaIDs is the ID of each record of a partition read in
// order, carved from its blocks.
func BenchmarkKafkaIDs(b *testing.B) {
	ids := kafkaIDs{prefix: kafkaIDPrefix("orders", 3)}
	off := int64(1_234_567)
	var n int
	for b.Loop() {
		n += len(ids.id(off))
		off++
	}
	if n == 0 {
		b.Fatal("no IDs")
	}
}

// TestDeliveryAllocs: the fetch loop's items of a batch of records (IDs
// carved from the partition's blocks, items and envelopes made one
// allocation each per batch, offsets added to the tracker), the
// handler's calls with the envelopes and the settles cost a fraction of
// an allocation per message: a full batch's two, and shares of the ID
// blocks and tracker segments. Before, it was one per message (the
// handler's copy). A batch of one record costs two.
func TestDeliveryAllocs(t *testing.T) {
	var kept *handoff.Message
	handler := handoff.HandlerFunc(func(_ context.Context, m *handoff.Message) error {
		kept = m // the envelope escapes, as with any handler
		return nil
	})
	r := &Runtime{life: lifecycle{epoch: time.Now()}}
	c := &class{cfg: Class{Name: "orders", Handler: handler}}
	f := &feeder{epoch: r.life.epoch}
	tr := newTracker("orders", 3, 0)
	ids := kafkaIDs{prefix: tr.idPrefix}
	key, value := []byte("customer-42"), make([]byte, 256)
	var (
		off     int64
		fetched uint64
	)
	deliver := func() { // a batch of fetchBatch records
		seen := r.mono()
		sl := newSlab(tr, fetchBatch, stamp{mono: seen, wall: r.life.epoch.Add(time.Duration(seen))}, nil)
		for sl.left() {
			it := f.item(c, tr, &ids, &sl, &kclient.Record{Offset: off, Key: key, Value: value}, &fetched)
			if err := c.cfg.Handler(context.Background(), it.env()); err != nil {
				t.Fatal(err)
			}
			it.settle()
			off++
		}
	}
	for range 2 * segSize / fetchBatch { // warm the tracker's segments
		deliver()
	}
	// Whole segments per run, so their shares are counted.
	const batches = 4 * segSize / fetchBatch
	got := testing.AllocsPerRun(4, func() {
		for range batches {
			deliver()
		}
	}) / (batches * fetchBatch)
	if got > 0.1 {
		t.Errorf("%.3f allocations per delivery, want at most 0.1 (two per batch of %d records, and shares of ID blocks and tracker segments)", got, fetchBatch)
	}
	_ = kept
}

// TestItemKey: an ordered pool's key of a message, fetched or submitted,
// is its Key's bytes without a copy (no allocation): the pool keeps only
// its hash, taken in the call (pool's TestKeyViewChangesAfterSubmit).
func TestItemKey(t *testing.T) {
	key := []byte("customer-42-with-a-key-longer-than-32-bytes")
	for _, src := range []source{fromKafka, fromSubmit} {
		it := &item{src: src, m: handoff.Message{Key: key}}
		if got := itemKey(it); got != string(key) {
			t.Fatalf("source %d: key %q, want %q", src, got, key)
		}
		if !testio.RaceEnabled {
			if n := testing.AllocsPerRun(100, func() { _ = itemKey(it) }); n != 0 {
				t.Errorf("source %d: %.0f allocations, want 0", src, n)
			}
		}
	}
	if got := itemKey(&item{src: fromKafka, m: handoff.Message{}}); got != "" {
		t.Errorf("a record without a key: %q, want \"\"", got)
	}
}

// TestItemSize keeps a queued message's item, its envelope included, in
// Go's 256-byte size class (the envelope is 192 bytes): a fetch batch's
// items are one allocation, rounded up to a size class in whole. What
// only some messages need belongs in itemExt; bench's queued-memory
// measure counts every byte of it.
func TestItemSize(t *testing.T) {
	if n := unsafe.Sizeof(item{}); n > 256 {
		t.Errorf("item is %d bytes, want at most 256: move what a fetched message does not need on its first attempt to itemExt", n)
	}
	// A recycled slab is one object of the 16 KiB size class.
	if n := unsafe.Sizeof(recycled{}); n > 16384 {
		t.Errorf("recycled slab is %d bytes, want at most 16384: recycledLen is too large", n)
	}
}
