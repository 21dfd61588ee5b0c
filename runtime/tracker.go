package runtime

import (
	"sync"
	"sync/atomic"

	"github.com/handoff-go/handoff/runtime/internal/kclient"
)

// tracker keeps the commit point of one partition in one generation.
//
// Offsets are added in fetch order and marked settled (done, or persisted
// in the state file) in any order; the commit point is the lowest offset
// not yet settled, or the offset after the last one fetched when all are.
// Kafka offsets need not be contiguous (compaction, transaction markers),
// so the tracker keeps the fetched offsets themselves. A tracker belongs
// to one generation: a late result of an older generation marks the old
// tracker, which nobody commits any more, and so never moves a newer
// generation's offsets.
//
// The per-message calls take no lock. The offsets live in a chain of
// fixed-size segments: the partition's fetch loop, the only caller of
// put, fills them in order and publishes a batch of slots with one
// atomic store of the segment's count (publish); settle is one atomic store of the slot's flag,
// from any goroutine. The committer (commitPoint, unsettled, under mu)
// walks the settled prefix from where it last stopped and drops the
// segments behind it; put does the same when it starts a segment, so
// memory follows the unsettled window.
type tracker struct {
	topic     string
	partition int
	// idPrefix is the kafkaIDPrefix of the partition's records.
	idPrefix string
	// shared is what the partition's fetched items share when their
	// class does not recycle them (see batchHead).
	shared batchHead

	// tail is the segment put appends to and tailN its slots written,
	// published or not; the fetch loop's only.
	tail  *segment
	tailN int32
	// lastPut is the last offset put; before the first, one below the
	// start offset (-1 without one). The fetch loop's only.
	lastPut int64

	mu   sync.Mutex
	head *segment // first segment with a slot not known settled
	hi   int32    // first slot of head not known settled
	// end is the offset after the last offset of the settled prefix: the
	// commit point when every fetched offset is settled (-1 while
	// unknown: nothing fetched and no start offset).
	end int64
	// committed is the last offset committed to Kafka (the next to read).
	committed int64

	// caughtUp is whether the last record fetched was the partition's
	// last one (its offset + 1 was the partition's end, kclient.Record.End:
	// the last stable offset with ReadCommitted, else the high
	// watermark). A transaction's marker counts as a record here.
	caughtUp atomic.Bool
	// lag is the partition's consumer lag as last sampled (lag.go), -1
	// before.
	lag atomic.Int64
	// first is the first offset fetched, -1 before.
	first atomic.Int64
	// groupCommitted is the group's committed offset as the lag sampler
	// asked the coordinator for it while this tracker knew none (lag.go):
	// -2 until answered, -1 when the group has none. Only the sampler
	// uses it; it does not move the commit point.
	groupCommitted atomic.Int64
	// abandoned counts fetched offsets that will never settle here: given
	// back at a rebalance or by a StopRedeliver class's stop, or never
	// accepted by a pool.
	abandoned atomic.Int64
}

// segSize is the number of offsets a segment holds: a segment is about
// 4.3 KiB, allocated once per segSize fetched messages.
const segSize = 256

// segment is a run of fetched offsets, when each was fetched and their
// settled flags.
type segment struct {
	offs    [segSize]int64
	seen    [segSize]int64 // when fetched, on the runtime's clock (Runtime.mono)
	settled [segSize]atomic.Bool
	n       atomic.Int32 // slots published (publish)
	next    atomic.Pointer[segment]
}

// slot names one fetched offset in its tracker: what settle needs.
type slot struct {
	seg *segment
	i   int32
}

func newTracker(topic string, partition int, start int64) *tracker {
	s := new(segment)
	t := &tracker{topic: topic, partition: partition, idPrefix: kafkaIDPrefix(topic, partition), tail: s, head: s, end: -1, committed: -1, lastPut: -1}
	t.shared.tr = t
	t.first.Store(-1)
	t.lag.Store(-1)
	t.groupCommitted.Store(-2)
	if start >= 0 {
		t.end = start
		t.committed = start
		t.lastPut = start - 1 // a first offset below start is a rewind
	}
	return t
}

// partitionName names the tracker's partition as the client does.
func (t *tracker) partitionName() kclient.Partition {
	return kclient.Partition{Topic: t.topic, Partition: t.partition}
}

