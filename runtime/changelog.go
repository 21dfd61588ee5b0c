package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime/internal/changelog"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/snapshot"
)

// The state changelog (Config.LocalStateOnly off). Every write to the
// state file's records of a class with topics is also written to the
// changelog topic of the input partition the record belongs to (route),
// and the file commits a write only once both the bbolt transaction and
// the changelog's acknowledgement succeeded (snapshot.State.SetChangelog:
// a failed changelog write is a failed save). Each partition's next
// owner restores that partition's state from its changelog before it
// fetches the partition (restorer, restore.go), so the local file is a cache
// of the changelog: a pod that starts on an empty disk loses nothing.

// stateLog is the runtime's side of the changelog: the client, where
// each record goes, and the partitions whose state this instance has
// restored and owns.
type stateLog struct {
	log     *slog.Logger
	state   *stateFile
	client  *changelog.Client
	timeout time.Duration
	// renames is Config.ClassRenames: a restore applies them to the
	// records it brings back, as the start does to the file's.
	renames map[string]string
	// handed is scheduler.handedOver: a restored delayed record meets a
	// local one of its ID that is waiting or not (see
	// snapshot.State.SetDelayedHandedOver).
	handed func(snapshot.DelayedKey) bool

	// consumed is every topic a class consumes; classTopic each class's
	// first topic and parts its partition count: where a message that
	// did not come from Kafka goes. Set by open, read-only after.
	consumed   map[string]bool
	classTopic map[string]string
	// parts is replaced, never changed in place, when a topic that
	// appeared after the start gets its changelog (learn), or gained
	// partitions (checkCounts, repartition.go; grow is its watch).
	parts atomic.Pointer[map[string]int32]
	grow  growth
	// meta answers partition counts; learnMu orders learn's calls.
	meta    kclient.Client
	learnMu sync.Mutex

	// enabled is set once open has set everything above and turned the
	// state file's capture on: the admin API's listings read them from
	// other goroutines (see on).
	enabled atomic.Bool

	// stopAt, when not zero, is the stop's deadline in Unix nanoseconds:
	// no changelog write waits past it.
	stopAt atomic.Int64

	mu sync.Mutex
	// owned are the partitions restored here and not revoked since: the
	// scheduler delivers only their delayed records. ckpt is their
	// checkpoints.
	owned map[kclient.Partition]bool
	ckpt  map[kclient.Partition]*checkpoint
	// ownGen counts the changes of owned: the dead-letter operations
	// look for their IDs again when it moved (deadops.go).
	ownGen atomic.Int64

	// heldMu guards held: the keys of the pending records whose
	// messages a restore re-pushed and this instance still has, in a
	// pool or done with their record's delete not yet written. A restore
	// of their partition again (revoked and given back) does not push
	// them a second time.
	heldMu sync.Mutex
	held   map[uint64]struct{}

	// waitMu guards waiting: the settles of messages saved to the state
	// file whose changelog write failed (see await).
	waitMu  sync.Mutex
	waiting []func()

	// What the restores brought back, for the report: records,
	// partitions, messages re-pushed, keys blocked and saved messages of
	// classes no longer configured.
	restored, restoredParts, repushed, blockedKeys, unknownClass atomic.Int64
	// followed counts the records of other instances the follow applied
	// (follow.go).
	followed atomic.Int64
	// rebuilt counts the partitions rebuilt from their whole changelog
	// after a break, claimed the owner markers written (ownership.go).
	rebuilt, claimed atomic.Int64

	// metaNext is the meta topic's next offset to read (pausemeta.go):
	// set by loadPauses, then moved by the follow's goroutine alone.
	metaNext atomic.Int64
	// pauseMu guards pauseOff, the offset in the meta topic of each
	// class's last pause or resume written by this instance
	// (pausemeta.go); it orders Runtime.Pause and Resume with the
	// follow's applies.
	pauseMu  sync.Mutex
	pauseOff map[string]int64

	// views is what the changelogs of the partitions this instance does
	// not own hold of dead letters, for the group's listing (deadgroup.go).
	views deadViews
	// ops takes the meta topic's records of the dead-letter operations
	// (deadops.go), read with the pauses.
	ops *deadOps
}

