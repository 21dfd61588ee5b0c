package pool

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestReadySet(t *testing.T) {
	t.Parallel()
	// Sequence numbers across the wrap of the counter: oldest first still.
	start := uint32(math.MaxUint32 - 50)
	var want []uint32
	var fresh, promoted []*entry[int]
	for i := range uint32(100) {
		e := &entry[int]{seq: start + i}
		want = append(want, e.seq)
		if rand.IntN(2) == 0 {
			fresh = append(fresh, e)
		} else {
			promoted = append(promoted, e)
		}
	}
	var r readySet[int]
	for _, e := range fresh {
		r.fresh.push(e) // arrivals come in order
	}
	rand.Shuffle(len(promoted), func(i, j int) { promoted[i], promoted[j] = promoted[j], promoted[i] })
	for _, e := range promoted {
		r.promoted.push(e) // promotions come in any order
	}
	var got []uint32
	for !r.empty() {
		got = append(got, r.pop().seq)
	}
	if !slices.Equal(got, want) {
		t.Errorf("popped %v, want %v", got, want)
	}
}
