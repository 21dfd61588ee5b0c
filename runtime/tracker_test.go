package runtime

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// add puts a fetched offset, fetched at seen, and publishes it at once:
// one offset at a time, as the tests and benchmarks hand them over (the
// fetch loop puts a batch and publishes it once).
func (t *tracker) add(offset, seen int64) slot {
	sl := t.put(offset, seen)
	t.publish()
	return sl
}

// TestTrackerCommitRule: out-of-order completion never commits past a gap.
func TestTrackerCommitRule(t *testing.T) {
	t.Parallel()
	tr := newTracker("t", 0, -2)
	if _, ok := tr.commitPoint(); ok {
		t.Fatal("commit point before any fetch")
	}
	// Offsets with a gap (compaction): 10, 11, 13, 14, 15.
	offs := []int64{10, 11, 13, 14, 15}
	seqs := make([]slot, len(offs))
	for i, o := range offs {
		seqs[i] = tr.add(o, 0)
	}
	check := func(want int64, wantOK bool) {
		t.Helper()
		cp, ok := tr.commitPoint()
		if cp != want || ok != wantOK {
			t.Fatalf("commit point %d %v, want %d %v", cp, ok, want, wantOK)
		}
	}
	check(10, true) // nothing settled: commit where we started reading
	tr.committedTo(10)
	check(10, false)
	tr.settle(seqs[2]) // 13 done, 10 and 11 not
	tr.settle(seqs[4]) // 15 done
	check(10, false)
	tr.settle(seqs[0])
	check(11, true)
	tr.settle(seqs[1]) // 10, 11, 13 done: next unsettled is 14
	check(14, true)
	tr.settle(seqs[3])
	check(16, true)
	tr.committedTo(16)
	check(16, false)
	tr.settle(seqs[3]) // settling twice is harmless
	check(16, false)
	if n := tr.unsettled(); n != 0 {
		t.Errorf("unsettled %d", n)
	}
}

// TestTrackerRandomOrder checks the rule against a model over random
// completion orders, across compactions of the internal slices.
func TestTrackerRandomOrder(t *testing.T) {
	t.Parallel()
	for round := range 20 {
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		tr := newTracker("t", 0, 0)
		const n = 5000
		var offs []int64
		var seqs []slot
		o := int64(0)
		for range n {
			o += 1 + int64(rng.IntN(3)) // gaps
			offs = append(offs, o)
			seqs = append(seqs, tr.add(o, 0))
		}
		done := make([]bool, n)
		perm := rng.Perm(n)
		for k, i := range perm {
			tr.settle(seqs[i])
			done[i] = true
			if k%97 != 0 {
				continue
			}
			want := o + 1
			for j := range n {
				if !done[j] {
					want = offs[j]
					break
				}
			}
			if cp, _ := tr.commitPoint(); cp != want {
				t.Fatalf("round %d step %d: commit point %d, model says %d", round, k, cp, want)
			}
		}
		if cp, _ := tr.commitPoint(); cp != o+1 {
			t.Fatalf("all settled: commit point %d, want %d", cp, o+1)
		}
	}
}

// TestTrackerConcurrent runs the tracker as the runtime does: one fetch
// loop adds, several workers settle in any order, and a committer asks for
// the commit point meanwhile. Every offset below a commit point must have
// been settled before it was returned, commit points never go back, and
// once all are settled the point is the offset after the last. Run with
// -race: it also checks the publication of slots without a lock.
func TestTrackerConcurrent(t *testing.T) {
	t.Parallel()
	t.Run("add", func(t *testing.T) { t.Parallel(); hammerTracker(t, false) })
	// As the fetch loop does: a batch put, published, then handed on.
	t.Run("put-batches", func(t *testing.T) { t.Parallel(); hammerTracker(t, true) })
}

