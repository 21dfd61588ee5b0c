package runtime

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/handoff-go/handoff/runtime/internal/kclient"
)

// feeder is how a partition's fetch loop hands its records to its
// class's pool: it keeps no pointer to the Runtime, and calls nothing
// through a func value or an interface per record but its source. A
// class may fetch while its hold says so (not suspended nor paused;
// runtime/internal/hold).
type feeder struct {
	// byTopic is the class consuming each topic (classSet.byTopic).
	byTopic map[string]*class
	// epoch is the runtime's start (lifecycle.epoch): FirstSeen and the
	// trackers' stamps are read from one monotonic clock since it.
	epoch time.Time
	// resumes says what the fetch of a partition may skip (its saved
	// messages re-pushed here, the offsets its last stop knew done;
	// progress.go); nil for nothing.
	resumes *resumes
}

// feed returns the fetch loop of a partition of topic, nil when no class
// consumes topic: the consumer's feedFunc.
func (f *feeder) feed(topic string) fetchFunc {
	c := f.byTopic[topic]
	if c == nil {
		return nil
	}
	return func(ctx context.Context, tr *tracker, src kclient.Source, caughtUp chan<- struct{}) {
		f.fetch(ctx, c, tr, src, caughtUp)
	}
}

// fetch reads one partition from src and hands its records to the
// class's pool: the record Next waited for and those ready behind it
// (src.Ready), up to fetchBatch, in one [pool.Pool.SubmitBatch]. Each
// record is taken only while the class may fetch, as if handed on one by
// one. A full pool makes it wait, which pushes back on this partition
// only.
func (f *feeder) fetch(ctx context.Context, c *class, tr *tracker, src kclient.Source, caughtUpCh chan<- struct{}) {
	defer src.Close()
	caughtUp := false
	batch := make([]*item, 0, fetchBatch)
	ids := kafkaIDs{prefix: tr.idPrefix}
	var fetched uint64 // records, for the timing sample (see sample)
	var spare []item   // the items the last batch's allocation had left (slab.rest)
	var rc *resumeCursor
	if f.resumes != nil {
		rc = f.resumes.begin(ctx, tr)
	}
	for {
		if !c.hold.MayFetch(ctx) { // suspended or paused
			return
		}
		rec, ok := src.Next(ctx)
		if !ok {
			return
		}
		// One clock read per batch: its records were ready together.
		seen := int64(time.Since(f.epoch)) // Runtime.mono's clock
		if rc != nil && rc.done(rec.Offset) {
			rc = nil
		}
		if pass(tr, rc, &rec, seen) {
			tr.publish()
			caughtUp = f.caughtUp(tr, rec.Offset+1 >= rec.End, caughtUp, caughtUpCh)
			continue
		}
		sl := c.slab(tr, 1+min(src.Ready(), fetchBatch-1), stamp{mono: seen, wall: f.epoch.Add(time.Duration(seen))}, spare)
		batch = append(batch[:0], f.item(c, tr, &ids, &sl, &rec, &fetched))
		last := rec.Offset+1 >= rec.End
		for sl.left() && src.Ready() > 0 && c.hold.MayFetchNow() {
			more, ok := src.Next(ctx)
			if !ok {
				break
			}
			last = more.Offset+1 >= more.End
			if rc != nil && rc.done(more.Offset) {
				rc = nil
			}
			if pass(tr, rc, &more, seen) {
				continue
			}
			batch = append(batch, f.item(c, tr, &ids, &sl, &more, &fetched))
		}
		sl.handOut(len(batch))
		tr.publish() // before the pool has them: see tracker.put
		n, err := c.pool.SubmitBatch(ctx, batch)
		clear(batch)
		if err != nil {
			// Never accepted: they stay unsettled, so the commit stops
			// before the first of them and Kafka delivers them again.
			tr.abandoned.Add(int64(len(batch) - n))
			return
		}
		// What the batch did not take goes to the next one, unless Next
		// will wait: the spare items would keep their allocation alive
		// while it does, and with it the items handed out from it and
		// the fetched records those refer to.
		spare = nil
		if src.Ready() > 0 {
			spare = sl.rest()
		}
		caughtUp = f.caughtUp(tr, last, caughtUp, caughtUpCh)
	}
}

