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
// the changelog's acknowledgement succeeded. What is saved, owned,
// restored and followed is snapshot.Changelog's (the state component);
// this file is its adapter: the Kafka client (kafkaLog, the
// snapshot.Log it writes and reads through), where each record goes
// (route: the runtime's classes and partition counts), and the
// runtime's own counters. Each partition's next owner restores that
// partition's state from its changelog before it fetches the partition
// (restorer, restore.go), so the local file is a cache of the
// changelog: a pod that starts on an empty disk loses nothing.

// stateLog is the runtime's adapter of the changelog: the client, where
// each record goes, and the state component (comp), nil until open and
// with the changelog off: its methods then answer as the file alone
// would.
type stateLog struct {
	log     *slog.Logger
	state   *stateFile
	client  *changelog.Client
	timeout time.Duration
	// renames is Config.ClassRenames: a restore applies them to the
	// records it brings back, as the start does to the file's.
	renames map[string]string
	// sched says whether a restored delayed record meets a local one of
	// its ID that is waiting or not (scheduler.handedOver, see
	// snapshot.ChangelogConfig.HandedOver).
	sched *scheduler

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

	// pushedMu guards pushed: the keys of the pending records whose
	// messages a restore re-pushed and this instance still has, in a
	// pool or done with their record's delete not yet written. A restore
	// of their partition again (revoked and given back) does not push
	// them a second time.
	pushedMu sync.Mutex
	pushed   map[uint64]struct{}

	// comp is the state component's changelog side, set once open has
	// set everything above: the admin API's listings read it from other
	// goroutines.
	comp atomic.Pointer[snapshot.Changelog]

	// What the restores brought back, for the report: records,
	// partitions, messages re-pushed, keys blocked and saved messages of
	// classes no longer configured.
	restored, restoredParts, repushed, blockedKeys, unknownClass atomic.Int64
	// followed counts the records of other instances the follow applied
	// (follow.go).
	followed atomic.Int64

	// metaNext is the meta topic's next offset to read (pausemeta.go):
	// set by loadPauses, then moved by the follow's goroutine alone.
	metaNext atomic.Int64
	// pauseMu guards pauseOff, the offset in the meta topic of each
	// class's last pause or resume written by this instance
	// (pausemeta.go); it orders Runtime.Pause and Resume with the
	// follow's applies.
	pauseMu  sync.Mutex
	pauseOff map[string]int64

	// ops takes the meta topic's records of the dead-letter operations
	// (deadops.go), read with the pauses.
	ops *deadOps
}

// cl is the state component's changelog side: nil with the changelog
// off (LocalStateOnly, no topics) or before open; every method of a nil
// one answers as the file alone would.
func (l *stateLog) cl() *snapshot.Changelog {
	if l == nil {
		return nil
	}
	return l.comp.Load()
}

// on reports whether the changelog is in use: false with
// LocalStateOnly, or without topics. Only this adapter asks it.
func (l *stateLog) on() bool { return l.cl() != nil }

// newFileLosesState reports whether a new state file at the start may
// stand for lost saved state (the start then checks the group's
// committed offsets and warns, checkNewFile): true with the changelog
// off. With it, a new file is what a new pod starts with, and its
// partitions' state comes back from the changelog.
func (l *stateLog) newFileLosesState() bool { return !l.on() }

// The restorer's entry points, the consumer's hooks and the run's
// feed: with the changelog off no partition's state is restored,
// revoked or followed (every record is this instance's from the start).

// restore is the consumer's states.restore (partitionStates): restorePartition (restore.go),
// or true at once with the changelog off.
func (rs *restorer) restore(ctx context.Context, p kclient.Partition, restored func()) bool {
	if !rs.clog.on() {
		return true
	}
	return rs.restorePartition(ctx, p, restored)
}

// revoked is the consumer's states.revoked (partitionStates): revokePartition (restore.go),
// or nothing with the changelog off.
func (rs *restorer) revoked(p kclient.Partition) {
	if rs.clog.on() {
		rs.revokePartition(p)
	}
}

// follow is the run's feed of the follow: followAll (follow.go), or
// nothing with the changelog off.
func (rs *restorer) follow(ctx context.Context) {
	if rs.clog.on() {
		rs.followAll(ctx)
	}
}

// part is p as the state component names it; kpart the reverse.
func part(p kclient.Partition) snapshot.Partition {
	return snapshot.Partition{Topic: p.Topic, Partition: int32(p.Partition)}
}

func kpart(p snapshot.Partition) kclient.Partition {
	return kclient.Partition{Topic: p.Topic, Partition: int(p.Partition)}
}