// hammerTracker is TestTrackerConcurrent, the offsets added one at a
// time or, batched, put in batches of 1 to 64 published together.
func hammerTracker(t *testing.T, batched bool) {
	const n = 20_000
	tr := newTracker("t", 0, 0)
	offs := make([]int64, n)
	var settled [n]atomic.Bool // the model: set before settle is called
	work := make(chan int, 64)
	slots := make([]slot, n)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var held []int
			for i := range work {
				held = append(held, i)
				if len(held) < 8 {
					continue
				}
				k := rng.IntN(len(held)) // settle out of order
				settled[held[k]].Store(true)
				tr.settle(slots[held[k]])
				held = append(held[:k], held[k+1:]...)
			}
			for _, i := range held {
				settled[i].Store(true)
				tr.settle(slots[i])
			}
		})
	}
	stop := make(chan struct{})
	committerDone := make(chan error, 1)
	go func() {
		last := int64(0)
		for {
			select {
			case <-stop:
				committerDone <- nil
				return
			default:
			}
			cp, ok := tr.commitPoint()
			if cp < last {
				committerDone <- fmt.Errorf("commit point went back from %d to %d", last, cp)
				return
			}
			last = cp
			if ok {
				tr.committedTo(cp)
			}
			// offs[i] = 3i+1: every offset below cp belongs to an index
			// below (cp+1)/3.
			for i := range min((cp+1)/3, n) {
				if !settled[i].Load() {
					committerDone <- fmt.Errorf("commit point %d passes unsettled offset %d", cp, offs[i])
					return
				}
			}
		}
	}()
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < n; {
		k := 1
		if batched {
			k = min(1+rng.IntN(64), n-i)
		}
		for j := i; j < i+k; j++ {
			offs[j] = 3*int64(j) + 1 // gaps, as after compaction
			if batched {
				slots[j] = tr.put(offs[j], 0)
			} else {
				slots[j] = tr.add(offs[j], 0)
			}
		}
		if batched {
			tr.publish()
		}
		for j := i; j < i+k; j++ {
			work <- j
		}
		i += k
	}
	close(work)
	wg.Wait()
	close(stop)
	if err := <-committerDone; err != nil {
		t.Fatal(err)
	}
	if cp, _ := tr.commitPoint(); cp != offs[n-1]+1 {
		t.Fatalf("all settled: commit point %d, want %d", cp, offs[n-1]+1)
	}
	if u := tr.unsettled(); u != 0 {
		t.Fatalf("unsettled %d after all settled", u)
	}
	if tr.head != tr.tail {
		t.Errorf("settled segments are still held: head is not the tail")
	}
}

// TestTrackerUnsettled counts unsettled offsets across segments.
func TestTrackerUnsettled(t *testing.T) {
	t.Parallel()
	tr := newTracker("t", 0, 0)
	var slots []slot
	for o := range int64(3*segSize + 10) {
		slots = append(slots, tr.add(o, 0))
	}
	for i, sl := range slots {
		if i%5 != 0 {
			tr.settle(sl)
		}
	}
	want := (len(slots) + 4) / 5
	if u := tr.unsettled(); u != want {
		t.Fatalf("unsettled %d, want %d", u, want)
	}
	tr.abandoned.Add(2)
	if f := tr.inFlight(); f != want-2 {
		t.Fatalf("in flight %d, want %d", f, want-2)
	}
	if cp, _ := tr.commitPoint(); cp != 0 {
		t.Fatalf("commit point %d, want 0", cp)
	}
}

// TestTrackerPutPublish: an offset put is neither unsettled nor in the
// commit point until published; publish shows a batch at once; starting a
// segment publishes the full one before it.
func TestTrackerPutPublish(t *testing.T) {
	t.Parallel()
	tr := newTracker("t", 0, 10)
	a := tr.put(10, 0)
	b := tr.put(11, 0)
	if u := tr.unsettled(); u != 0 {
		t.Fatalf("unsettled %d before publish, want 0", u)
	}
	tr.settle(a)
	tr.settle(b)
	if cp, ok := tr.commitPoint(); cp != 10 || ok {
		t.Fatalf("before publish: commit point %d (ahead %v), want 10, not ahead", cp, ok)
	}
	tr.publish()
	if cp, ok := tr.commitPoint(); cp != 12 || !ok {
		t.Fatalf("after publish: commit point %d (ahead %v), want 12", cp, ok)
	}
	if f := tr.firstFetched(-1); f != 10 {
		t.Errorf("first fetched %d, want 10", f)
	}
	// Fill the first segment and start the second without a publish: the
	// full segment is published, the new one's first slot is not.
	var last slot
	for off := int64(12); off < 12+segSize-2+1; off++ {
		last = tr.put(off, 0)
	}
	if last.seg == a.seg {
		t.Fatal("the last put did not start a second segment")
	}
	if u := tr.unsettled(); u != segSize-2 {
		t.Fatalf("unsettled %d with the first segment full and unpublished tail, want %d", u, segSize-2)
	}
	tr.publish()
	if u := tr.unsettled(); u != segSize-1 {
		t.Fatalf("unsettled %d after publish, want %d", u, segSize-1)
	}
}
