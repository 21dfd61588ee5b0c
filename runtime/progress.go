package runtime

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/snapshot"
)

// The commit rule across owners. A stop does not commit past a Kafka
// message it saves unfinished (unstarted, interrupted, waiting out a
// retry): Kafka keeps it, so a partition's next owner that knows nothing
// of the saved state (an older version after a rollback, a deleted
// changelog topic, a plain consumer) runs it again instead of losing it.
// What the stop saves is for the order, the attempt counts and for not
// running done work twice: a pending record of each such message, and a
// progress record per partition (snapshot.Progress) that says which
// offsets between the commit and the last one fetched are not done, so
// that all others there are known done.
//
// The partition's next owner (this instance after a restart, or the one
// a restore brings the state to) re-pushes the saved records before it
// fetches, as before, and its fetch skips what it need not run: an
// offset the progress says is done is settled at once; the fetched copy
// of a message whose saved record it re-pushed is not run, and its offset
// settles when that record's message is done or moved (savedOffset).
// Every other offset is handled as usual.

// resumes keeps, per input partition, the offsets of the Kafka messages
// whose saved records this instance re-pushed (or still has in a pool),
// from the recovery or the restore that pushed them to the fetch that
// reaches their offsets. A partition's entries are dropped when a fetch
// of it begins past them. Safe for concurrent use.
type resumes struct {
	state *stateFile
	// clientFunc returns the consumer's Kafka client, nil before it is
	// made (no topics).
	clientFunc func() kclient.Client
	// byTopic is the class consuming each topic (classSet.byTopic): only
	// those topics' offsets are ever fetched.
	byTopic map[string]*class
	log     *slog.Logger

	mu    sync.Mutex
	parts map[kclient.Partition]map[int64]*savedOffset
	// began are the partitions whose fetch began here, with the progress
	// it used (nil: none, or one it ignored); see stopProgress.
	began map[kclient.Partition]*snapshot.Progress
}

// savedOffset is the offset of a Kafka message whose saved record was
// re-pushed here: the fetched copy is linked to it instead of being run,
// and settles when the re-pushed message is done or moved (finish). When
// the re-pushed message leaves this instance unfinished (the stop, a
// revocation, a failed save: leave), a linked fetched copy is counted
// abandoned (Kafka delivers it again) and a later fetch runs its copy.
type savedOffset struct {
	mu       sync.Mutex
	finished bool
	gone     bool
	// tr and sl are the fetched copy's slot, once linked; abandoned
	// says leave counted it abandoned in tr.
	tr        *tracker
	sl        slot
	linked    bool
	abandoned bool
}

// link puts the fetched copy of the offset into tr and ties it to the
// re-pushed message: settled now if that is done or moved, else when it
// is. It reports false, putting nothing, when the message left unfinished:
// the fetched copy is then run.
func (s *savedOffset) link(tr *tracker, offset, seen int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone && !s.finished {
		return false
	}
	sl := tr.put(offset, seen)
	if s.finished {
		tr.settle(sl)
		return true
	}
	// A link of an earlier generation's tracker is left as it is: nobody
	// commits that tracker any more.
	s.tr, s.sl, s.linked, s.abandoned = tr, sl, true, false
	return true
}

// finish records that the re-pushed message is done or moved into a
// durable record: its fetched copy's offset settles. Nil does nothing.
func (s *savedOffset) finish() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = true
	if s.linked {
		s.tr.settle(s.sl)
		if s.abandoned {
			s.tr.abandoned.Add(-1)
			s.abandoned = false
		}
	}
}

// leave records that the re-pushed message left this instance without
// being done or moved: a linked fetched copy is counted abandoned in its
// tracker (it stays unsettled, and nothing here settles it now unless a
// move still being written finishes it), an unlinked one will be run.
// Nil does nothing.
func (s *savedOffset) leave() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		return
	}
	s.gone = true
	if s.linked && !s.abandoned {
		s.tr.abandoned.Add(1)
		s.abandoned = true
	}
}

// originOf returns the partition and offset of rec's Kafka message, and
// false when rec did not come from a topic a class consumes.
func (rs *resumes) originOf(rec *snapshot.Record) (kclient.Partition, int64, bool) {
	o := rec.Message.Origin
	if !o.IsKafka() || rs.byTopic[o.Topic] == nil {
		return kclient.Partition{}, 0, false
	}
	return kclient.Partition{Topic: o.Topic, Partition: o.Partition}, o.Offset, true
}