// routeMsg names the input partition m's record belongs to: a Kafka
// message's own partition; a message that did not come from Kafka
// (Submit, Schedule), or whose topic no class consumes any more, a
// partition of its class's first topic chosen from its key as Kafka's
// default partitioner would (its ID when it has no key), so that it
// moves with the partition its key's Kafka messages are in. ok is false
// for a class without topics: its records stay local. It is the state
// component's snapshot.ChangelogConfig.Route.
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

// partitionOf is the partition m's record belongs to; false with the
// changelog off.
func (l *stateLog) partitionOf(m *handoff.Message) (kclient.Partition, bool) {
	p, ok := l.cl().Route(m)
	return kpart(p), ok
}

// markPushed marks the pending record key as pushed here by a restore;
// false when it is already (its message is in a pool, or done and its
// record not deleted yet).
func (l *stateLog) markPushed(key uint64) bool {
	l.pushedMu.Lock()
	defer l.pushedMu.Unlock()
	if _, ok := l.pushed[key]; ok {
		return false
	}
	if l.pushed == nil {
		l.pushed = map[uint64]struct{}{}
	}
	l.pushed[key] = struct{}{}
	return true
}

// unmarkPushed ends the marks of keys: their messages left this instance with
// their records still there, or their records are deleted.
func (l *stateLog) unmarkPushed(keys ...uint64) {
	if l == nil {
		return
	}
	l.pushedMu.Lock()
	defer l.pushedMu.Unlock()
	for _, k := range keys {
		delete(l.pushed, k)
	}
}

// mine reports whether rec, a stored record, is this instance's to use
// (snapshot.Changelog.Owns: every record with the changelog off).
func (l *stateLog) mine(rec *snapshot.Record) bool { return l.cl().Owns(rec) }

// ownsPartition reports whether p is restored here and not revoked
// since; true with the changelog off.
func (l *stateLog) ownsPartition(p kclient.Partition) bool { return l.cl().OwnsPartition(part(p)) }

// owned returns the partitions restored here and not revoked since.
func (l *stateLog) owned() []kclient.Partition {
	var ps []kclient.Partition
	for _, p := range l.cl().Owned() {
		ps = append(ps, kpart(p))
	}
	return ps
}

// unowned returns every changelog partition this instance does not own,
// in topic and partition order; none with the changelog off.
func (l *stateLog) unowned() []snapshot.Partition {
	c := l.cl()
	if c == nil {
		return nil
	}
	parts := *l.parts.Load()
	var others []snapshot.Partition
	for _, t := range slices.Sorted(maps.Keys(parts)) {
		for p := range parts[t] {
			if sp := (snapshot.Partition{Topic: t, Partition: p}); !c.OwnsPartition(sp) {
				others = append(others, sp)
			}
		}
	}
	return others
}

// writeMeta writes key and value (nil: a tombstone) to the changelog's
// meta topic, waiting for the acknowledgement at most ChangelogTimeout
// (and until ctx ends); nothing with the changelog off.
func (l *stateLog) writeMeta(ctx context.Context, key, value []byte) error {
	if !l.on() {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if _, err := l.client.WriteMeta(wctx, key, value); err != nil {
		return fmt.Errorf("write %s to the changelog's meta topic %s: %w", key, l.client.MetaTopic(), err)
	}
	return nil
}

// open makes the changelog's client, learns the partition counts of the
// consumed topics (present: those the brokers know), makes sure every
// changelog topic exists (creating the missing ones) and opens the state
// component's changelog side, which sends what an earlier run saved
// locally but could not write to the changelog, and the records written
// without it. It returns an error naming the topic and the permission
// when a changelog topic is missing and cannot be created.
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
	comp, err := l.state.store.OpenChangelog(snapshot.ChangelogConfig{Log: kafkaLog{cl}, Route: l.routeMsg,
		Count:   func(topic string) int32 { return (*l.parts.Load())[topic] },
		Timeout: l.timeout, Renames: l.renames, HandedOver: l.sched.handedOver, Logger: l.log})
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	l.comp.Store(comp)
	return nil
}

// kafkaLog is the state component's snapshot.Log over the changelog's
// Kafka client.
type kafkaLog struct{ c *changelog.Client }