// put writes a fetched offset, fetched at seen, into the next slot and
// returns it; the committer sees it once publish (or the start of the
// next segment) publishes it. So a fetch loop's batch costs one atomic
// store of the count, not one a record. Only the partition's fetch loop
// calls it, in fetch order, and it publishes a batch before it hands
// the batch on: an offset not published is neither counted unsettled
// nor in the commit point, which stops before it.
func (t *tracker) put(offset, seen int64) slot {
	if offset <= t.lastPut {
		t.rewind()
	}
	t.lastPut = offset
	s, i := t.tail, t.tailN
	if i == 0 && s == t.head && t.first.Load() < 0 {
		t.first.Store(offset)
	}
	if i == segSize {
		s.n.Store(segSize) // the full segment published before the next
		ns := new(segment)
		s.next.Store(ns)
		t.tail, s, i = ns, ns, 0
		// Drop the settled segments now rather than at the next commit,
		// so memory follows the unsettled window, not the commit interval.
		// Never wait for the committer for it.
		if t.mu.TryLock() {
			t.advanceLocked()
			t.mu.Unlock()
		}
	}
	s.offs[i] = offset
	s.seen[i] = seen
	t.tailN = i + 1
	return slot{seg: s, i: i}
}

// rewind forgets the last commit when the fetch went back to an offset
// at or before one it had fetched: the client reset an offset out of
// range to the log's start (the topic was deleted and created again, or
// its log truncated). The commit point then follows the new offsets,
// which are below the old commit; kept, it would hold every commit back
// until the new log passed the old one.
func (t *tracker) rewind() {
	t.mu.Lock()
	t.committed = -1
	t.mu.Unlock()
}

// publish makes the slots put so far visible to the committer: one atomic
// store of the tail segment's count, which publishes the offsets and
// stamps written before it.
func (t *tracker) publish() { t.tail.n.Store(t.tailN) }

// settle marks the offset in sl done or persisted. Settling twice is
// harmless.
func (t *tracker) settle(sl slot) {
	sl.seg.settled[sl.i].Store(true)
}

// advanceLocked moves head past the settled prefix and returns the commit
// point. An offset published after the scan looked at its segment's count
// is not seen, which only keeps the commit point lower.
func (t *tracker) advanceLocked() int64 {
	for {
		s := t.head
		n := s.n.Load()
		for t.hi < n && s.settled[t.hi].Load() {
			t.end = s.offs[t.hi] + 1
			t.hi++
		}
		if t.hi < n {
			return s.offs[t.hi]
		}
		next := s.next.Load()
		if t.hi < segSize || next == nil {
			return t.end
		}
		t.head, t.hi = next, 0
	}
}

// commitPoint returns the offset to commit (the next one to read) and
// whether it is ahead of the last commit.
func (t *tracker) commitPoint() (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cp := t.advanceLocked()
	return cp, cp >= 0 && cp > t.committed
}

// allSettled reports whether every offset fetched so far is settled.
func (t *tracker) allSettled() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked()
	return t.hi >= t.head.n.Load()
}

// committedTo records a successful commit of offset.
func (t *tracker) committedTo(offset int64) {
	t.mu.Lock()
	if offset > t.committed {
		t.committed = offset
	}
	t.mu.Unlock()
}

// unsettled returns how many fetched offsets are neither done nor persisted.
func (t *tracker) unsettled() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked()
	count := 0
	for s, from := t.head, t.hi; s != nil; s, from = s.next.Load(), 0 {
		n := s.n.Load()
		for i := from; i < n; i++ {
			if !s.settled[i].Load() {
				count++
			}
		}
	}
	return count
}

// inFlight returns how many fetched offsets may still settle: neither
// settled nor abandoned.
func (t *tracker) inFlight() int {
	return t.unsettled() - int(t.abandoned.Load())
}

// committedOffset returns the last offset committed to Kafka (the next
// to read), -1 while the group has none.
func (t *tracker) committedOffset() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.committed
}

// firstFetched returns the first offset fetched in this generation, or
// none when nothing was fetched yet.
func (t *tracker) firstFetched(none int64) int64 {
	if f := t.first.Load(); f >= 0 {
		return f
	}
	return none
}

// oldest returns when the oldest fetched offset that is not settled was
// fetched, on the runtime's clock, and false when every fetched offset is
// settled. That offset is the commit point: fetch order is time order.
func (t *tracker) oldest() (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked()
	if t.hi >= t.head.n.Load() {
		return 0, false
	}
	return t.head.seen[t.hi], true
}