// pass puts rec, fetched at seen, in tr without handing it to the pool,
// and reports so, when it is a transaction's marker (settled at once:
// there is nothing to handle, and the commit goes past it) or an offset
// the resume cursor rc skips (see resumeCursor.skip); otherwise it does
// nothing and reports false.
func pass(tr *tracker, rc *resumeCursor, rec *kclient.Record, seen int64) bool {
	if rec.Marker {
		tr.settle(tr.put(rec.Offset, seen))
		return true
	}
	return rc != nil && rc.skip(tr, rec.Offset, seen)
}

// caughtUp records whether the partition's last record fetched was its
// last one (last), was reports what it recorded before, and tells the
// keeper without blocking when it was; it returns last.
func (f *feeder) caughtUp(tr *tracker, last, was bool, caughtUpCh chan<- struct{}) bool {
	if last != was { // written on change only: the keeper reads it
		tr.caughtUp.Store(last)
	}
	if last {
		select {
		case caughtUpCh <- struct{}{}:
		default:
		}
	}
	return last
}

// fetchBatch is the most records a fetch loop hands to its pool at once.
const fetchBatch = 64

// slab is the items of one batch of a fetch loop's records, envelopes
// included: up to fetchBatch records, as many as were ready together.
//
// Those of a class that does not recycle its messages are made in few
// allocations, not one per record. A batch takes first the items the
// fetch loop's last allocation had left (rest); when those run out, a
// batch of at least chunkMin records makes chunkLen at a time, an
// allocation that nearly fills its Go size class, and a smaller one as
// many as it may still take. What a batch did not take goes to the next
// (the fetch loop drops it when it waits for records, see fetch). An
// allocation of items, which hold pointers, carries an 8-byte header: 64
// items, 16392 bytes, would be an 18432-byte object, 32 bytes an item
// thrown away. Such items are never recycled: nothing refers to an item
// once its result is in, but a handler may keep the envelope it is
// handed (see handoff.Message), which then keeps its allocation's items
// alive, and what they refer to.
//
// A class that recycles its messages (Class.RecycleMessages, see
// recycled) takes the batch's items from one recycled slab instead; a
// batch cut short (the class closed while it was taken) leaves the rest
// of it unused.
type slab struct {
	items []item     // the items not yet taken
	n     int        // the records the batch may take
	want  int        // the records the batch may still take
	head  *batchHead // what its items share
	at    stamp      // when the batch's records were ready
}

// newSlab returns the slab of a batch of up to n records of tr's
// partition ready at at, of a class that does not recycle its messages:
// spare's items first, the rest of its fetch loop's last allocation (see
// rest), then new ones (see next).
func newSlab(tr *tracker, n int, at stamp, spare []item) slab {
	return slab{items: spare, n: n, want: n, head: &tr.shared, at: at}
}

// slab returns the slab of a batch of up to n records of tr's partition
// ready at at: a recycled one (at most recycledLen items) if the class
// recycles its messages and the batch has at least recycledMin records;
// otherwise a slab that takes spare's items first (newSlab), so that a
// queued message never holds a 16 KiB slab nearly alone.
func (c *class) slab(tr *tracker, n int, at stamp, spare []item) slab {
	if c.slabs == nil || n < recycledMin {
		return newSlab(tr, n, at, spare)
	}
	rs := c.slabs.get()
	rs.head.tr = tr
	n = min(n, recycledLen)
	return slab{items: rs.items[:n], n: n, want: n, head: &rs.head, at: at}
}

// next takes the slab's next item; the slab has room (left). A slab of a
// class that does not recycle whose items are all taken makes more:
// chunkLen for a batch of at least chunkMin records, else as many as
// the batch may still take.
func (s *slab) next() *item {
	if len(s.items) == 0 {
		n := s.want
		if s.n >= chunkMin {
			n = chunkLen
		}
		s.items = make([]item, n)
	}
	it := &s.items[0]
	s.items = s.items[1:]
	s.want--
	return it
}