// pushed returns the savedOffset of rec, a saved Kafka message about to
// be re-pushed: a new one, replacing what the offset had (a message
// that left, or a record brought back again). Nil for a message of no
// consumed topic.
func (rs *resumes) pushed(rec *snapshot.Record) *savedOffset {
	p, off, ok := rs.originOf(rec)
	if !ok {
		return nil
	}
	s := &savedOffset{}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.parts == nil {
		rs.parts = map[kclient.Partition]map[int64]*savedOffset{}
	}
	m := rs.parts[p]
	if m == nil {
		m = map[int64]*savedOffset{}
		rs.parts[p] = m
	}
	m[off] = s
	return s
}

// forget drops the entries of p below offset: a fetch that begins there
// never reaches them.
func (rs *resumes) forget(p kclient.Partition, below int64) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	maps.DeleteFunc(rs.parts[p], func(off int64, _ *savedOffset) bool { return off < below })
	if len(rs.parts[p]) == 0 {
		delete(rs.parts, p)
	}
}

// committed asks the group's committed offsets of ps, bounded by
// commitTimeout; nil when there is no client or the request failed
// (logged): nothing is then skipped or dropped on its account.
func (rs *resumes) committed(ctx context.Context, ps []kclient.Partition) map[kclient.Partition]int64 {
	cl := rs.clientFunc()
	if cl == nil || len(ps) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	got, err := cl.Committed(rctx, ps)
	if err != nil {
		if ctx.Err() == nil { // not the stop, nor a revocation
			rs.log.Warn("group's committed offsets not known; saved messages are re-pushed and fetched ones run as they come (duplicates possible)",
				"partitions", len(ps), "err", err)
		}
		return nil
	}
	return got
}

// progress returns the progress the state file holds of p.
func (rs *resumes) progress(p kclient.Partition) (snapshot.Progress, bool) {
	prog, ok, err := rs.state.progress(p.Topic, int32(p.Partition))
	if err != nil {
		rs.log.Warn("partition's progress not read; its fetch runs what the last stop may have done (duplicates possible)",
			"partition", p.String(), "err", err)
		return snapshot.Progress{}, false
	}
	return prog, ok
}

// dropProgress deletes the file's progress of p, which the group's
// commit passed, from the file alone (the changelog's copy is as
// harmless); a failure is logged.
func (rs *resumes) dropProgress(p kclient.Partition) {
	err := rs.state.deleteProgress(p.Topic, int32(p.Partition))
	if err != nil {
		rs.state.writeFailed(err)
		rs.log.Warn("partition's passed progress not deleted; the next assignment asks the group's offsets once more",
			"partition", p.String(), "err", err)
	}
}

// recoveryRun is what one recovery (the start's, or a partition's
// restore) asks resumes: it asks the group's committed offsets once, for
// the partitions it is made with (all of the consumed topics' at the
// start), when a saved Kafka message first needs them.
type recoveryRun struct {
	rs *resumes
	// partsFunc returns the partitions to ask the committed offsets of.
	partsFunc func(ctx context.Context) []kclient.Partition
	asked     bool
	committed map[kclient.Partition]int64
	progs     map[kclient.Partition]*snapshot.Progress
	// dropped are the pending records handledElsewhere found.
	dropped []uint64
}

// run returns a recoveryRun of the partitions partsFunc returns.
func (rs *resumes) run(partsFunc func(ctx context.Context) []kclient.Partition) *recoveryRun {
	return &recoveryRun{rs: rs, partsFunc: partsFunc}
}

// handledElsewhere reports whether rec, a saved pending record, is of a
// Kafka message that was handled elsewhere after this stop saved it: the
// group's committed offset is past it, and the progress of its partition
// says the stop that saved it (same time) did not commit past it. Then
// Kafka delivered it again to an owner that committed past it, and
// re-pushing it would run it twice (with local state only, a restart on
// the same disk after the partition moved). A record an older version
// saved, which committed past what it saved, is never taken for one.
func (v *recoveryRun) handledElsewhere(ctx context.Context, rec *snapshot.Record) bool {
	if v == nil {
		return false
	}
	p, off, ok := v.rs.originOf(rec)
	if !ok {
		return false
	}
	if !v.asked {
		v.asked = true
		v.committed = v.rs.committed(ctx, v.partsFunc(ctx))
		v.progs = map[kclient.Partition]*snapshot.Progress{}
	}
	c, ok := v.committed[p]
	if !ok || off >= c {
		return false
	}
	prog, seen := v.progs[p]
	if !seen {
		if got, ok := v.rs.progress(p); ok {
			prog = &got
		}
		v.progs[p] = prog
	}
	return prog != nil && prog.At.Equal(rec.SavedAt) && prog.NotDoneAt(off)
}