// on reports whether the changelog is in use: false with
// LocalStateOnly, or without topics.
func (l *stateLog) on() bool { return l != nil && l.enabled.Load() }

// route names the input partition rec belongs to: a Kafka message's own
// partition; a message that did not come from Kafka (Submit, Schedule),
// or whose topic no class consumes any more, a partition of its class's
// first topic chosen from its key as Kafka's default partitioner would
// (its ID when it has no key), so that it moves with the partition its
// key's Kafka messages are in. ok is false for a class without topics:
// its records stay local.
func (l *stateLog) route(rec *snapshot.Record) (topic string, partition int32, ok bool) {
	return l.routeMsg(&rec.Message)
}

// routeMsg is route for a message.
func (l *stateLog) routeMsg(m *handoff.Message) (topic string, partition int32, ok bool) {
	if m.Origin.Topic != "" && l.consumed[m.Origin.Topic] {
		return m.Origin.Topic, int32(m.Origin.Partition), true
	}
	t, found := l.classTopic[m.Class]
	if !found {
		return "", 0, false
	}
	n := (*l.parts.Load())[t]
	if n <= 0 {
		return "", 0, false
	}
	key := m.Key
	if len(key) == 0 {
		key = []byte(m.ID)
	}
	return t, keyPartition(key, n), true
}

// partitionOf is routeMsg as a partition; false with the changelog off.
func (l *stateLog) partitionOf(m *handoff.Message) (kclient.Partition, bool) {
	if !l.on() {
		return kclient.Partition{}, false
	}
	t, p, ok := l.routeMsg(m)
	return kclient.Partition{Topic: t, Partition: int(p)}, ok
}

// routedTo returns the filter of the records that belong to topic's
// partition p.
func (l *stateLog) routedTo(topic string, p int32) func(*snapshot.Record) bool {
	return func(rec *snapshot.Record) bool {
		t, q, ok := l.route(rec)
		return ok && t == topic && q == p
	}
}

// unrouted is the filter of the records that belong to no partition:
// the start recovers them, the assignments the others.
func (l *stateLog) unrouted(rec *snapshot.Record) bool {
	_, _, ok := l.route(rec)
	return !ok
}

// hold marks the pending record key held here, re-pushed by a restore;
// false when it is already (its message is in a pool, or done and its
// record not deleted yet).
func (l *stateLog) hold(key uint64) bool {
	l.heldMu.Lock()
	defer l.heldMu.Unlock()
	if _, ok := l.held[key]; ok {
		return false
	}
	if l.held == nil {
		l.held = map[uint64]struct{}{}
	}
	l.held[key] = struct{}{}
	return true
}

// unhold ends the holds of keys: their messages left this instance with
// their records still there, or their records are deleted.
func (l *stateLog) unhold(keys ...uint64) {
	if l == nil {
		return
	}
	l.heldMu.Lock()
	defer l.heldMu.Unlock()
	for _, k := range keys {
		delete(l.held, k)
	}
}