// rest returns the items of a slab of a class that does not recycle its
// messages that its batch did not take, for the fetch loop's next batch:
// items never handed out, which nothing else refers to. A recycled
// slab's are not reused before the whole slab is given back: nil.
func (s *slab) rest() []item {
	if s.head != nil && s.head.rs != nil {
		return nil
	}
	return s.items
}

// handOut tells a recycled slab how many of its items its batch hands to
// the pool, before it does: each of them is given back by recycle once it
// is done. An item never handed out, or never done (failed, parked,
// handed back at a stop), keeps its slab from being recycled: the
// garbage collector takes it instead.
func (s *slab) handOut(n int) {
	if s.head.rs != nil {
		s.head.out.Store(int32(n))
	}
}

// left reports whether the slab has room for another record.
func (s *slab) left() bool { return s.want > 0 }

// batchHead is what the items of a fetch batch share: their partition's
// tracker and, in a recycled slab, the count of its items still out. The
// batches of a class that does not recycle share their tracker's
// (tracker.shared).
type batchHead struct {
	tr *tracker
	// rs is the recycled slab this head is part of, nil for a tracker's.
	rs *recycled
	// out counts rs's items handed to the pool and not yet done.
	out atomic.Int32
}

// recycled is a slab of a class that recycles its messages
// (Class.RecycleMessages): 63 items and their head in one 16 KiB object
// (a Go size class), kept on its class's free list (class.slabs) once
// all of its items handed out are done, and reused for a later batch.
type recycled struct {
	head  batchHead
	free  *freeSlabs // its class's
	items [recycledLen]item
}

const (
	// chunkLen is the items a batch of at least chunkMin records of a
	// class that does not recycle its messages makes at a time: 16 KiB
	// with the allocation's header, a Go size class, nearly filled.
	chunkLen = 63
	chunkMin = 16
	// recycledLen is the items of a recycled slab: as many as fit in 16
	// KiB beside its head.
	recycledLen = 63
	// recycledMin is the fewest records a batch of a recycling class
	// takes a recycled slab for.
	recycledMin = 16
)

// freeSlabs is a class's free list of recycled slabs: a bounded one,
// which the garbage collector does not empty (as it does a sync.Pool),
// so that a class at its steady rate makes no slab; a slab done while the
// list is full is left to the collector.
type freeSlabs struct {
	ch chan *recycled
}

// newFreeSlabs returns the free list of a class with room for
// queueSize+workers messages in its pool: room for as many slabs as
// those messages fill, and freeSpare more (the batches its fetch loops
// hold while the pool is full, slabs a retry keeps out), at most 128
// KiB a class beyond what its pool holds.
func newFreeSlabs(queueSize, workers int) *freeSlabs {
	return &freeSlabs{ch: make(chan *recycled, freeSpare+(queueSize+workers+recycledLen-1)/recycledLen)}
}

// freeSpare is the room of a class's free list beyond the slabs its
// pool's messages fill.
const freeSpare = 8

// get returns a cleared slab from the list, or a new one.
func (f *freeSlabs) get() *recycled {
	select {
	case rs := <-f.ch:
		return rs
	default:
		rs := &recycled{free: f}
		rs.head.rs = rs
		return rs
	}
}

// put keeps cleared slab rs for a later batch, if there is room.
func (f *freeSlabs) put(rs *recycled) {
	select {
	case f.ch <- rs:
	default:
	}
}

// recycle gives a done message's item back to its recycled slab, if it
// has one: the last of the slab's items handed out clears the slab,
// dropping what its items referred to, and puts it on its class's free
// list. Nothing may use the item, nor the envelope it held, after.
func (it *item) recycle() {
	h := it.head
	if h == nil || h.rs == nil {
		return
	}
	if h.out.Add(-1) == 0 {
		rs := h.rs
		clear(rs.items[:])
		rs.head.tr = nil
		rs.free.put(rs)
	}
}

// stamp is when a fetch loop's batch of records was ready: on
// Runtime.mono's clock (the tracker's stamps) and as the messages'
// FirstSeen. One clock read per batch.
type stamp struct {
	mono int64
	wall time.Time
}

