package runtime

import (
	"math/rand/v2"
	"testing"
)

// TestTrackerCommitRule: out-of-order completion never commits past a gap.
func TestTrackerCommitRule(t *testing.T) {
	tr := newTracker("t", 0, -2)
	if _, ok := tr.commitPoint(); ok {
		t.Fatal("commit point before any fetch")
	}
	// Offsets with a gap (compaction): 10, 11, 13, 14, 15.
	offs := []int64{10, 11, 13, 14, 15}
	seqs := make([]uint64, len(offs))
	for i, o := range offs {
		seqs[i] = tr.add(o)
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
	for round := range 20 {
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		tr := newTracker("t", 0, 0)
		const n = 5000
		var offs []int64
		var seqs []uint64
		o := int64(0)
		for range n {
			o += 1 + int64(rng.IntN(3)) // gaps
			offs = append(offs, o)
			seqs = append(seqs, tr.add(o))
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
