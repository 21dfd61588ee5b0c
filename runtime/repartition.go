package runtime

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/changelog"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
)

// Partitions added to an input topic. A record that did not come from
// Kafka (Submit, Schedule) belongs to the partition its key routes to by
// the input topic's partition count (stateLog.routeMsg), and lives in
// that partition's changelog. When the input topic gains partitions,
// keys route elsewhere: left where they are, their records would sit in
// a changelog partition whose owner no longer uses them, while the owner
// of the partition they route to never reads them. So:
//
//   - A running instance asks the brokers for its input topics' counts
//     every countInterval (the follow's loop), and at the assignment of a
//     partition it does not know (checkCounts). A topic that gained
//     partitions gets them in its changelog topic too (changelog.Grow);
//     where the ACLs deny it, an Error names the permission and the
//     command, and records stay routed by the count the changelog has.
//     The instance then routes by the new count.
//   - The owner of each partition moves the records of its changelog
//     whose key routes elsewhere now (moveOut): each is written to its new
//     partition (same changelog key, same value), then tombstoned in the
//     old one with the moved mark. Records of Kafka messages stay with
//     their origin partition: they do not move.
//   - A moved tombstone is not a delete: the record lives on in its new
//     partition, so a restore or follow of the old partition leaves the
//     reader's copy alone (snapshot's dropMovedOut).
//   - A record written by the old count after the owner learned the new
//     one (an instance that had not looked yet) is moved too: the follow
//     and the restore move what they bring back that routes elsewhere, and
//     the first restore of a partition under a count it was not scanned
//     by reads it whole (moveAfterRestore). So no record is stranded in a
//     partition nobody lists it from.
//
// The new partition's owner then follows or restores the moved records
// and runs and lists them.

// countInterval is how often a running instance asks the brokers for the
// partition counts of its input topics: one metadata request.
const countInterval = 10 * time.Second

// growth is the stateLog's watch of its input topics' partition counts.
type growth struct {
	// every, when not zero, replaces countInterval (tests).
	every time.Duration
	// mu orders the checks; last is when the last one asked.
	mu   sync.Mutex
	last time.Time
	// told is, per input topic, the count whose denied growth of the
	// changelog was logged: logged once per count.
	told map[string]int32
}

// growChangelog is the start's growth of the changelog topics whose
// input topics have more partitions (counts, by input topic): it returns
// the counts to route by, the changelog's where it could not grow it
// (logged at Error, naming the permission and the command; the input's
// partitions past it are not restored nor fetched until it has them).
func (l *stateLog) growChangelog(ctx context.Context, cl *changelog.Client, counts map[string]int32) map[string]int32 {
	have, err := cl.Grow(ctx, counts)
	if err == nil {
		return counts
	}
	eff := maps.Clone(counts)
	for t, n := range counts {
		if h, ok := have[t]; ok && h < n {
			eff[t] = h
			l.log.Error("input topic has partitions its changelog topic does not have; records stay routed by the changelog's count, and the input's partitions past it are not restored nor fetched, until the changelog topic has them",
				"topic", t, "partitions", n, "changelog", cl.Topic(t), "changelog_partitions", h, "err", err)
		}
	}
	return eff
}

