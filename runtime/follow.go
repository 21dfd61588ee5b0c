package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/snapshot"
)

// Following the changelog. A partition's restore brings back what its
// changelog holds when the partition is assigned; other instances may
// write to it after that, while this instance owns it: a message
// scheduled, submitted and saved at a stop, or dead-lettered through an
// instance that does not own its key's partition (its records go to the
// partition its key belongs to, see stateLog.route), or the late write
// of an old owner fenced out of the group. The owner follows its
// partitions' changelogs while it runs (follow, every followInterval),
// applies those writes to its file as a restore would, and puts them to
// work: its scheduler delivers the delayed messages when due, the
// pending ones are pushed to their pools, the dead letters are listed
// and may be requeued here, and in an ordered class a dead letter or a
// redelivery blocks its key. Its own writes it skips: the file has them.

// followInterval is how often an owner looks for other instances' writes
// to the changelogs of its partitions: one ListOffsets request per
// leader of each changelog topic, and a read only of a partition whose
// changelog grew past what this instance wrote and applied.
const followInterval = time.Second

// partLocks orders the reads and applies of one partition's changelog
// (its restore, the follow) with one another and with its revocation. A
// revocation ends a follow of its partition under way (cancel) before it
// waits for the lock, so that what the follow pushes it takes back.
type partLocks struct {
	mu    sync.Mutex
	locks map[kclient.Partition]*sync.Mutex
	// cancels ends each follow under way, by partition.
	cancels map[kclient.Partition]context.CancelFunc
}

// lock locks p; cancel, when not nil, is what a revocation of p calls
// meanwhile. The returned func unlocks it.
func (pl *partLocks) lock(p kclient.Partition, cancel context.CancelFunc) (unlock func()) {
	pl.mu.Lock()
	if pl.locks == nil {
		pl.locks, pl.cancels = map[kclient.Partition]*sync.Mutex{}, map[kclient.Partition]context.CancelFunc{}
	}
	m := pl.locks[p]
	if m == nil {
		m = &sync.Mutex{}
		pl.locks[p] = m
	}
	pl.mu.Unlock()
	m.Lock()
	if cancel != nil {
		pl.mu.Lock()
		pl.cancels[p] = cancel
		pl.mu.Unlock()
	}
	return func() {
		if cancel != nil {
			pl.mu.Lock()
			delete(pl.cancels, p)
			pl.mu.Unlock()
		}
		m.Unlock()
	}
}

// revoke ends the follow of p under way, if any, and locks p.
func (pl *partLocks) revoke(p kclient.Partition) (unlock func()) {
	pl.mu.Lock()
	if cancel := pl.cancels[p]; cancel != nil {
		cancel()
	}
	pl.mu.Unlock()
	return pl.lock(p, nil)
}

// followAll applies, every followInterval until ctx ends, what other
// instances wrote to the changelogs of the partitions this instance owns
// since it restored them (see the comment at the top of this file). A
// feed of the run: it ends at the quiesce, with the scheduler.
func (rs *restorer) followAll(ctx context.Context) {
	every(ctx, followInterval, func() { rs.followOnce(ctx) })
}

// followOnce looks at the meta topic's pauses and at every owned
// partition's changelog once.
func (rs *restorer) followOnce(ctx context.Context) {
	l := rs.clog
	rs.checkCounts(ctx, false) // every countInterval (repartition.go)
	if err := l.followPauses(ctx, rs.classes); err != nil && ctx.Err() == nil {
		rs.warn.warn(rs.log, "follow/meta", "changelog's meta topic not followed; pauses and resumes made through other instances wait for the next look",
			"topic", l.client.MetaTopic(), "err", err)
	}
	byTopic := map[string][]int32{}
	for _, p := range l.owned() {
		byTopic[p.Topic] = append(byTopic[p.Topic], int32(p.Partition))
	}
	for topic, parts := range byTopic {
		ectx, cancel := context.WithTimeout(ctx, l.timeout)
		ends, err := l.client.Ends(ectx, topic, parts)
		cancel()
		if err != nil && ctx.Err() == nil {
			rs.warn.warn(rs.log, "follow/"+topic, "changelog end offsets not read; other instances' writes to it wait for the next look",
				"topic", topic, "err", err)
		}
		for _, p := range parts {
			if end, ok := ends[p]; ok && ctx.Err() == nil {
				rs.followPartition(ctx, kclient.Partition{Topic: topic, Partition: int(p)}, end)
			}
		}
	}
}