// owns reports whether rec may be used here: it belongs to no partition,
// or to one restored here and not revoked since.
func (l *stateLog) owns(rec *snapshot.Record) bool {
	t, p, ok := l.route(rec)
	if !ok {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owned[kclient.Partition{Topic: t, Partition: int(p)}]
}

// setOwned marks p owned, restored up to changelog offset next, or not
// (revoked).
func (l *stateLog) setOwned(p kclient.Partition, owned bool, next int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ownGen.Add(1)
	if owned {
		l.owned[p] = true
		l.ckpt[p] = &checkpoint{next: next}
	} else {
		delete(l.owned, p)
		delete(l.ckpt, p)
	}
}

// open makes the changelog's client, learns the partition counts of the
// consumed topics (present: those the brokers know), makes sure every
// changelog topic exists (creating the missing ones) and turns the state
// file's capture on; then it sends what an earlier run saved locally but
// could not write to the changelog. It returns an error naming the topic
// and the permission when a changelog topic is missing and cannot be
// created.
func (l *stateLog) open(ctx context.Context, cfg changelog.Config, meta kclient.Client, classes []*class, present []string) error {
	ps, err := meta.Partitions(ctx, present)
	if err != nil {
		return fmt.Errorf("runtime: changelog: partitions of %v: %w", present, err)
	}
	counts := map[string]int32{}
	for _, p := range ps {
		counts[p.Topic] = max(counts[p.Topic], int32(p.Partition)+1)
	}
	l.consumed, l.classTopic, l.meta = map[string]bool{}, map[string]string{}, meta
	l.parts.Store(&counts)
	l.owned, l.ckpt = map[kclient.Partition]bool{}, map[kclient.Partition]*checkpoint{}
	for _, c := range classes {
		for _, t := range c.cfg.Topics {
			l.consumed[t] = true
		}
		if len(c.cfg.Topics) > 0 {
			l.classTopic[c.cfg.Name] = c.cfg.Topics[0]
		}
	}
	cl, err := changelog.New(cfg)
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	counts = l.growChangelog(ctx, cl, counts) // repartition.go
	l.parts.Store(&counts)
	if err := cl.Ensure(ctx, counts); err != nil {
		cl.Close()
		return fmt.Errorf("runtime: %w", err)
	}
	l.client = cl
	_, had, err := l.state.fileID()
	if err != nil {
		return fmt.Errorf("runtime: changelog: %w", err)
	}
	fresh := !had
	if err := l.state.store.SetChangelog(snapshot.Changelog{Route: l.route, Send: l.send}); err != nil {
		return fmt.Errorf("runtime: changelog: %w", err)
	}
	l.state.store.SetDelayedHandedOver(l.handed)
	l.enabled.Store(true)
	n, err := l.state.store.ResendUnsent()
	if err != nil {
		return fmt.Errorf("runtime: changelog: resend what an earlier run could not write: %w", err)
	}
	if n > 0 {
		l.log.Info("changes an earlier run saved locally written to the changelog", "changes", n)
	}
	return l.sendUnlogged(fresh)
}

// send is the state file's snapshot.Changelog.Send: it queues changes to
// their partitions' changelogs and returns the wait for their
// acknowledgement, bounded by ChangelogTimeout and the stop's deadline.
func (l *stateLog) send(changes []snapshot.Change) func() error {
	outs := make([]*changelog.Out, len(changes))
	slab := make([]changelog.Out, len(changes)) // one allocation for all of them
	for i := range changes {
		c := &changes[i]
		slab[i] = changelog.Out{Input: c.Topic, Partition: c.Partition, Key: c.Key, Value: c.Value, Writer: c.Writer}
		outs[i] = &slab[i]
	}
	wait := l.client.Send(outs)
	return func() error {
		ctx, cancel := l.waitCtx()
		defer cancel()
		if err := wait(ctx); err != nil {
			return err
		}
		l.acked(outs)
		return nil
	}
}

// checkpoint is what the state file holds of one owned partition's
// changelog: everything before next is applied to it. The partition's
// restore sets next to the changelog's end; this instance's own writes,
// once acknowledged, move it on while they follow one another without a
// gap (a write of another instance in between stops it there: the next
// restore reads from it).
type checkpoint struct {
	next int64
	// ahead are acknowledged writes past a gap, first offset to end:
	// they join next once the writes before them are acknowledged. A
	// gap that stays (another instance wrote there: a submitted message
	// of this partition dead-lettered elsewhere, a fenced old owner)
	// would grow it for the rest of the run: past maxAhead entries the
	// checkpoint stops moving (stuck) until the next restore.
	ahead map[int64]int64
	stuck bool
}

// maxAhead bounds a checkpoint's acknowledged writes past a gap.
const maxAhead = 1024

// acked moves the checkpoints of the partitions outs were written to.
func (l *stateLog) acked(outs []*changelog.Out) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, o := range outs {
		cp := l.ckpt[kclient.Partition{Topic: o.Input, Partition: int(o.Partition)}]
		if cp == nil || cp.stuck || o.Offset < cp.next {
			continue
		}
		if o.Offset > cp.next {
			if len(cp.ahead) >= maxAhead {
				cp.ahead, cp.stuck = nil, true
				continue
			}
			if cp.ahead == nil {
				cp.ahead = map[int64]int64{}
			}
			cp.ahead[o.Offset] = o.Offset + 1
			continue
		}
		cp.next = o.Offset + 1
		for {
			end, ok := cp.ahead[cp.next]
			if !ok {
				break
			}
			delete(cp.ahead, cp.next)
			cp.next = end
		}
	}
}