// checkCounts asks the brokers for the partition counts of the input
// topics that have changelogs, at most every countInterval unless force,
// and routes by the new count of each that gained partitions, once its
// changelog topic has them (growing it), then moves the records of its
// partitions owned here whose keys route elsewhere now (afterGrowth). It
// blocks for the metadata requests, the growth and the moves.
func (rs *restorer) checkCounts(ctx context.Context, force bool) {
	l := rs.clog
	g := &l.grow
	g.mu.Lock()
	defer g.mu.Unlock()
	if !force && time.Since(g.last) < cmp.Or(g.every, countInterval) {
		return
	}
	g.last = time.Now()
	cur := *l.parts.Load()
	if len(cur) == 0 {
		return
	}
	topics := slices.Sorted(maps.Keys(cur))
	mctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	ps, err := l.meta.Partitions(mctx, topics)
	if err != nil {
		if ctx.Err() == nil {
			rs.warn.warn(rs.log, "counts", "input topics' partition counts not read; a growth is noticed at the next look", "topics", topics, "err", err)
		}
		return
	}
	want := map[string]int32{}
	for _, p := range ps {
		if n := int32(p.Partition) + 1; n > cur[p.Topic] {
			want[p.Topic] = max(want[p.Topic], n)
		}
	}
	if len(want) == 0 {
		return
	}
	if r, ok := l.meta.(interface{ RefreshPartitions() }); ok {
		r.RefreshPartitions() // the group's leader assigns the new partitions
	}
	have, err := l.client.Grow(mctx, want)
	if err != nil && ctx.Err() == nil {
		for t, n := range want {
			if have[t] < n && g.told[t] != n {
				if g.told == nil {
					g.told = map[string]int32{}
				}
				g.told[t] = n
				rs.log.Error("input topic gained partitions its changelog topic does not have; records stay routed by the changelog's count, and the new partitions are not restored nor fetched, until the changelog topic has them",
					"topic", t, "partitions", n, "changelog", l.client.Topic(t), "changelog_partitions", have[t], "err", err)
			}
		}
	}
	var changed []string
	counts := map[string]int32{}
	for t, n := range want {
		eff := min(n, have[t])
		if eff <= cur[t] {
			continue
		}
		if err := l.client.Learned(mctx, t, eff); err != nil {
			rs.warn.warn(rs.log, "counts/"+t, "changelog topic's new partitions not known to the producer yet; routing by them waits for the next look",
				"topic", t, "err", err)
			continue
		}
		counts[t] = eff
		changed = append(changed, t)
	}
	if len(changed) == 0 {
		return
	}
	l.learnMu.Lock()
	parts := maps.Clone(*l.parts.Load())
	for t, n := range counts {
		parts[t] = max(parts[t], n)
	}
	l.parts.Store(&parts)
	l.learnMu.Unlock()
	for _, t := range changed {
		rs.log.Info("input topic gained partitions; records of keys are routed by the new count and moved to their partitions",
			"topic", t, "from", cur[t], "to", counts[t])
	}
	rs.afterGrowth(ctx, changed)
}

// afterGrowth moves the records of the partitions of topics owned here
// whose keys route elsewhere now, takes out of the pools the messages of
// records this instance no longer owns (their new partition's owner runs
// them), and rewinds the scheduler: delayed records may be this
// instance's now.
func (rs *restorer) afterGrowth(ctx context.Context, topics []string) {
	l := rs.clog
	var mine []kclient.Partition
	for _, p := range l.owned() {
		if slices.Contains(topics, p.Topic) {
			mine = append(mine, p)
		}
	}
	for _, p := range mine {
		unlock := rs.locks.lock(p, nil)
		if l.ownsPartition(p) {
			rs.moveOut(ctx, p)
			rs.rekey(p)
		}
		unlock()
	}
	for _, c := range rs.order {
		gone := c.pool.Remove(func(it *item) bool {
			if it.src != fromPending && it.src != fromDelayed {
				return false
			}
			q, ok := l.partitionOf(it.env())
			return ok && slices.Contains(topics, q.Topic) && !l.ownsPartition(q)
		})
		for _, it := range gone {
			if it.src == fromDelayed {
				rs.sched.unhand(it.extOrZero().delayedKey)
			}
			rs.handling.outOfPool(it)
		}
	}
	rs.sched.wake(time.Unix(0, 0))
}

