package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/handoff-go/handoff/pool"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/runtime/internal/service"
	"github.com/handoff-go/handoff/snapshot"
)

// How long the final commit and the group leave may take at least; with
// the reader closes they make the fixed margin of a stop, stopMargin.
const (
	commitTimeout = kclient.CommitTimeout
	leaveTimeout  = kclient.LeaveTimeout
)

// stopBudget is how long a stop may take: DrainTimeout, HardStopGrace,
// with the changelog ChangelogTimeout for the snapshot's changelog write,
// and a margin for the snapshot, the final commit, the reader closes and
// the leave. The leave may use what the phases before it left of it.
func (c *Config) stopBudget() time.Duration {
	d := c.DrainTimeout + c.HardStopGrace + commitTimeout + leaveTimeout + c.FetchMaxWait + time.Second
	if c.changelogOn() {
		d += c.ChangelogTimeout
	}
	return d
}

// changelogOn reports whether the state changelog is used: not with
// LocalStateOnly, and only with classes that have topics.
func (c *Config) changelogOn() bool {
	if c.LocalStateOnly {
		return false
	}
	for _, cl := range c.Classes {
		if len(cl.Topics) > 0 {
			return true
		}
	}
	return false
}

// stopPhase is a phase of the stop, in the order of docs/design.md.
type stopPhase int

const (
	phaseQuiesce stopPhase = iota
	phaseDrain
	phaseHardStop
	phaseSnapshot
	phaseCommit
	phaseLeave
	phaseCount
)

// stopPhases is the stop, one row per phase, run in order: its name (the
// phase label of the logs and of the phase-duration gauge), where the
// Report keeps its duration, and its step. A step ends the services the
// start registered to end at its phase (runState.launch) where the step
// says; a new background component is such a service and leaves this
// table alone.
var stopPhases = [phaseCount]struct {
	name string
	took func(*Report) *time.Duration
	step func(*runState) []any
}{
	phaseQuiesce:  {"quiesce", func(r *Report) *time.Duration { return &r.Quiesce }, (*runState).quiesce},
	phaseDrain:    {"drain", func(r *Report) *time.Duration { return &r.Drain }, (*runState).drain},
	phaseHardStop: {"hard_stop", func(r *Report) *time.Duration { return &r.HardStop }, (*runState).hardStop},
	phaseSnapshot: {"snapshot", func(r *Report) *time.Duration { return &r.Snapshot }, (*runState).snapshot},
	phaseCommit:   {"commit", func(r *Report) *time.Duration { return &r.Commit }, (*runState).commit},
	phaseLeave:    {"leave", func(r *Report) *time.Duration { return &r.Leave }, (*runState).leave},
}

// endServices stops, all at once, the services registered to end at
// phase, and blocks until every one has stopped.
func (s *runState) endServices(phase stopPhase) {
	service.StopAll(s.ends[phase]...)
}

// stop runs the stop's phases (stopPhases) and returns the report with
// every phase's error joined. Handlers still running at the hard stop
// get their context cancelled with cause and grace to return. A start
// that failed is torn down by the same phases, logged at Debug (see
// end).
func (s *runState) stop(grace time.Duration, cause error) (*Report, error) {
	r, rep := s.r, s.rep
	begin := time.Now()
	s.grace, s.cause = grace, cause
	s.deadline = begin.Add(r.cfg.stopBudget())
	r.life.deadline.set(s.deadline)
	// The changelog's writes end in time for the final commit and the
	// leave.
	r.clog.bound(s.deadline.Add(-commitTimeout - leaveTimeout))
	r.ready.started.Store(false)
	r.life.accepting.Store(false)
	r.life.stopping.Store(true)
	r.log.Log(context.Background(), s.phaseLevel(), "stop begins")

	for _, ph := range stopPhases {
		s.phase(ph.name, ph.took(rep), func() []any { return ph.step(s) })
	}

	r.tally.fill(rep)
	rep.Revoked = int(r.kafka.revoked.Load())
	rep.Restored = int(r.clog.restored.Load())
	rep.RestoredPartitions = int(r.clog.restoredParts.Load())
	rep.Followed = int(r.clog.followed.Load())
	rep.Repushed += int(r.clog.repushed.Load())
	rep.BlockedKeys += int(r.clog.blockedKeys.Load())
	rep.UnknownClass += int(r.clog.unknownClass.Load())
	rep.Stop = time.Since(begin)
	s.end()
	return rep, errors.Join(s.snapErr, s.commitErr, s.closeErr)
}