// followPartition applies the writes of other instances to p's changelog
// from p's checkpoint up to end, if it is still owned and its changelog
// has grown past the checkpoint.
func (rs *restorer) followPartition(ctx context.Context, p kclient.Partition, end int64) {
	l, c := rs.clog, rs.clog.cl()
	// wctx ends with the run's feeds, or when p is revoked meanwhile.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	unlock := rs.locks.lock(p, cancel)
	defer unlock()
	rctx, rcancel := context.WithTimeout(wctx, l.timeout)
	f, err := c.Follow(rctx, part(p), end)
	rcancel()
	if err != nil {
		if wctx.Err() == nil {
			rs.warn.warn(rs.log, "follow/"+p.String(), "changelog not followed; other instances' writes to it wait for the next look",
				"partition", p.String(), "err", err)
		}
		return
	}
	if len(f.Records) == 0 {
		return
	}
	applied := f.Applied
	for _, de := range applied.Bad {
		rs.log.Error("undecodable changelog record skipped", "partition", p.String(), "err", de)
	}
	rep := &Report{}
	rs.putToWork(wctx, applied, rep)
	rs.moveFollowed(wctx, p, f.Misrouted)
	n := len(applied.Pending) + len(applied.Dead) + len(applied.Delayed) + len(applied.Parked)
	l.followed.Add(int64(n))
	l.repushed.Add(int64(rep.Repushed))
	if n == 0 && applied.Deleted == 0 {
		return // this instance's own moves, held already
	}
	rs.log.Info("other instances' changelog writes applied", "partition", p.String(), "records", len(f.Records),
		"pending", len(applied.Pending), "dead", len(applied.Dead), "delayed", len(applied.Delayed), "parked", len(applied.Parked),
		"deleted", applied.Deleted, "repushed", rep.Repushed)
}

// putToWork does with the records a follow applied what a restore does
// with a partition's: a dead letter or a message waiting for its
// redelivery blocks its key in an ordered class, the pending messages
// are pushed to their pools (held, as a restore's), and the scheduler
// looks at the delayed ones. Parked records wait behind their key's
// blocker, or are released when nothing blocks their key here
// (releaseFollowedParked).
func (rs *restorer) putToWork(ctx context.Context, applied snapshot.Applied, rep *Report) {
	v := recovery{state: rs.state, classes: rs.classes, order: rs.order, fail: rs.fail,
		orphans: &orphans{}, log: rs.log, pushed: rs.clog}
	pending, err := rs.state.readApplied(applied, v.blockKey)
	if err != nil {
		rs.log.Error("records applied from the changelog not read back; they wait for the partition's next restore", "err", err)
		return
	}
	rs.releaseFollowedParked(applied.Parked)
	pending = rs.dropFetched(pending)
	v.orphans.collect()
	defer v.orphans.flush(rs.log)
	for i := range pending {
		if pushed, err := v.repush(ctx, &pending[i], rep); err != nil || !pushed {
			break // the rest stay in the file, for the partition's next restore
		}
	}
	if len(applied.Delayed) > 0 {
		rs.sched.wake(time.Unix(0, 0))
	}
}

// dropFetched deletes the followed pending records of Kafka messages of
// the partition this instance owns and fetches, and returns the others.
// The commit never passes an unfinished Kafka message, so this owner's
// fetch, which began at the group's committed offset, has delivered the
// message or will: re-pushing its record as well would run it twice. (A
// restore re-pushes such records before the fetch begins and links the
// fetched copy to them; a record followed later comes from an instance
// that saved it after this one began fetching: a fenced former owner, or
// a file written without the changelog sending what it held.)
func (rs *restorer) dropFetched(pending []snapshot.Entry) []snapshot.Entry {
	var drop []uint64
	keep := pending[:0]
	for _, e := range pending {
		if _, _, ok := rs.resumes.originOf(&e.Record); ok {
			drop = append(drop, e.Key)
			continue
		}
		keep = append(keep, e)
	}
	if len(drop) == 0 {
		return keep
	}
	err := rs.state.deletePending(drop...)
	if err != nil {
		rs.state.writeFailed(err)
	}
	if err != nil && !isChangelogErr(err) {
		rs.log.Error("followed saved records of fetched Kafka messages not deleted; the partition's next restore re-pushes them", "records", len(drop), "err", err)
		return keep
	}
	rs.log.Info("followed saved records of Kafka messages deleted: this owner's fetch delivers them", "records", len(drop))
	return keep
}
