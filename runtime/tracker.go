package runtime

import (
	"sync"
	"sync/atomic"
)

// tracker keeps the commit point of one partition in one generation.
//
// Offsets are added in fetch order and marked settled (done, or persisted
// in the state file) in any order; the commit point is the lowest offset
// not yet settled, or the offset after the last one fetched when all are.
// Kafka offsets need not be contiguous (compaction, transaction markers),
// so the tracker keeps the fetched offsets themselves, addressed by a
// per-tracker sequence number. A tracker belongs to one generation: a late
// result of an older generation marks the old tracker, which nobody
// commits any more, and so never moves a newer generation's offsets.
type tracker struct {
	topic     string
	partition int

	mu      sync.Mutex
	base    uint64  // sequence number of offs[head]
	head    int     // first unsettled slot
	offs    []int64 // fetched offsets, in fetch order, from head on
	settled []bool
	next    int64 // offset after the last fetched; -1 before any fetch
	// committed is the last offset committed to Kafka (the next to read).
	committed int64
	// hwm is the partition's high watermark as of the last fetch.
	hwm atomic.Int64
	// abandoned counts fetched offsets that will never settle here: given
	// back at a rebalance or never accepted by a pool.
	abandoned atomic.Int64
}

func newTracker(topic string, partition int, start int64) *tracker {
	t := &tracker{topic: topic, partition: partition, next: -1, committed: -1}
	if start >= 0 {
		t.next = start
		t.committed = start
	}
	return t
}

// add records a fetched offset and returns its sequence number.
func (t *tracker) add(offset int64) uint64 {
	t.mu.Lock()
	seq := t.base + uint64(len(t.offs)-t.head)
	t.offs = append(t.offs, offset)
	t.settled = append(t.settled, false)
	t.next = offset + 1
	t.mu.Unlock()
	return seq
}

// settle marks the offset with sequence number seq done or persisted.
func (t *tracker) settle(seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if seq < t.base {
		return // already behind the commit point
	}
	i := t.head + int(seq-t.base)
	if i >= len(t.offs) {
		return
	}
	t.settled[i] = true
	if i != t.head {
		return
	}
	for t.head < len(t.offs) && t.settled[t.head] {
		t.head++
		t.base++
	}
	// Compact once the settled prefix is the larger half.
	if t.head > 1024 && t.head*2 > len(t.offs) {
		n := copy(t.offs, t.offs[t.head:])
		copy(t.settled, t.settled[t.head:])
		t.offs, t.settled = t.offs[:n], t.settled[:n]
		t.head = 0
	}
}

// commitPoint returns the offset to commit (the next one to read) and
// whether it is ahead of the last commit.
func (t *tracker) commitPoint() (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var cp int64
	if t.head < len(t.offs) {
		cp = t.offs[t.head]
	} else {
		cp = t.next
	}
	return cp, cp >= 0 && cp > t.committed
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
	n := 0
	for _, s := range t.settled[t.head:] {
		if !s {
			n++
		}
	}
	return n
}

// inFlight returns how many fetched offsets may still settle: neither
// settled nor abandoned.
func (t *tracker) inFlight() int {
	return t.unsettled() - int(t.abandoned.Load())
}

// lag returns the high watermark minus the committed offset.
func (t *tracker) lag() int64 {
	t.mu.Lock()
	c := t.committed
	t.mu.Unlock()
	if c < 0 {
		return 0
	}
	return max(t.hwm.Load()-c, 0)
}