// end logs the stop's last line: "stop complete" with the report's
// counts after a run. After a failed start no run happened and the
// caller reports Run's error: the teardown's line says what it stopped,
// at Info only when it handled or saved messages (messages the recovery
// re-pushed before the start failed), else at Debug.
func (s *runState) end() {
	r, rep := s.r, s.rep
	if s.startFailed {
		level := slog.LevelDebug
		if rep.Repushed > 0 || rep.Snapshotted > 0 || r.tally.handled() > 0 {
			level = slog.LevelInfo
		}
		r.log.Log(context.Background(), level, "stopped what the failed start had begun",
			"repushed", rep.Repushed, "succeeded", rep.Succeeded, "dead_lettered", rep.DeadLettered,
			"interrupted", rep.Interrupted, "snapshotted", rep.Snapshotted, "took", rep.Stop, s.kept)
		return
	}
	r.log.Info("stop complete", "drained", rep.Drained, "snapshotted", rep.Snapshotted, "unstarted", rep.Unstarted,
		"interrupted", rep.Interrupted, "stragglers", rep.Stragglers, "succeeded", rep.Succeeded,
		"dead_lettered", rep.DeadLettered, "retried", rep.Retried, "repushed", rep.Repushed, "share_released", rep.ShareReleased,
		"took", rep.Stop, s.kept)
}

