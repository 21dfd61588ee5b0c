package runtime

import (
	"context"
	"fmt"
	"github.com/handoff-go/handoff/runtime/internal/service"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/pool"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/snapshot"
)

// keyState is the state of one key of an ordered class that is not free.
//
// A key is blocked while one of its messages is a dead letter or waits for
// a delayed redelivery: blocker is that message's ID, and later messages
// of the key are parked in the state file as they come up. When the
// blocker succeeds or is discarded the key is releasing: its parked
// messages run in park order, and messages that come up meanwhile are
// parked behind them. When none is left the key is free (no entry).
type keyState struct {
	blocker   string
	releasing bool
	// release numbers the key's releases: a release goroutine stops as
	// soon as a newer one has started, so two never push the same records.
	// The numbers are the class's (orderedKeys.released), never reused:
	// a release of a state that was dropped (forget) does not take a new
	// state of its key for its own.
	release uint64
	// part is the input partition the key's blocker and parked records
	// belong to, when routed (the changelog is on): its revocation drops
	// the state (forget), which a restore of the partition here builds
	// again from the file.
	part   kclient.Partition
	routed bool
}

// keysConfig is what an ordered class's keys are built from.
type keysConfig struct {
	class    string
	pool     *pool.Pool[*item]
	state    *stateFile
	deletes  *snapshot.DoneQueue // a done parked message whose delete failed is not pushed again
	releases *releases           // runs the key releases; the stop's quiesce closes it
	counts   *counters           // the class's
	// clog names the input partition a message belongs to
	// (stateLog.partitionOf: false for none) and reports whether this
	// instance owns it (stateLog.ownsPartition: restored here, not
	// revoked since). Nil (a test's) routes none and owns every one.
	clog *stateLog
	log  *slog.Logger
}

// orderedKeys is the gate, the parking and the releases of one ordered
// class's keys. mu also serializes the parking writes, so that a key's
// parked messages keep their order and a release sees every one of them.
// Its methods are safe for concurrent use.
type orderedKeys struct {
	cfg  keysConfig
	mu   sync.Mutex
	keys map[string]*keyState
	// released numbers the releases of all the keys (keyState.release).
	released uint64
	// inPool are the parked records whose messages a release pushed and
	// that have not left the pool: a later release of their key (after a
	// revocation dropped it) does not push them again.
	inPool map[string]struct{}
	lines  parkLines // the parkings' log lines, rate-limited per key (parklog.go)
}

func newOrderedKeys(cfg keysConfig) *orderedKeys {
	return &orderedKeys{cfg: cfg, keys: map[string]*keyState{}, inPool: map[string]struct{}{}}
}

// gate reports whether an ordered class's message may run now. When it
// may not, the message is parked (or, when it is a parked one whose key
// got blocked again, left where it is).
func (k *orderedKeys) gate(it *item) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.keys[string(it.env().Key)]
	switch {
	case st == nil:
		return true
	case st.blocker != "":
		if it.env().ID == st.blocker {
			return true // the blocker's own redelivery or requeue
		}
	case st.releasing:
		if it.src == fromParked && it.extOrZero().relGen == st.release {
			return true // pushed by the key's current release
		}
	}
	if it.src == fromParked {
		// Still parked, in its place: the key was blocked again, or a
		// newer release pushes it.
		return false
	}
	rec := it.record(reasonParked, nil, time.Now())
	if !k.cfg.state.park(it, k.cfg.class, rec) {
		return true // could not park: run it rather than lose its place
	}
	k.cfg.counts.inc(evParked)
	k.lines.parked(k.cfg.log, k.cfg.class, it.env().Key, it.env().ID, st.blocker)
	return false
}

// block makes it the blocker of its key: a dead letter or a message that
// waits for a delayed redelivery.
func (k *orderedKeys) block(it *item) {
	part, routed := k.routeOf(it.env())
	k.blockAt(it, part, routed)
}

// blockHere is block for a blocker that has no other copy than this
// instance's memory (unsaved.go): a revocation does not drop it.
func (k *orderedKeys) blockHere(it *item) { k.blockAt(it, kclient.Partition{}, false) }

