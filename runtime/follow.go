package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/changelog"
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

// follow applies, every followInterval until ctx ends, what other
// instances wrote to the changelogs of the partitions this instance owns
// since it restored them (see the comment at the top of this file). A
// feed of the run: it ends at the quiesce, with the scheduler.
func (rs *restorer) follow(ctx context.Context) {
	if rs.clog.on() {
		every(ctx, followInterval, func() { rs.followOnce(ctx) })
	}
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
	l.mu.Lock()
	for p := range l.owned {
		byTopic[p.Topic] = append(byTopic[p.Topic], int32(p.Partition))
	}
	l.mu.Unlock()
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
	l := rs.clog
	if from, ok := l.checkpointOf(p); !ok || end <= from {
		return
	}
	// wctx ends with the run's feeds, or when p is revoked meanwhile.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	unlock := rs.locks.lock(p, cancel)
	defer unlock()
	from, ok := l.checkpointOf(p)
	if !ok || end <= from {
		return // revoked meanwhile, or written by this instance and acknowledged
	}
	rctx, rcancel := context.WithTimeout(wctx, l.timeout)
	f, err := l.readForeign(rctx, p, from)
	rcancel()
	if err != nil {
		if wctx.Err() == nil {
			rs.warn.warn(rs.log, "follow/"+p.String(), "changelog not followed; other instances' writes to it wait for the next look",
				"partition", p.String(), "err", err)
		}
		return
	}
	f.recs = dropMovedOut(f.recs, f.moved)
	applied, err := l.applyForeign(p, f.recs)
	if err != nil {
		rs.warn.warn(rs.log, "follow/"+p.String(), "other instances' changelog writes not applied; tried again at the next look",
			"partition", p.String(), "err", err)
		return
	}
	if !l.noteOwner(p, f.owner) {
		return
	}
	l.cover(p, f.next)
	if len(f.recs) == 0 {
		return
	}
	for _, de := range applied.Bad {
		rs.log.Error("undecodable changelog record skipped", "partition", p.String(), "err", de)
	}
	rep := &Report{}
	rs.putToWork(wctx, applied, rep)
	rs.moveFollowed(wctx, p, f.recs)
	n := len(applied.Pending) + len(applied.Dead) + len(applied.Delayed) + len(applied.Parked)
	l.followed.Add(int64(n))
	l.repushed.Add(int64(rep.Repushed))
	rs.log.Info("other instances' changelog writes applied", "partition", p.String(), "records", len(f.recs),
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
	v := recovery{state: rs.state, classes: rs.classes, order: rs.order, orphan: rs.orphan,
		orphans: &orphans{}, log: rs.log, hold: rs.clog.hold, unhold: rs.clog.unhold}
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
		rs.wake(time.Unix(0, 0))
	}
}

// foreign is what a follow read of a partition's changelog: the records
// other instances wrote (and those whose key does not parse, which the
// apply reports), and where the read ended.
type foreign struct {
	recs []snapshot.ChangelogRecord
	next int64
	// owner is the file the last owner marker read names (ownership.go).
	owner *[16]byte
	// moved are the offsets of the moved tombstones among recs
	// (repartition.go).
	moved map[int64]bool
}

// checkpointOf returns where p's checkpoint is, if p is owned.
func (l *stateLog) checkpointOf(p kclient.Partition) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cp := l.ckpt[p]
	if cp == nil || !l.owned[p] {
		return 0, false
	}
	return cp.next, true
}

// readForeign reads p's changelog from offset from up to its end,
// keeping the records of other files than this instance's.
func (l *stateLog) readForeign(ctx context.Context, p kclient.Partition, from int64) (foreign, error) {
	own, hasOwn, err := l.state.fileID()
	if err != nil {
		return foreign{}, err
	}
	var f foreign
	next, err := l.client.Read(ctx, p.Topic, int32(p.Partition), from, func(batch []changelog.Rec) error {
		for _, r := range batch {
			if id, ok, err := snapshot.ParseOwnerMarker(r.Key, r.Value); ok {
				if err == nil {
					f.owner = &id
				}
				continue
			}
			if hasOwn && writtenBy(r, own) {
				continue // in the file already, or deleted since
			}
			f.recs = append(f.recs, snapshot.ChangelogRecord{Offset: r.Offset, Key: r.Key, Value: r.Value, Writer: r.Writer, Moved: r.MovedIn})
			if r.Moved {
				if f.moved == nil {
					f.moved = map[int64]bool{}
				}
				f.moved[r.Offset] = true
			}
		}
		return nil
	})
	if err != nil {
		return foreign{}, fmt.Errorf("read %s from %d: %w", l.client.Topic(p.Topic), from, err)
	}
	f.next = next
	return f, nil
}

// writtenBy reports whether the file with ID id wrote r: the writer r
// names (an update or delete of a restored record, under the key of the
// file that created it), else the file its key names.
func writtenBy(r changelog.Rec, id [16]byte) bool {
	return snapshot.ChangelogWrittenBy(r.Key, r.Writer, id)
}

// applyForeign applies recs, other instances' writes to p's changelog,
// to the state file, leaving its checkpoint of p where it is (the
// checkpoint moves in memory, see cover, and is kept at a revocation and
// at the stop), and gives the records of renamed classes their new names
// as a restore does.
func (l *stateLog) applyForeign(p kclient.Partition, recs []snapshot.ChangelogRecord) (applied snapshot.Applied, err error) {
	if len(recs) == 0 {
		return applied, nil
	}
	return l.applyFollowed(p.Topic, int32(p.Partition), recs)
}

// cover moves p's checkpoint over what a follow read from it, up to next:
// the other instances' writes there are applied now, and this
// instance's own were in the file before they were sent (the state file
// commits a write, then sends it), acknowledged or not. So a checkpoint
// that a write with no acknowledgement (a timeout) left behind, or that
// stopped moving (stuck), moves on. The follow holds p's lock, so p was
// not revoked since the read.
func (l *stateLog) cover(p kclient.Partition, next int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cp := l.ckpt[p]
	if cp == nil {
		return
	}
	if cp.stuck {
		// The acknowledged writes it dropped are below next, or are
		// read by the next follow.
		cp.stuck, cp.ahead = false, nil
	}
	// from was the checkpoint when the read began; acknowledgements may
	// have moved it since, never back.
	cp.next = max(cp.next, next)
	cp.join()
}

// join moves the checkpoint over the applied offsets past it that it
// has reached.
func (cp *checkpoint) join() {
	for moved := true; moved; {
		moved = false
		for start, end := range cp.ahead {
			if start <= cp.next {
				delete(cp.ahead, start)
				cp.next = max(cp.next, end)
				moved = true
			}
		}
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