// drop deletes the pending records handledElsewhere found, in one
// transaction (a tombstone each in the changelog), and returns how many
// it deleted.
func (v *recoveryRun) drop(pushed *stateLog) (int, error) {
	if v == nil || len(v.dropped) == 0 {
		return 0, nil
	}
	keys := v.dropped
	v.dropped = nil
	err := v.rs.state.deletePending(keys...)
	if err != nil && !isChangelogErr(err) {
		return 0, err
	}
	pushed.unmarkPushed(keys...)
	return len(keys), nil
}

// resumeCursor is a fetch loop's view of what it may skip of its
// partition: the saved offsets re-pushed here and the progress of the
// last stop, from the group's committed offset on. The fetch loop's
// alone.
type resumeCursor struct {
	saved map[int64]*savedOffset
	// prog is used when progOK: the group's committed offset (from) is
	// at or past its Base.
	prog   snapshot.Progress
	progOK bool
	from   int64
	// limit is the offset from which nothing is skipped any more.
	limit int64
	// Counts for the log line at the end.
	skippedDone, skippedSaved int
	p                         kclient.Partition
	log                       *slog.Logger
}

// begin returns the cursor of the fetch of tr's partition, about to
// begin; nil when there is nothing to skip. It asks the group's
// committed offset when the partition has saved offsets or progress.
func (rs *resumes) begin(ctx context.Context, tr *tracker) *resumeCursor {
	p := tr.partitionName()
	rs.mu.Lock()
	saved := maps.Clone(rs.parts[p])
	rs.mu.Unlock()
	prog, hasProg := rs.progress(p)
	if len(saved) == 0 && !hasProg {
		rs.mu.Lock()
		delete(rs.began, p) // nothing to carry over
		rs.mu.Unlock()
		return nil
	}
	rc := &resumeCursor{saved: saved, from: -1, p: p, log: rs.log}
	c, known := rs.committed(ctx, []kclient.Partition{p})[p]
	if known {
		rc.from = c
		rs.forget(p, c)
		maps.DeleteFunc(rc.saved, func(off int64, _ *savedOffset) bool { return off < c })
		rc.progOK = hasProg && prog.Base <= c && c < prog.End
		if hasProg && c >= prog.End {
			rs.dropProgress(p) // passed: the next assignment asks nothing for it
		}
	}
	if rc.progOK {
		rc.prog = prog
		rc.limit = prog.End
	}
	rs.mu.Lock()
	if rs.began == nil {
		rs.began = map[kclient.Partition]*snapshot.Progress{}
	}
	switch {
	case !known: // not checked: as if the fetch had not begun
		delete(rs.began, p)
	case rc.progOK:
		rs.began[p] = &prog
	default: // ignored: the group's offsets were reset back
		rs.began[p] = nil
	}
	rs.mu.Unlock()
	for off := range rc.saved {
		rc.limit = max(rc.limit, off+1)
	}
	if rc.limit <= rc.from || rc.limit == 0 {
		return nil
	}
	return rc
}

// skip puts offset, fetched at seen, into tr and reports true when its
// record is not to be run: known done (settled now) or the fetched copy
// of a re-pushed saved message (settled with it). Otherwise it puts
// nothing: the record is handled as usual.
func (rc *resumeCursor) skip(tr *tracker, offset, seen int64) bool {
	if s := rc.saved[offset]; s != nil && s.link(tr, offset, seen) {
		rc.skippedSaved++
		return true
	}
	if rc.progOK && offset >= rc.from && rc.prog.Done(offset) {
		tr.settle(tr.put(offset, seen))
		rc.skippedDone++
		return true
	}
	return false
}

// done reports whether the fetch passed every offset the cursor may
// skip (offset is the next fetched), logging what it skipped then.
func (rc *resumeCursor) done(offset int64) bool {
	if offset < rc.limit {
		return false
	}
	rc.log.Info("partition's fetch passed what its last stop saved or knew done", "partition", rc.p.String(),
		"skipped_done", rc.skippedDone, "skipped_saved", rc.skippedSaved, "progress", rc.progOK)
	return true
}

