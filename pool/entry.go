package pool

import "sync/atomic"

// States of an entry. queued -> running, finishing -> waiting -> queued and
// queued or waiting -> taken change under Pool.mu; running -> finishing (by
// the worker) and running -> straggler (by Stop) race, and the
// compare-and-swap decides who reports the item.
const (
	stateQueued    uint32 = iota // accepted, not started
	stateRunning                 // handler running
	stateFinishing               // handler returned; the worker reports it
	stateTaken                   // taken out unstarted or waiting by Stop
	stateStraggler               // reported by Stop as interrupted; its result is dropped
	stateWaiting                 // failed, waiting out its retry delay
)

// entry carries one accepted item. It is on exactly one of the pool's three
// intrusive lists: unstarted (while queued), running, or waiting (while it
// waits out a retry delay). Its size is kept at 64 bytes, a size class,
// for a pointer T: the retry timer lives in Pool.timers, and the
// ordering key is kept as its hash (keyOf), not as its string.
type entry[T any] struct {
	v          T
	key        uint64    // hash of the ordering key (keyOf); Ordered pools only
	prev, next *entry[T] // unstarted, running or waiting list
	readyNext  *entry[T] // readySet.fresh; Ordered pools only
	keyNext    *entry[T] // next item of the same key; Ordered pools only
	seq        uint32    // acceptance order, wrapping; Ordered pools only
	state      atomic.Uint32
	started    int64 // when its handler started, on the pool's clock; under Pool.mu
}

// list is an intrusive doubly-linked list of entries: O(1) append and
// removal, no allocation.
type list[T any] struct {
	head, tail *entry[T]
}

func (l *list[T]) pushBack(e *entry[T]) {
	e.prev, e.next = l.tail, nil
	if l.tail == nil {
		l.head = e
	} else {
		l.tail.next = e
	}
	l.tail = e
}

// insertBefore links e in front of at, or at the back when at is nil.
func (l *list[T]) insertBefore(e, at *entry[T]) {
	if at == nil {
		l.pushBack(e)
		return
	}
	e.prev, e.next = at.prev, at
	if at.prev == nil {
		l.head = e
	} else {
		at.prev.next = e
	}
	at.prev = e
}

func (l *list[T]) remove(e *entry[T]) {
	if e.prev == nil {
		l.head = e.next
	} else {
		e.prev.next = e.next
	}
	if e.next == nil {
		l.tail = e.prev
	} else {
		e.next.prev = e.prev
	}
	e.prev, e.next = nil, nil
}

// readySet holds the ready items of an Ordered pool (those whose key is
// free) and gives out the oldest accepted first, so that items start in
// submission order as far as their keys allow, as a single worker would
// run them. Items ready on arrival are the newest, so a FIFO keeps them in
// order; only items promoted when their key frees up need the heap, which
// stays as small as the number of keys with a backlog.
type readySet[T any] struct {
	fresh    fifo[T]
	promoted readyHeap[T]
}

func (r *readySet[T]) empty() bool { return r.fresh.head == nil && len(r.promoted) == 0 }

func (r *readySet[T]) pop() *entry[T] {
	if len(r.promoted) > 0 && (r.fresh.head == nil || before(r.promoted[0].seq, r.fresh.head.seq)) {
		return r.promoted.pop()
	}
	return r.fresh.pop()
}

func (r *readySet[T]) reset() {
	r.fresh = fifo[T]{}
	clear(r.promoted)
	r.promoted = r.promoted[:0]
}

// fifo is a singly-linked queue of entries through readyNext.
type fifo[T any] struct {
	head, tail *entry[T]
	n          int
}

func (q *fifo[T]) push(e *entry[T]) {
	q.n++
	e.readyNext = nil
	if q.tail == nil {
		q.head = e
	} else {
		q.tail.readyNext = e
	}
	q.tail = e
}

func (q *fifo[T]) pop() *entry[T] {
	e := q.head
	if e == nil {
		return nil
	}
	q.n--
	q.head = e.readyNext
	if q.head == nil {
		q.tail = nil
	}
	e.readyNext = nil
	return e
}

// readyHeap is a min-heap of entries by seq.
type readyHeap[T any] []readyItem[T]

// readyItem keeps the sort key next to the pointer, so sifting does not
// chase entries.
type readyItem[T any] struct {
	seq uint32
	e   *entry[T]
}

// before reports whether seq a was given out before seq b. The counter
// wraps, so the difference decides; that is right as long as fewer than
// 2^31 items are accepted while one item stays in the pool. Items alive at
// once are few (about QueueSize + Workers), but an item behind a busy key,
// or waiting out retry delays, keeps its seq for as long as it stays; past
// that span only the order across keys suffers (see Pool.requeueLocked).
func before(a, b uint32) bool { return int32(a-b) < 0 }

func (h *readyHeap[T]) push(e *entry[T]) {
	q := append(*h, readyItem[T]{e.seq, e})
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if !before(q[i].seq, q[parent].seq) {
			break
		}
		q[parent], q[i] = q[i], q[parent]
		i = parent
	}
	*h = q
}

func (h *readyHeap[T]) pop() *entry[T] {
	q := *h
	if len(q) == 0 {
		return nil
	}
	e := q[0].e
	last := len(q) - 1
	q[0] = q[last]
	q[last] = readyItem[T]{}
	q = q[:last]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(q) && before(q[l].seq, q[least].seq) {
			least = l
		}
		if r < len(q) && before(q[r].seq, q[least].seq) {
			least = r
		}
		if least == i {
			break
		}
		q[i], q[least] = q[least], q[i]
		i = least
	}
	*h = q
	return e
}

// waiter is a Submit or SubmitBatch waiting for room. Whoever frees a
// slot admits the waiter's next entry itself, and sends on ch (buffered
// 1, so that waiters are recycled) once all of es are admitted, so a
// granted Submit has already been accepted when it wakes; a SubmitBatch
// that gives up owns es[:n] no more.
type waiter[T any] struct {
	es         []*entry[T] // in submission order; Submit's is one
	n          int         // of es, how many are admitted
	one        [1]*entry[T]
	ch         chan struct{}
	granted    bool // all of es admitted
	first      bool // a SubmitFirst: on Pool.firsts, not Pool.waiters
	prev, next *waiter[T]
}

// waitList is an intrusive FIFO of waiters with O(1) removal of a waiter
// that gives up.
type waitList[T any] struct {
	head, tail *waiter[T]
}

func (l *waitList[T]) pushBack(w *waiter[T]) {
	w.prev, w.next = l.tail, nil
	if l.tail == nil {
		l.head = w
	} else {
		l.tail.next = w
	}
	l.tail = w
}

func (l *waitList[T]) remove(w *waiter[T]) {
	if w.prev == nil {
		l.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		l.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
}