// blockAt makes it the blocker of its key, which belongs to part when
// routed (see forget). A key of a partition this instance does not own
// is not blocked here: only a partition's owner blocks its keys, from
// the blocker's record it follows (a block here would outlive the
// blocker, which the owner requeues or discards, and park the key's
// later messages for good).
func (k *orderedKeys) blockAt(it *item, part kclient.Partition, routed bool) {
	if routed && !k.cfg.clog.ownsPartition(part) {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.keys[string(it.env().Key)]
	if st == nil {
		st = &keyState{}
		k.keys[string(it.env().Key)] = st
	}
	st.blocker, st.releasing = strings.Clone(it.env().ID), false
	st.part, st.routed = part, routed
}

// routeOf is the partition of m's record (stateLog.partitionOf), false
// when there is none.
func (k *orderedKeys) routeOf(m *handoff.Message) (kclient.Partition, bool) {
	if m == nil {
		return kclient.Partition{}, false
	}
	return k.cfg.clog.partitionOf(m)
}

// forget drops the keys blocked or releasing whose blockers and parked
// records belong to partition p, revoked from this instance, and returns
// them: they are the partition's next owner's, which may finish the
// blockers (requeue, discard) and releases the keys itself; a restore of
// p here builds them again from the file. A release of a dropped key
// stops.
func (k *orderedKeys) forget(p kclient.Partition) map[string]bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	var gone map[string]bool
	for key, st := range k.keys {
		if st.routed && st.part == p {
			delete(k.keys, key)
			if gone == nil {
				gone = map[string]bool{}
			}
			gone[key] = true
		}
	}
	return gone
}

// unblock is called when an ordered class's message id of key is done or
// discarded: if it was its key's blocker, the key's parked messages are
// released.
func (k *orderedKeys) unblock(key []byte, id string) {
	k.mu.Lock()
	st := k.keys[string(key)]
	if st == nil || st.blocker != id {
		k.mu.Unlock()
		return
	}
	st.blocker, st.releasing = "", true
	k.released++
	st.release = k.released
	n := st.release
	k.mu.Unlock()
	k.startRelease(key, n)
}

// startRelease runs release number n of key in a goroutine the stop joins.
func (k *orderedKeys) startRelease(key []byte, n uint64) {
	key = append([]byte(nil), key...)
	k.cfg.releases.start(func(ctx context.Context) { k.release(ctx, key, n) })
}

// current reports whether release n of key is still the key's release.
func (k *orderedKeys) current(key []byte, n uint64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.keys[string(key)]
	return st != nil && st.releasing && st.release == n
}

// release re-pushes a releasing key's parked messages, in park order, batch
// by batch, until none is left, then frees the key. A parked message's
// record is deleted only once it is done; one whose delete failed is not
// pushed again (see releasable).
func (k *orderedKeys) release(ctx context.Context, key []byte, n uint64) {
	for {
		if !k.current(key, n) {
			return // blocked again, or a newer release took over
		}
		entries, err := k.releasable(key)
		if err != nil {
			k.cfg.log.Error("parked messages not read; the key stays parked until the next start", "class", k.cfg.class, "err", err)
			return
		}
		k.mu.Lock()
		entries = k.notInPool(entries)
		k.mu.Unlock()
		if len(entries) == 0 {
			k.mu.Lock()
			// Parking writes hold mu, so a second look under it is final.
			entries, err = k.releasable(key)
			entries = k.notInPool(entries)
			if err == nil && len(entries) == 0 {
				if st := k.keys[string(key)]; st != nil && st.releasing && st.release == n {
					delete(k.keys, string(key))
				}
				k.mu.Unlock()
				return
			}
			k.mu.Unlock()
			if err != nil {
				k.cfg.log.Error("parked messages not read; the key stays parked until the next start", "class", k.cfg.class, "err", err)
				return
			}
		}
		var wg sync.WaitGroup
		for _, e := range entries {
			if !k.current(key, n) {
				break // the rest stay parked for the next release
			}
			it := fromRecord(e.Record, fromParked)
			x := it.ext()
			pk := string(e.Key)
			x.parkedKey, x.relGen, x.release = e.Key, n, func() { k.left(pk); wg.Done() }
			wg.Add(1)
			k.mu.Lock()
			k.inPool[pk] = struct{}{}
			k.mu.Unlock()
			if err := k.cfg.pool.Submit(ctx, it); err != nil {
				x.release()
				return // stopping: the rest stay parked
			}
			k.cfg.counts.inc(evReleased)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			return // the stop takes the submitted ones out of the pools
		}
	}
}

// releasable returns the parked records of key that its release may
// push: all but those of done messages whose delete failed (they wait for
// the batched delete; pushed again, they would run again). The caller
// leaves out those still in the pool (notInPool).
func (k *orderedKeys) releasable(key []byte) ([]snapshot.ParkedEntry, error) {
	entries, err := k.cfg.state.parked(k.cfg.class, key)
	if err != nil {
		return nil, err
	}
	return k.cfg.deletes.NotDone(entries), nil
}

// notInPool returns entries but those whose messages an earlier release
// pushed that are still in the pool, in entries' array. The caller holds
// mu.
func (k *orderedKeys) notInPool(entries []snapshot.ParkedEntry) []snapshot.ParkedEntry {
	if len(k.inPool) == 0 {
		return entries
	}
	return slices.DeleteFunc(entries, func(e snapshot.ParkedEntry) bool {
		_, in := k.inPool[string(e.Key)]
		return in
	})
}