// phaseLevel is the level of the stop's lines for each phase: Info, Debug
// when the stop tears down a failed start.
func (s *runState) phaseLevel() slog.Level {
	if s.startFailed {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// phase runs one phase of the stop: it times fn, records the duration in
// *d and in the phase gauge, and logs the phase's end with the attributes
// fn returns. A phase that ends badly logs its own warning as well.
func (s *runState) phase(name string, d *time.Duration, fn func() []any) {
	start := time.Now()
	attrs := fn()
	*d = time.Since(start)
	s.r.metrics.setPhase(name, *d)
	s.r.log.Log(context.Background(), s.phaseLevel(), "stop phase done", append([]any{"phase", name, "took", *d}, attrs...)...)
}

// quiesce stops everything that feeds the pools, the services of
// phaseQuiesce: fetching (the partition readers close in the
// background, joined by leave), the scheduler, the dead-letter
// operations, the follow and the key releases.
func (s *runState) quiesce() []any {
	s.endServices(phaseQuiesce)
	// Share classes: polling ended; what has not started goes back to
	// the share group at once, for the other members.
	s.rep.ShareReleased += s.r.shareQuiesce()
	for _, c := range s.r.classes.order {
		c.hold.Stop()
	}
	if s.rep.ShareReleased > 0 {
		return []any{"share_released", s.rep.ShareReleased}
	}
	return nil
}

// drain lets the pools work until they are empty, DrainTimeout passes or
// the rest of the drain is skipped (a second signal, Shutdown's context,
// Close). Its line counts what it left in the pools for the hard stop:
// unstarted (queued, also behind a busy key or in a suspended class),
// waiting out a backoff that ends after the drain, and running. A drain
// that did not run out of time may leave the first two.
func (s *runState) drain() []any {
	r, rep := s.r, s.rep
	before := r.tally.handled()
	ctx, cancel := context.WithTimeoutCause(context.Background(), r.cfg.DrainTimeout, errDrainTimeout)
	defer cancel()
	go func() {
		select {
		case <-r.life.skipCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	var drains sync.WaitGroup
	var timedOut sync.Once
	for _, c := range r.classes.order {
		drains.Go(func() {
			if err := c.pool.Drain(ctx); err != nil {
				timedOut.Do(func() { rep.DrainTimedOut = true })
			}
		})
	}
	drains.Wait()
	rep.Drained = r.tally.handled() - before
	var left pool.Stats
	for _, c := range r.classes.order {
		st := c.pool.Stats()
		left.Queued += st.Queued
		left.Waiting += st.Waiting
		left.Running += st.Running
	}
	leftAttrs := []any{"unstarted", left.Queued, "waiting", left.Waiting, "running", left.Running}
	if rep.DrainTimedOut && !s.startFailed { // a failed start skips its drain
		r.log.Warn("drain ended with work left", append([]any{"phase", "drain", "drained", rep.Drained}, leftAttrs...)...)
	}
	return append([]any{"drained", rep.Drained}, leftAttrs...)
}

// takenOut is a message the hard stop took out of its pool, or a held
// one, with the reason it is saved under and its last error.
type takenOut struct {
	it     *item
	reason string
	err    error
}

// hardStop takes the unstarted messages out of the pools and cancels the
// running handlers, giving them grace to return; a StopRedeliver class's
// Kafka messages are given back. What is left is kept for the snapshot:
// interrupted first, then those waiting out a backoff, then the
// unstarted, since each of the first two started before any unstarted
// message of its key and the restart re-pushes in save order.
func (s *runState) hardStop() []any {
	r, rep, grace, cause := s.r, s.rep, s.grace, s.cause
	results := make([]pool.StopResult[*item], len(r.classes.order))
	var stops sync.WaitGroup
	for i, c := range r.classes.order {
		stops.Go(func() { results[i] = c.pool.Stop(grace, cause) })
	}
	stops.Wait()
	for i, res := range results {
		res.Interrupted = without(res.Interrupted, (*item).isDiverted, r.handling.outOfPool)
		for _, it := range res.Interrupted {
			it.tellOutcome(OutcomeInterrupted, nil, 0)
		}
		rep.Unstarted += len(res.Unstarted)
		rep.Interrupted += len(res.Interrupted)
		rep.Waiting += len(res.Waiting)
		rep.Stragglers += res.Stragglers
		if sf := r.classes.order[i].share; sf != nil {
			// Nothing of a share class is saved: the broker has it.
			giveBack := func(it *item) {
				r.handling.outOfPool(it)
				if sf.giveBack(it) {
					rep.ShareReleased++
				}
			}
			res.Interrupted = without(res.Interrupted, (*item).isShare, giveBack)
			res.Waiting = without(res.Waiting, (*item).isShare, giveBack)
			res.Unstarted = without(res.Unstarted, (*item).isShare, giveBack)
		}
		if r.classes.order[i].cfg.StopPolicy == StopRedeliver {
			// Kafka messages stay unsettled: the commit stops before
			// them and the partition's next owner reads them again.
			giveBack := func(it *item) { rep.GivenBack++; r.abandon(it) }
			res.Interrupted = without(res.Interrupted, (*item).isKafka, giveBack)
			res.Waiting = without(res.Waiting, (*item).isKafka, giveBack)
			res.Unstarted = without(res.Unstarted, (*item).isKafka, giveBack)
		}
		s.takeForSnapshot(res.Interrupted, reasonInterrupted)
		s.takeForSnapshot(res.Waiting, reasonBackoff)
		s.takeForSnapshot(res.Unstarted, reasonUnstarted)
	}
	if rep.Stragglers > 0 {
		r.log.Warn("handlers did not return by the hard-stop grace; recorded as interrupted",
			"phase", "hard_stop", "stragglers", rep.Stragglers, "grace", grace)
	}
	return []any{"unstarted", rep.Unstarted, "interrupted", rep.Interrupted, "waiting", rep.Waiting,
		"given_back", rep.GivenBack, "share_released", rep.ShareReleased}
}

// takeForSnapshot adds its to what the snapshot saves, ending their ties to the
// pools.
func (s *runState) takeForSnapshot(its []*item, reason string) {
	for _, it := range its {
		if c := s.r.classes.byName[it.env().Class]; c != nil {
			c.hold.Uncount(it)
		}
		s.r.handling.outOfPool(it)
		s.left = append(s.left, takenOut{it: it, reason: reason})
	}
}

// stale reports whether the record of a stored message taken out no
// longer says what the message is: its attempt count moved (it waits
// out a backoff, or was retried in place before it was interrupted or,
// its backoff over, queued again), or its attempt was interrupted (its
// middleware may have set its headers, see SetHeaders). An unstarted
// one that never failed here is as its record says. A requeued dead
// letter's record stays its dead letter, as it failed, unless it waits
// out a backoff (see putSource).
func (l takenOut) stale() bool {
	if l.it.src == fromDead {
		return l.reason == reasonBackoff
	}
	return l.reason != reasonUnstarted || l.it.moved()
}

// takeUnsaved adds the unsaved failed messages to what the snapshot saves.
func (s *runState) takeUnsaved() {
	for _, m := range s.r.fail.unsaved.take() {
		s.left = append(s.left, takenOut{it: m.it, reason: reasonFailed, err: m.err})
	}
}

// without returns its less the items out reports, each of which it hands
// to drop. It reuses its' array.
func without(its []*item, out func(*item) bool, drop func(*item)) []*item {
	kept := its[:0]
	for _, it := range its {
		if out(it) {
			drop(it)
			continue
		}
		kept = append(kept, it)
	}
	return kept
}

// isDiverted reports whether the handler wrapper parked or delayed the
// message instead of running it: one that comes back from the hard stop as
// interrupted is saved elsewhere and settled already, so it is neither
// saved again nor counted.
func (it *item) isDiverted() bool { return it.diverted.Load() }

// isKafka reports whether the message came from Kafka.
func (it *item) isKafka() bool { return it.src == fromKafka }

// abandon gives a Kafka message back to its partition: it stays unsettled
// and is counted abandoned in its tracker, so that a revoke does not wait
// for it, and its ties to the pool end.
func (r *Runtime) abandon(it *item) {
	it.abandon()
	r.handling.outOfPool(it)
}

// snapshot saves, in ONE transaction, what the hard stop took out and has
// no record yet and the unsaved failed messages (unsaved.go), updates the records of
// persisted messages whose attempt count moved, deletes the records
// of done ones, and writes each partition's progress (which offsets past
// the commit are not done; progress.go). The saved Kafka messages are
// never settled: their records carry their order and attempt counts and
// spare the next owner a second run, but Kafka keeps them, uncommitted,
// whether or not the save succeeds.
func (s *runState) snapshot() []any {
	r, rep := s.r, s.rep
	// The Schedule calls of the stop end here: those under way finish
	// their writes first (they are resent with the rest below when
	// their changelog write failed).
	r.life.schedules.close()
	s.endServices(phaseSnapshot)
	s.takeUnsaved()
	r.clog.resendAtStop() // the messages whose changelog write failed, a last time
	now := time.Now()
	// Each message taken out is saved anew, or its record updated (see
	// stale), or left as it is; which, a delayed one's can only tell in
	// the transaction.
	var fresh, delayed, updates []takenOut
	for _, l := range s.left {
		switch {
		case !l.it.src.persisted():
			fresh = append(fresh, l)
		case l.it.src == fromDelayed:
			delayed = append(delayed, l)
		case l.stale():
			updates = append(updates, l)
		}
		// Otherwise its record is still there, unchanged.
	}
	del := r.deletes.Take()
	if r.state.beforeSnapshot != nil {
		r.state.beforeSnapshot(r.state.store)
	}
	// What each partition's next owner needs to skip the done work past
	// the commit (progress.go): the stop commits no saved Kafka message.
	var progs []partProgress
	if g := r.kafka.gen.Load(); g != nil {
		progs = r.restore.resumes.stopProgress(g.trackers(), now)
	}
	var recs []snapshot.Record
	var keys []uint64
	var fromKafka []bool // of recs
	if len(fresh) > 0 || !del.Empty() || len(updates) > 0 || len(delayed) > 0 || len(progs) > 0 {
		var err error
		recs, keys, fromKafka, err = r.state.writeSnapshot(fresh, delayed, updates, del, progs, now)
		if err != nil {
			r.state.writeFailed(err)
		}
		switch {
		case err != nil && isChangelogErr(err):
			s.snapErr = s.takeBack(recs, keys, fromKafka, err)
		case err != nil:
			s.snapErr = fmt.Errorf("runtime: snapshot of %d messages failed; their offsets are not committed and Kafka will deliver them again: %w", len(recs), err)
			r.log.Error("snapshot failed", "phase", "snapshot", "messages", len(recs), "err", err)
		}
	}
	if s.snapErr == nil {
		rep.Snapshotted = len(recs)
	}
	// Saved or not, the Kafka messages' offsets stay unsettled: the
	// commit stops before the first of them, so Kafka keeps them for a
	// next owner that cannot read what was saved (an older version, a
	// deleted changelog, a plain consumer). Nothing settles them any
	// more: counted abandoned, so that the revoke at the leave does not
	// wait RevokeTimeout for them (on kafka-go, past the stop).
	for _, l := range fresh {
		l.it.abandon()
	}
	r.clog.keepCheckpointsAtStop()
	r.metrics.setSnapshot(rep.Snapshotted)
	return []any{"saved", rep.Snapshotted}
}

// takeBack is the end of a snapshot that committed to the state file but
// not to the changelog (err): the saved Kafka messages are taken back out
// of the file, unsettled, so that Kafka delivers them again (to this
// instance or the partition's next owner) and a restart on the same disk
// does not run them twice; the others (submitted, scheduled: Kafka has no
// copy of them) stay in the file, which sends them to the changelog at
// the next start (snapshot.State.OpenChangelog). It returns the
// snapshot's error.
func (s *runState) takeBack(recs []snapshot.Record, keys []uint64, fromKafka []bool, err error) error {
	r := s.r
	var back []uint64
	for i, k := range keys {
		if fromKafka[i] {
			back = append(back, k)
		}
	}
	kept := len(recs) - len(back)
	var backErr error
	if len(back) > 0 {
		backErr = r.state.deletePendingLocal(back...)
	}
	r.log.Error("snapshot not written to the changelog; its Kafka messages are not committed and Kafka will deliver them again",
		"phase", "snapshot", "messages", len(recs), "taken_back", len(back), "kept_for_next_start", kept, "err", err)
	if backErr != nil {
		r.log.Error("snapshot's Kafka messages not taken back out of the state file; a restart on this disk may run them twice",
			"phase", "snapshot", "messages", len(back), "err", backErr)
	}
	return errors.Join(fmt.Errorf("runtime: snapshot of %d messages not written to the changelog; the %d from Kafka are not committed (Kafka delivers them again), the %d others stay in the state file for the next start: %w",
		len(recs), len(back), kept, err), backErr)
}

// commit commits what is done or saved through the current generation.
func (s *runState) commit() []any {
	r := s.r
	err := r.kafka.finalCommit()
	switch {
	case errors.Is(err, errGenerationEnded):
		// A rebalance ended the generation during the stop; its end
		// committed what was settled then, and the partitions' new owners
		// read the rest again. Nothing is unsafe, so the stop is clean.
		r.log.Warn("generation ended during the stop; messages settled after it will be delivered again to the partitions' new owners",
			"phase", "commit")
	case err != nil:
		r.log.Warn("final commit failed; Kafka will deliver the uncommitted messages again", "phase", "commit", "err", err)
		s.commitErr = fmt.Errorf("%w: %w", ErrCommit, err)
	}
	return nil
}

// leave closes the Kafka client (consumer.close): it waits for the
// partition readers to finish closing (each bounded by FetchMaxWait plus
// a second; they have been closing since the quiesce) and leaves the
// group within what the stop's budget has left (at least leaveTimeout;
// see kclient.Client.Close: a join in flight is finished first, a static
// franz-go member does not leave). Then it ends the services of
// phaseLeave (the dead-letter publisher gets what is left of the stop's
// budget), and closes the state file.
func (s *runState) leave() []any {
	r := s.r
	r.shareClose(s.deadline) // share.go: a failure is logged; the broker redelivers
	r.kafka.close(s.deadline)
	r.clog.close()
	s.endServices(phaseLeave)
	s.kept = r.state.kept()
	if err := r.state.close(); err != nil {
		s.closeErr = fmt.Errorf("runtime: close state file: %w", err)
	}
	return nil
}