// rekey builds again the blocked and releasing keys of ordered classes
// that belong to p, owned here, by the count routed by now: the keys
// whose blockers or parked records routed to p by the old count are
// dropped (and the parked messages their releases pushed leave the
// pools, as at a revocation), then those of the records routing to p now
// are blocked or released, as a restore does. A key that moved to a
// partition of another instance is that instance's to block. The caller
// holds p's lock.
func (rs *restorer) rekey(p kclient.Partition) {
	for _, c := range rs.order {
		if c.keys == nil {
			continue
		}
		dropped := c.keys.forget(p)
		if len(dropped) == 0 {
			continue
		}
		for _, it := range c.pool.Remove(func(it *item) bool { return it.src == fromParked && dropped[string(it.env().Key)] }) {
			rs.handling.outOfPool(it)
		}
	}
	v := recovery{state: rs.state, classes: rs.classes, order: rs.order, fail: rs.fail, orphans: &orphans{}, log: rs.log,
		want: rs.clog.cl().RoutedTo(part(p))}
	v.orphans.collect()
	defer v.orphans.flush(rs.log)
	if err := v.restoreKeys(&Report{}); err != nil {
		rs.log.Error("keys of ordered classes not built again after the partition count changed; they wait for the partition's next restore",
			"partition", p.String(), "err", err)
	}
	for c, keys := range v.released {
		c.keys.startRestored(keys)
	}
}

// moveOut moves the records of p's changelog whose keys route to
// another partition now (snapshot.Changelog.MoveOut). The caller holds
// p's lock (partLocks) and owns p. A failure is logged; the next look
// (the follow's, a restore's) tries again.
func (rs *restorer) moveOut(ctx context.Context, p kclient.Partition) {
	l := rs.clog
	rctx, cancel := context.WithTimeout(ctx, max(l.timeout, time.Minute))
	defer cancel()
	n, err := l.cl().MoveOut(rctx, part(p))
	if err != nil {
		rs.warn.warn(rs.log, "move/"+p.String(), "records whose keys route elsewhere not moved, or the move not kept; tried again at the next look",
			"partition", p.String(), "err", err)
		return
	}
	if n > 0 {
		rs.log.Info("records moved to the changelog partitions their keys route to now", "partition", p.String(),
			"records", n, "partitions", (*l.parts.Load())[p.Topic])
	}
}

// noticePartition is the start of a restore of p: a partition past the
// count this instance routes by makes it look at the counts now; it
// returns an error naming the command that grows the changelog when the
// changelog still has no partition for p.
func (rs *restorer) noticePartition(ctx context.Context, p kclient.Partition) error {
	l := rs.clog
	if n, ok := (*l.parts.Load())[p.Topic]; ok && int32(p.Partition) >= n {
		rs.checkCounts(ctx, true)
		if n := (*l.parts.Load())[p.Topic]; int32(p.Partition) >= n {
			return fmt.Errorf("input partition %s has no changelog partition: %s has %d; it needs ALTER on topic %s, or an operator runs: kafka-topics --alter --topic %s --partitions %d",
				p, l.client.Topic(p.Topic), n, l.client.Topic(p.Topic), l.client.Topic(p.Topic), p.Partition+1)
		}
	}
	return nil
}

// moveAfterRestore moves, once p's restore applied its changelog, the
// records of p whose keys route elsewhere, when the restore says some
// may (snapshot.Restoration.Misrouted).
func (rs *restorer) moveAfterRestore(ctx context.Context, p kclient.Partition, misrouted bool) {
	if !misrouted {
		return
	}
	unlock := rs.locks.lock(p, nil)
	defer unlock()
	if rs.clog.ownsPartition(p) {
		rs.moveOut(ctx, p)
	}
}

// moveFollowed moves, after a follow applied other instances' writes to
// p, the records of p whose keys route elsewhere, if one of those writes
// does (snapshot.Followed.Misrouted): written by an instance that routed
// by an older count. The caller holds p's lock.
func (rs *restorer) moveFollowed(ctx context.Context, p kclient.Partition, misrouted bool) {
	if misrouted {
		rs.moveOut(ctx, p)
	}
}