// left is told that the message of parked record pk, pushed by a
// release, left the pool.
func (k *orderedKeys) left(pk string) {
	k.mu.Lock()
	delete(k.inPool, pk)
	k.mu.Unlock()
}

// blockIfReleasing makes it its key's blocker when the key is releasing
// and no release has started: used at start for a dead letter requeued
// offline, which must run before the messages parked behind it.
func (k *orderedKeys) blockIfReleasing(it *item) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if st := k.keys[string(it.env().Key)]; st != nil && st.releasing && st.blocker == "" {
		st.blocker, st.releasing = strings.Clone(it.env().ID), false
	}
}

// restoreReleasing marks key releasing, at a recovery, unless it is
// blocked or releasing already: its parked messages have no blocker. m,
// when set, is the message of one of them: where the key belongs. It
// reports whether it marked it; startRestored starts its release.
func (k *orderedKeys) restoreReleasing(key []byte, m *handoff.Message) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys[string(key)] != nil {
		return false
	}
	k.released++
	st := &keyState{releasing: true, release: k.released}
	st.part, st.routed = k.routeOf(m)
	k.keys[string(key)] = st
	return true
}

// startRestored starts the releases of keys, restored as releasing by a
// recovery, that are still releasing.
func (k *orderedKeys) startRestored(keys [][]byte) {
	k.mu.Lock()
	var start [][]byte
	var gens []uint64
	for _, key := range keys {
		if st := k.keys[string(key)]; st != nil && st.releasing {
			start = append(start, key)
			gens = append(gens, st.release)
		}
	}
	k.mu.Unlock()
	for i, key := range start {
		k.startRelease(key, gens[i])
	}
}

// count returns how many keys are blocked or releasing.
func (k *orderedKeys) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.keys)
}

// releases is the service running the key releases of ordered classes.
// They feed the pools, so they stop at the quiesce, with fetching: Stop
// ends their context and joins them; a release started before Start or
// after Stop does not run (the next start releases the key).
type releases struct{ service.Base }

// Start lets releases start; see service.Service.
func (rs *releases) Start(ctx context.Context) error {
	rs.StartInit(ctx)
	return nil
}

// start runs fn in a goroutine Stop joins, unless releases are not
// started or stopped.
func (rs *releases) start(fn func(ctx context.Context)) { rs.Go(fn) }

// ParkedKey is a key of an ordered class whose messages wait behind a
// blocker (a dead letter or a message waiting for redelivery).
type ParkedKey struct {
	// Class is the ordered class the key belongs to.
	Class string
	// Key is the message key; nil for the empty (or nil) key.
	Key []byte
	// Count is how many messages are parked under it.
	Count int
	// Oldest is when its first parked message was parked.
	Oldest time.Time
}

// ParkedKeys lists every parked key with its count, in class and key
// order. It reads the state file and needs a running runtime. With the
// changelog it lists only the parked messages of partitions this
// instance owns, as DeadLetters does its dead letters (the others are
// their owner's; their records stay in this file, unused): a key whose
// parked messages all belong elsewhere is left out, and Count and
// Oldest are of the owned ones.
func (r *Runtime) ParkedKeys() ([]ParkedKey, error) {
	if _, err := r.state.get(); err != nil {
		return nil, err
	}
	counts, err := r.state.parkedKeys()
	if err != nil {
		return nil, fmt.Errorf("runtime: parked keys: %w", err)
	}
	out := make([]ParkedKey, 0, len(counts))
	for _, pc := range counts {
		n, oldest, ok, err := r.clog.ownedParked(pc)
		if err != nil {
			return nil, fmt.Errorf("runtime: parked keys: %w", err)
		}
		if !ok {
			continue
		}
		out = append(out, ParkedKey{Class: pc.Class, Key: pc.Key, Count: n, Oldest: oldest})
	}
	return out, nil
}

// Parked returns the messages parked under key in class, in the order
// they will run once the key is released. It reads the state file and
// needs a running runtime; records that cannot be read are left out (the
// key's release quarantines them). With the changelog it returns only
// those of partitions this instance owns (see ParkedKeys).
func (r *Runtime) Parked(class string, key []byte) ([]handoff.Message, error) {
	if _, err := r.state.get(); err != nil {
		return nil, err
	}
	entries, err := r.state.readParked(class, key)
	if err != nil {
		return nil, fmt.Errorf("runtime: parked messages of class %q: %w", class, err)
	}
	out := make([]handoff.Message, 0, len(entries))
	for _, e := range entries {
		if !r.clog.mine(&e.Record) {
			continue
		}
		out = append(out, e.Record.Message)
	}
	return out, nil
}