// keepCheckpoints writes the checkpoints of ps (all owned partitions when
// ps is nil) to the state file: at a revocation and at the stop. A
// checkpoint not written costs the next restore a longer read, nothing
// else.
func (l *stateLog) keepCheckpoints(ps []kclient.Partition) {
	l.mu.Lock()
	var keep []snapshot.Checkpoint
	for p, cp := range l.ckpt {
		if ps == nil || slices.Contains(ps, p) {
			keep = append(keep, snapshot.Checkpoint{Topic: p.Topic, Partition: int32(p.Partition), Next: cp.next})
		}
	}
	l.mu.Unlock()
	if len(keep) == 0 {
		return
	}
	if err := l.state.store.KeepCheckpoints(keep); err != nil {
		l.log.Warn("changelog checkpoints not kept; the next restore reads more of the changelog", "err", err)
	}
}

// waitCtx bounds one wait for the changelog: ChangelogTimeout, and the
// stop's deadline once the stop set it.
func (l *stateLog) waitCtx() (context.Context, context.CancelFunc) {
	d := l.timeout
	if at := l.stopAt.Load(); at != 0 {
		d = min(d, time.Until(time.Unix(0, at)))
	}
	return context.WithTimeout(context.Background(), max(d, 0))
}

// bound makes every later changelog wait end by deadline: the stop's.
func (l *stateLog) bound(deadline time.Time) {
	if l != nil {
		l.stopAt.Store(deadline.UnixNano())
	}
}

// restore reads topic's partition p's changelog from the state file's
// checkpoint for it (from the start when it has none: an empty disk, or
// the partition lived elsewhere) up to its high watermark, and applies
// it to the file, last write winning, tombstones deleting; after a break
// (see ownership.go) it reads it from the start and rebuilds the file's
// records of p from it. It returns how many changelog records it read.
func (l *stateLog) restore(ctx context.Context, topic string, p int32) (read int, next int64, applied snapshot.Applied, err error) {
	from, known, err := l.state.store.Checkpoint(topic, p)
	if err != nil {
		return 0, 0, applied, err
	}
	hadCheckpoint := known
	var recs []snapshot.ChangelogRecord
	moved := map[int64]bool{} // moved tombstones (repartition.go)
	next, err = l.client.Read(ctx, topic, p, from, func(batch []changelog.Rec) error {
		for _, r := range batch {
			recs = append(recs, snapshot.ChangelogRecord{Offset: r.Offset, Key: r.Key, Value: r.Value, Writer: r.Writer, Moved: r.MovedIn})
			if r.Moved {
				moved[r.Offset] = true
			}
		}
		return nil
	})
	if errors.Is(err, changelog.ErrBeyondEnd) {
		// The changelog is shorter than the file's checkpoint: the topic
		// was made again. Read it whole.
		l.log.Warn("changelog ends before the state file's checkpoint; reading it from the start", "topic", l.client.Topic(topic),
			"partition", p, "checkpoint", from)
		recs, from, known = recs[:0], 0, false
		clear(moved)
		next, err = l.client.Read(ctx, topic, p, 0, func(batch []changelog.Rec) error {
			for _, r := range batch {
				recs = append(recs, snapshot.ChangelogRecord{Offset: r.Offset, Key: r.Key, Value: r.Value, Writer: r.Writer, Moved: r.MovedIn})
				if r.Moved {
					moved[r.Offset] = true
				}
			}
			return nil
		})
	}
	if err != nil {
		return 0, 0, applied, err
	}
	recs, next, owner, err := l.ownership(ctx, topic, p, from, hadCheckpoint, recs, next)
	if err != nil {
		return 0, 0, applied, err
	}
	if len(recs) == 0 && known && next == from && !owner.rebuild && owner.latest == nil {
		return 0, next, applied, nil // the file is where the changelog is
	}
	var dropped int
	recs = dropMovedOut(recs, moved)
	applied, dropped, err = l.state.store.ApplyRestore(topic, p, recs, next, snapshot.Restored{
		Rebuild: owner.rebuild, Belongs: l.routedTo(topic, p), Latest: owner.latest, Renames: l.renames})
	if err == nil && owner.rebuild {
		l.rebuilt.Add(1)
		applied.Deleted += dropped
	}
	return len(recs), next, applied, err
}