// item returns the item of record rec, from sl, which has room: its
// offset put in tr (fetch publishes the batch), its ID carved from ids' blocks, its Key, Value and
// Headers the record's; fetched counts the partition's records for the
// timing sample (see sample). A direct call, so that rec stays on the
// fetch loop's stack.
func (f *feeder) item(c *class, tr *tracker, ids *kafkaIDs, sl *slab, rec *kclient.Record, fetched *uint64) *item {
	it := sl.next()
	*fetched++
	it.src, it.head, it.timed = fromKafka, sl.head, *fetched%sampleEvery == 1
	m := &it.m
	// Field by field into the zero envelope: a composite literal would
	// be built aside and copied in whole, zeros and all.
	m.ID = ids.id(rec.Offset)
	m.Class = c.cfg.Name
	m.Key, m.Value, m.Headers = rec.Key, rec.Value, rec.Headers
	m.Origin.Topic, m.Origin.Partition, m.Origin.Offset = tr.topic, tr.partition, rec.Offset
	m.Timestamp, m.FirstSeen = rec.Time, sl.at.wall
	it.slot = tr.put(rec.Offset, sl.at.mono) // published with its batch (fetch)
	return it
}

// kafkaIDPrefix returns "topic/partition/": a Kafka record's stable ID is
// that prefix and its offset, so one partition's records share it.
func kafkaIDPrefix(topic string, partition int) string {
	return kclient.Partition{Topic: topic, Partition: partition}.String() + "/"
}

// idBlockSize is the size of the blocks kafkaIDs carves IDs from: about
// 40 IDs of a 25-byte "topic/partition/offset" per allocation.
const idBlockSize = 1024

// kafkaIDs makes the IDs of one partition's fetched records, for its
// fetch loop alone. It carves them from shared blocks instead of
// allocating a string per record, the fetch loop's one allocation per
// record otherwise. The bytes behind an ID are never written again once
// it is handed out, as unsafe.String requires. An ID kept after its
// message is handled keeps its block alive, at most idBlockSize bytes
// and no pointer (see handoff.Message.ID); the runtime copies the IDs it
// keeps (parking).
//
// A partition's offsets mostly follow one another, so the ID of the
// offset after the last one carved is that ID copied with its decimal
// offset incremented in place, instead of the offset formatted again.
type kafkaIDs struct {
	prefix string // the partition's kafkaIDPrefix
	block  []byte
	// last is the offset of the block's last lastLen bytes, the last ID
	// carved from it; lastLen is 0 when the block has none.
	last    int64
	lastLen int
}

// id returns the ID of the record at offset: kafkaID(prefix, offset).
func (k *kafkaIDs) id(offset int64) string {
	const maxOffsetLen = 20 // digits of the largest int64, and a sign
	need := len(k.prefix) + maxOffsetLen
	if need > idBlockSize/4 {
		return kafkaID(k.prefix, offset) // a long topic: a string of its own
	}
	if cap(k.block)-len(k.block) < need {
		k.block = make([]byte, 0, idBlockSize)
		k.lastLen = 0
	}
	b := k.block // within its capacity: only its length changes below
	start := len(b)
	if k.lastLen > 0 && offset == k.last+1 && offset > 0 {
		b = incrementDecimal(append(b, b[start-k.lastLen:]...), start+len(k.prefix))
	} else {
		b = strconv.AppendInt(append(b, k.prefix...), offset, 10)
	}
	k.block = k.block[:len(b)] // the length alone: no pointer written
	k.last, k.lastLen = offset, len(b)-start
	return unsafe.String(&b[start], len(b)-start)
}

// incrementDecimal adds one to the non-negative decimal number b[from:],
// in place, growing it by a digit when it was all nines (999 becomes
// 1000), and returns b.
func incrementDecimal(b []byte, from int) []byte {
	i := len(b) - 1
	for ; i >= from && b[i] == '9'; i-- {
		b[i] = '0'
	}
	if i >= from {
		b[i]++
		return b
	}
	b[from] = '1'
	return append(b, '0')
}

// kafkaID returns the ID of the record at offset, prefix its partition's
// kafkaIDPrefix: a string of its own, in one allocation for topics of up
// to about 40 bytes.
func kafkaID(prefix string, offset int64) string {
	var buf [64]byte
	b := append(buf[:0], prefix...)
	return string(strconv.AppendInt(b, offset, 10))
}
