package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/handoff-go/handoff/pool"
	"github.com/handoff-go/handoff/snapshot"
)

// openState opens a new state file in t.TempDir, closed when the test
// ends, and returns it as the components share it. Each seed, when
// given, writes the file at its path before it is opened (with
// snapshottest's Seed functions, as an earlier run would have left it).
func openState(t testing.TB, seed ...func(path string)) (*snapshot.State, *stateFile) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	for _, s := range seed {
		s(path)
	}
	store, err := snapshot.Open(path, snapshot.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	state := &stateFile{log: slog.New(slog.DiscardHandler)}
	state.opened(store)
	return store, state
}

// free reports whether key is free: neither blocked nor releasing.
func (k *orderedKeys) free(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys[key] == nil
}

// TestOrderedKeysParkAndRelease builds an ordered class's keys on a real
// ordered pool and a real state file, without a Runtime: messages of a
// blocked key are parked in the file in order while the others run; the
// blocker's success releases them, in park order, and frees the key once
// none is left.
func TestOrderedKeysParkAndRelease(t *testing.T) {
	store, state := openState(t)
	var (
		k      *orderedKeys
		mu     sync.Mutex
		ran    []string
		counts counters
		dels   snapshot.DoneQueue
		rel    releases
	)
	p, err := pool.New(pool.Config[*item]{
		Name: "orders", Workers: 4, QueueSize: 64, Ordered: true, KeyFunc: itemKey,
		Handler: func(_ context.Context, it *item) error {
			if !k.gate(it) {
				return errDiverted
			}
			mu.Lock()
			ran = append(ran, it.env().ID)
			mu.Unlock()
			return nil
		},
		ResultFunc: func(it *item, err error) {
			if err == nil && it.src == fromParked {
				if err := store.DeleteDone(snapshot.Move{From: it.source()}); err != nil {
					t.Error(err)
				}
			}
			if err == nil {
				k.unblock(it.env().Key, it.env().ID)
			}
			if x := it.x; x != nil && x.release != nil {
				x.release()
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	k = newOrderedKeys(keysConfig{class: "orders", pool: p, state: state, deletes: &dels, releases: &rel,
		counts: &counts, log: slog.New(slog.DiscardHandler)})
	_ = rel.Start(context.Background())

	msg := func(id, key string) *item {
		it := &item{src: fromSubmit}
		it.env().ID, it.env().Key, it.env().Class = id, []byte(key), "orders"
		return it
	}
	k.block(msg("first", "a"))
	for i := range 5 {
		for _, key := range []string{"a", "b"} {
			if err := p.Submit(t.Context(), msg(fmt.Sprint(key, i), key)); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, "parked and run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return counts[evParked].Load() == 5 && len(ran) == 5
	})
	entries, err := state.parked("orders", []byte("a"))
	if err != nil || len(entries) != 5 {
		t.Fatalf("parked records of key a: %d, %v; want 5", len(entries), err)
	}
	if k.free("a") || !k.free("b") {
		t.Fatal("key a should be blocked, key b free")
	}

	// The blocker runs (its own ID passes the gate) and succeeds.
	if err := p.Submit(t.Context(), msg("first", "a")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "key a released and free", func() bool { return k.free("a") })
	rel.Stop()
	mu.Lock()
	var a []string
	for _, id := range ran {
		if id[0] != 'b' {
			a = append(a, id)
		}
	}
	mu.Unlock()
	if want := []string{"first", "a0", "a1", "a2", "a3", "a4"}; !slices.Equal(a, want) {
		t.Errorf("key a ran %v, want %v", a, want)
	}
	if n := counts[evReleased].Load(); n != 5 {
		t.Errorf("released %d, want 5", n)
	}
	if entries, _ := state.parked("orders", []byte("a")); len(entries) != 0 {
		t.Errorf("%d parked records left", len(entries))
	}
	p.Stop(time.Second, context.Canceled)
}