func (k kafkaLog) Send(recs []snapshot.LogRecord) func(ctx context.Context) error {
	outs := make([]*changelog.Out, len(recs))
	slab := make([]changelog.Out, len(recs)) // one allocation for all of them
	for i := range recs {
		r := &recs[i]
		slab[i] = changelog.Out{Input: r.Input, Partition: r.Partition, Key: r.Key, Value: r.Value, Writer: r.Writer, Moved: r.Moved}
		outs[i] = &slab[i]
	}
	wait := k.c.Send(outs)
	return func(ctx context.Context) error {
		if err := wait(ctx); err != nil {
			return err
		}
		for i := range recs {
			recs[i].Offset = slab[i].Offset
		}
		return nil
	}
}

func (k kafkaLog) Read(ctx context.Context, input string, p int32, from int64, fn func([]snapshot.LogRecord) error) (int64, error) {
	var buf []snapshot.LogRecord
	next, err := k.c.Read(ctx, input, p, from, func(batch []changelog.Rec) error {
		if cap(buf) < len(batch) {
			buf = make([]snapshot.LogRecord, 0, len(batch))
		}
		buf = buf[:0]
		for _, r := range batch {
			buf = append(buf, snapshot.LogRecord{Input: input, Partition: p, Offset: r.Offset, Key: r.Key, Value: r.Value,
				Writer: r.Writer, Moved: r.Moved, MovedIn: r.MovedIn})
		}
		return fn(buf)
	})
	if errors.Is(err, changelog.ErrBeyondEnd) {
		err = fmt.Errorf("%w: %w", snapshot.ErrBeyondEnd, err)
	}
	return next, err
}

func (k kafkaLog) Topic(input string) string { return k.c.Topic(input) }

// bound makes every later changelog wait end by deadline: the stop's.
func (l *stateLog) bound(deadline time.Time) { l.cl().Bound(deadline) }

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

// await keeps settle until the changelog has the write it waits for
// (snapshot.Changelog.Await).
func (l *stateLog) await(settle func()) { l.cl().Await(settle) }

// resend writes to the changelog what the state file holds unsent and,
// once it succeeded, settles the messages waiting for it
// (snapshot.Changelog.Resend). It reports whether nothing is left
// waiting.
func (l *stateLog) resend() bool {
	settled, sent, err := l.cl().Resend()
	if err != nil {
		l.state.writeFails[toChangelog].Add(1)
		l.log.Warn("changelog still not written; the messages saved meanwhile stay uncommitted", "messages", settled, "err", err)
		return false
	}
	if settled > 0 || sent > 0 {
		l.log.Info("changelog written again; the messages saved meanwhile are committed", "messages", settled, "changes", sent)
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

// The choices between the state's two paths, with the changelog and
// with the file alone, are the state component's (a nil
// snapshot.Changelog answers as the file alone): these are its adapter.

// ownedParked returns how many of pc's parked records this instance owns
// and when the first of them was parked; ok is false when it owns none.
// It reads the key's records (leaving out undecodable ones) only when
// some of them may belong to a partition another instance owns.
func (l *stateLog) ownedParked(pc snapshot.ParkedCount) (count int, oldest time.Time, ok bool, err error) {
	c := l.cl()
	if c == nil {
		return pc.Count, pc.Oldest, true, nil
	}
	entries, err := l.state.readParked(pc.Class, pc.Key)
	if err != nil {
		return 0, time.Time{}, false, err
	}
	entries = slices.DeleteFunc(entries, func(e snapshot.ParkedEntry) bool { return !c.Owns(&e.Record) })
	if len(entries) == 0 {
		return 0, time.Time{}, false, nil
	}
	return len(entries), entries[0].Record.SavedAt, true, nil
}

// startRecovers is the filter of the records the start's recovery
// recovers (snapshot.Changelog.StartRecovers): all with the changelog
// off, else those that belong to no partition.
func (l *stateLog) startRecovers() func(*snapshot.Record) bool { return l.cl().StartRecovers() }

// resendAtStop is the stop's last resend of the messages whose changelog
// write failed (resend); nothing with the changelog off.
func (l *stateLog) resendAtStop() {
	if l.on() {
		l.resend()
	}
}

// keepCheckpointsAtStop keeps every owned partition's checkpoint in the
// file (snapshot.Changelog.KeepCheckpoints).
func (l *stateLog) keepCheckpointsAtStop() { l.cl().KeepCheckpoints() }

// pauseChange makes a pause or a resume of class: with the changelog
// off, local alone (the change in this file and pool); with it, through
// pauseLocal, which also writes it to the meta topic with write (its
// failure wrapped in errMetaWrite, the change here staying).
func (l *stateLog) pauseChange(class string, local func() error, write func(at time.Time) (int64, error)) error {
	if !l.on() {
		return local()
	}
	_, err := l.pauseLocal(class, local, write)
	return err
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
