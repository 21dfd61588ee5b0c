package pool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
)

// FuzzBatchAcrossRemove is the revocation path with batches: a submitter
// per partition hands its records over with SubmitBatch in chunks larger
// than the queue, so a chunk is often split (part accepted, part waiting
// for room); one partition is revoked at a random point as the runtime
// revokes: its submitter's ctx is cancelled and it returns, then Remove
// takes the partition's items out. The input picks the pool (ordered or
// not, Handler or BatchHandler, workers, queue, batch sizes) and the
// moment. Checked, besides the harness's exactly-once accounting:
//
//   - SubmitBatch accepted a prefix of each chunk (harness.submitBatch);
//   - no item Remove returned ever started;
//   - what is left of the revoked partition after Remove is only what had
//     started: a second Remove returns nothing;
//   - the revoked partition's items that started are, per key in an
//     Ordered pool and over the partition otherwise, a prefix of its
//     accepted items: the commit can stop at the first one given back;
//   - per-key order in an Ordered pool.
func FuzzBatchAcrossRemove(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6, 7, 8, 42, 1 << 40} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		batchAcrossRemove(t, seed)
	})
}

func batchAcrossRemove(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed>>32|1))
	const parts, keysPerPart, perPart = 3, 4, 120
	ordered := rng.IntN(2) == 0
	batched := rng.IntN(2) == 0
	workers, queue := 1+rng.IntN(4), 2+rng.IntN(7)
	maxBatch := 1 + rng.IntN(5)
	chunk := 1 + rng.IntN(2*queue)
	revoked := rng.IntN(parts)
	revokeAfter := rng.IntN(perPart) // items of the revoked partition accepted before the revocation
	desc := fmt.Sprintf("seed %d: ordered %v, batch handler %v, workers %d, queue %d, max batch %d, chunk %d, revoke %d after %d",
		seed, ordered, batched, workers, queue, maxBatch, chunk, revoked, revokeAfter)

	partOf := func(it item) int { return it.id / 1_000_000 }
	var mu sync.Mutex
	started := map[int]bool{}
	byKey := map[string][]int{}
	handle := func(it item) {
		mu.Lock()
		started[it.id] = true
		byKey[it.key] = append(byKey[it.key], it.id)
		mu.Unlock()
		for range rng2(it.id).IntN(30) {
			runtime.Gosched()
		}
	}
	cfg := Config[item]{Workers: workers, QueueSize: queue, Ordered: ordered,
		Handler: func(_ context.Context, it item) error { handle(it); return nil }}
	if ordered {
		cfg.KeyFunc = keyOf
	}
	if batched {
		cfg.Handler = nil
		cfg.MaxBatch = maxBatch
		cfg.BatchHandler = func(_ context.Context, vs []item, _ []error) {
			for _, v := range vs {
				handle(v)
			}
		}
	}
	h := setup(t, cfg)

	var accepted [parts][]item
	ctxs := make([]context.Context, parts)
	cancels := make([]context.CancelFunc, parts)
	for p := range parts {
		ctxs[p], cancels[p] = context.WithCancel(context.Background())
		defer cancels[p]()
	}
	revokeNow := make(chan struct{})
	revokedDone := make(chan struct{})
	var submitters sync.WaitGroup
	for p := range parts {
		submitters.Go(func() {
			if p == revoked {
				defer close(revokedDone)
			}
			var its []item
			for n := range perPart {
				its = append(its, item{id: p*1_000_000 + n, key: fmt.Sprint("p", p, "k", n%keysPerPart)})
			}
			for c := range slices.Chunk(its, chunk) {
				n, err := h.submitBatch(ctxs[p], c)
				accepted[p] = append(accepted[p], c[:n]...)
				if p == revoked && len(accepted[p]) >= revokeAfter {
					select {
					case <-revokeNow:
					default:
						close(revokeNow)
					}
				}
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						t.Errorf("%s: SubmitBatch: %v", desc, err)
					}
					return
				}
			}
		})
	}
	<-revokeNow
	// The runtime's order: the partition's fetch loop ends (a SubmitBatch
	// waiting for room returns its accepted prefix), then its items are
	// taken out.
	cancels[revoked]()
	<-revokedDone
	removed := h.remove(func(it item) bool { return partOf(it) == revoked })
	again := h.remove(func(it item) bool { return partOf(it) == revoked })
	submitters.Wait()
	h.drain()
	if len(again) != 0 {
		t.Errorf("%s: a second Remove took %v: the first left items of the partition unstarted", desc, ids(again))
	}

	mu.Lock()
	defer mu.Unlock()
	for _, it := range removed {
		if started[it.id] {
			t.Errorf("%s: item %d was removed and started", desc, it.id)
		}
	}
	givenBack := map[int]bool{}
	for _, it := range removed {
		givenBack[it.id] = true
	}
	if !ordered {
		// Items start in submission order: the started ones of the
		// partition are a prefix of what it got accepted.
		checkPrefix(t, desc, "partition", accepted[revoked], started, givenBack)
	} else {
		perKey := map[string][]item{}
		for _, it := range accepted[revoked] {
			perKey[it.key] = append(perKey[it.key], it)
		}
		for k, its := range perKey {
			checkPrefix(t, desc, "key "+k, its, started, givenBack)
		}
		for k, got := range byKey {
			if !slices.IsSorted(got) {
				t.Errorf("%s: key %s ran out of order: %v", desc, k, got)
			}
		}
	}
}

// checkPrefix fails unless the started items of its come first, and every
// one after them was given back.
func checkPrefix(t *testing.T, desc, what string, its []item, started, givenBack map[int]bool) {
	t.Helper()
	i := 0
	for i < len(its) && started[its[i].id] {
		i++
	}
	for _, it := range its[i:] {
		if started[it.id] {
			t.Errorf("%s: %s: item %d started after an earlier one was given back (%v)", desc, what, it.id, ids(its))
			return
		}
		if !givenBack[it.id] {
			t.Errorf("%s: %s: item %d accepted, not started and not given back", desc, what, it.id)
		}
	}
}

// rng2 is a small deterministic source for one item's busy-work.
func rng2(id int) *rand.Rand { return rand.New(rand.NewPCG(uint64(id), 7)) }

func TestBatchAcrossRemove(t *testing.T) {
	t.Parallel()
	for seed := range uint64(batchRemoveSeeds) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			batchAcrossRemove(t, seed+100)
		})
	}
}