// close closes the client, if open made it. Only the run's goroutine,
// which made it, calls it.
func (l *stateLog) close() {
	if l.client != nil {
		l.client.Close()
	}
}

// isChangelogErr reports whether err is a write that committed to the
// state file but not to the changelog.
func isChangelogErr(err error) bool { return errors.Is(err, snapshot.ErrChangelog) }

// await keeps settle, the settling of a message whose save committed to
// the state file but not to the changelog, until the changelog has the
// write: resend runs it then.
func (l *stateLog) await(settle func()) {
	l.waitMu.Lock()
	l.waiting = append(l.waiting, settle)
	l.waitMu.Unlock()
}

// resend writes to the changelog what the state file holds unsent (the
// writes whose changelog write failed, whether a message waits for them
// or not: the tombstones of done messages' records have none) and, once
// it succeeded, settles the messages waiting for it. It reports whether
// nothing is left waiting.
func (l *stateLog) resend() bool {
	l.waitMu.Lock()
	waiting := l.waiting
	l.waiting = nil
	l.waitMu.Unlock()
	n, err := l.state.store.ResendUnsent()
	if err != nil {
		l.waitMu.Lock()
		l.waiting = append(waiting, l.waiting...)
		l.waitMu.Unlock()
		l.state.writeFails[toChangelog].Add(1)
		l.log.Warn("changelog still not written; the messages saved meanwhile stay uncommitted", "messages", len(waiting), "err", err)
		return false
	}
	for _, settle := range waiting {
		settle()
	}
	if len(waiting) > 0 || n > 0 {
		l.log.Info("changelog written again; the messages saved meanwhile are committed", "messages", len(waiting), "changes", n)
	}
	return true
}

// resendInterval is how often retryResend tries the changelog again.
const resendInterval = time.Second

// retryResend runs resend every resendInterval until ctx ends: a
// background loop of the run.
func (l *stateLog) retryResend(ctx context.Context) {
	every(ctx, resendInterval, func() { l.resend() })
}

// every calls fn every d, the first time d after its call, until ctx
// ends: the changelog's background loops.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// learn makes sure topic, consumed, has its changelog topic: one that
// appeared after the start (Class.WaitForTopics) gets it at its first
// assignment.
func (l *stateLog) learn(ctx context.Context, topic string) error {
	if _, ok := (*l.parts.Load())[topic]; ok {
		return nil
	}
	l.learnMu.Lock()
	defer l.learnMu.Unlock()
	old := *l.parts.Load()
	if _, ok := old[topic]; ok {
		return nil
	}
	ps, err := l.meta.Partitions(ctx, []string{topic})
	if err != nil {
		return fmt.Errorf("partitions of %s: %w", topic, err)
	}
	n := int32(0)
	for _, p := range ps {
		n = max(n, int32(p.Partition)+1)
	}
	if n == 0 {
		return fmt.Errorf("topic %s has no partitions", topic)
	}
	if err := l.client.Ensure(ctx, map[string]int32{topic: n}); err != nil {
		return err
	}
	parts := maps.Clone(old)
	parts[topic] = n
	l.parts.Store(&parts)
	return nil
}