// progress returns what the tracker knows of its partition past its
// commit point, for the stop's progress record: the commit point (-1
// when unknown: nothing fetched and no start offset), the offset after
// the last one fetched (the commit point when none was), and every
// fetched offset in between not settled (saved, given back, never
// accepted, anything). With more than limit of those, the range ends at
// the first one left out, and full is true: what follows is not known
// done (more duplicates, never a loss).
func (t *tracker) progress(limit int) (p snapshot.Progress, full bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cp := t.advanceLocked()
	p.Base, p.End = cp, cp
	if cp < 0 {
		return p, false
	}
	for s, from := t.head, t.hi; s != nil; s, from = s.next.Load(), 0 {
		n := s.n.Load()
		for i := from; i < n; i++ {
			off := s.offs[i]
			if !s.settled[i].Load() {
				if len(p.NotDone) == limit {
					p.End = off
					return p, true
				}
				p.NotDone = append(p.NotDone, off)
			}
			p.End = off + 1
		}
	}
	return p, false
}

// partitions returns the partitions of topics, nil without a client or
// when the brokers do not answer within commitTimeout (logged).
func (k *consumer) partitions(ctx context.Context, topics []string) []kclient.Partition {
	if k.client == nil || len(topics) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	ps, err := k.client.Partitions(rctx, topics)
	if err != nil && ctx.Err() == nil {
		k.cfg.log.Warn("partitions not known; saved messages are re-pushed whether or not the group committed past them", "err", err)
	}
	return ps
}

// partProgress is one partition's progress, for the stop's snapshot.
type partProgress struct {
	topic     string
	partition int32
	prog      snapshot.Progress
}

// stopProgress returns the progress of each partition of trs, the
// current generation's, stamped at (the SavedAt of what the stop saves).
// It is the tracker's (progress), carried on past the last offset
// fetched over the saved messages re-pushed here and done whose fetched
// copies were not fetched yet, and over what the progress the fetch
// began with knew done (or, when the fetch did not begin, the file's):
// so a stop that comes before the fetch reached the work a restore
// re-pushed and ran does not leave it to be run again. A partition with
// nothing known is left out.
func (rs *resumes) stopProgress(trs []*tracker, at time.Time) []partProgress {
	var out []partProgress
	for _, tr := range trs {
		p := tr.partitionName()
		t, full := tr.progress(snapshot.MaxProgressOffsets)
		var prior *snapshot.Progress
		var fin []int64
		rs.mu.Lock()
		prior, began := rs.began[p]
		for off, s := range rs.parts[p] {
			s.mu.Lock()
			if s.finished && !s.linked {
				fin = append(fin, off)
			}
			s.mu.Unlock()
		}
		rs.mu.Unlock()
		if !began {
			if got, ok := rs.progress(p); ok {
				prior = &got
			}
		}
		prog, ok := carryProgress(t, full, fin, prior)
		if !ok {
			continue
		}
		prog.At = at
		out = append(out, partProgress{topic: tr.topic, partition: int32(tr.partition), prog: prog})
	}
	slices.SortFunc(out, func(a, b partProgress) int {
		if a.topic != b.topic {
			if a.topic < b.topic {
				return -1
			}
			return 1
		}
		return int(a.partition - b.partition)
	})
	return out
}

// carryProgress carries the tracker's progress t (full: it reached
// MaxProgressOffsets) on past its End: an offset there is done when it
// is in fin (re-pushed saved messages done, their fetched copies not
// fetched) or prior says it is done; every other offset up to the last
// of those is not done. Without a commit point of its own (nothing
// fetched, no start offset) it starts at prior's Base. ok is false when
// nothing is known.
func carryProgress(t snapshot.Progress, full bool, fin []int64, prior *snapshot.Progress) (snapshot.Progress, bool) {
	if full {
		return t, t.End > t.Base
	}
	if t.Base < 0 {
		if prior == nil {
			return t, false
		}
		t.Base, t.End = prior.Base, prior.Base
	}
	slices.Sort(fin)
	end := t.End
	if n := len(fin); n > 0 {
		end = max(end, fin[n-1]+1)
	}
	if prior != nil {
		end = max(end, prior.End)
	}
	kept, from := len(t.NotDone), t.End
	for o := from; o < end; o++ {
		if _, found := slices.BinarySearch(fin, o); found || prior != nil && prior.Done(o) {
			kept, t.End = len(t.NotDone), o+1
			continue
		}
		if len(t.NotDone) == snapshot.MaxProgressOffsets {
			break
		}
		t.NotDone = append(t.NotDone, o)
	}
	// What is not done past the last offset known done says nothing.
	t.NotDone = t.NotDone[:kept]
	return t, t.End > t.Base
}
