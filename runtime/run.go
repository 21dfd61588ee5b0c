package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff/snapshot"
)

// Run is the service's main loop. It blocks for the life of the service
// and returns only when the stop is complete, with its [Report].
//
// Start: it opens the state file (failing with a clear error when another
// process holds it), re-pushes every saved message into its class's pool
// before the first fetch, then joins the consumer group.
//
// Cancelling ctx, [Runtime.Shutdown] or [Runtime.Close] starts the stop:
// fetching ends, pools drain for up to DrainTimeout, the hard stop cancels
// running handlers and gives them HardStopGrace, whatever is left is saved
// in ONE state-file transaction, offsets are committed up to (never past)
// the first message that is neither done nor saved, and the instance
// leaves the group. If the save fails, those messages' offsets are not
// committed (Kafka delivers them again) and Run returns an error with
// their count.
//
// Run installs no signal handler; see [HandleSignals]. It may be called
// once.
func (r *Runtime) Run(ctx context.Context) (*Report, error) {
	if !r.state.CompareAndSwap(stateNew, stateRunning) {
		return nil, ErrRunTwice
	}
	defer func() {
		r.state.Store(stateDone)
		close(r.runDone)
	}()
	rep := &Report{}
	stopWatch := context.AfterFunc(ctx, r.requestStop)
	defer stopWatch()

	started := time.Now()
	store, err := snapshot.Open(r.cfg.StatePath, snapshot.Options{LockTimeout: r.cfg.LockTimeout})
	if err != nil {
		return rep, fmt.Errorf("runtime: open state file: %w", err)
	}
	r.store = store

	// runCtx ends when a stop is requested; it bounds the recovery push.
	runCtx, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	go func() {
		select {
		case <-r.stopCh:
			cancelRun()
		case <-runCtx.Done():
		}
	}()

	var bg sync.WaitGroup
	delCtx, stopDeletes := context.WithCancel(context.Background())
	bg.Go(func() { r.deleteLoop(delCtx) })
	r.accepting.Store(true)

	if err := r.recover(runCtx, rep); err != nil {
		r.accepting.Store(false)
		stopDeletes()
		bg.Wait()
		// Nothing was fetched; pools hold only re-pushed messages, which
		// are still in the state file.
		for _, c := range r.order {
			c.pool.Stop(0, err)
		}
		return rep, errors.Join(err, r.store.Close())
	}
	r.log.Info("recovery finished", "repushed", rep.Repushed, "quarantined", rep.Quarantined,
		"unknown_class", rep.UnknownClass, "took", time.Since(started))

	fetchCtx, cancelFetch := context.WithCancel(context.Background())
	defer cancelFetch()
	var cg *kafka.ConsumerGroup
	var consumer sync.WaitGroup
	if len(r.topics) > 0 && runCtx.Err() == nil {
		cg, err = kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
			ID:                r.cfg.Group,
			Brokers:           r.cfg.Brokers,
			Topics:            r.topics,
			StartOffset:       r.startOffset(),
			SessionTimeout:    r.cfg.SessionTimeout,
			RebalanceTimeout:  r.cfg.RebalanceTimeout,
			HeartbeatInterval: r.cfg.SessionTimeout / 3,
			JoinGroupBackoff:  time.Second,
			Timeout:           5 * time.Second,
			Logger:            kafkaLogger(r.log, false),
			ErrorLogger:       kafkaLogger(r.log, true),
		})
		if err != nil {
			// Validated in New; this means kafka-go disagrees.
			r.log.Error("consumer group not created", "err", err)
			r.requestStop()
		} else {
			consumer.Go(func() { r.consume(fetchCtx, cg) })
		}
	}
	r.ready.Store(true)
	r.log.Info("running", "classes", len(r.order), "topics", len(r.topics), "group", r.cfg.Group)

	<-r.stopCh
	return r.stop(rep, cancelFetch, &consumer, cg, func() { stopDeletes(); bg.Wait() })
}

func (r *Runtime) startOffset() int64 {
	if r.cfg.StartOffset == StartLast {
		return kafka.LastOffset
	}
	return kafka.FirstOffset
}

// recover re-pushes the pending records of the state file into their
// pools, oldest first. A record stays in the file until its message is
// done, so a crash here loses nothing. A stop during recovery leaves the
// records not yet pushed where they are.
func (r *Runtime) recover(ctx context.Context, rep *Report) error {
	entries, bad, err := r.store.LoadPending()
	if err != nil {
		return fmt.Errorf("runtime: recover: %w", err)
	}
	rep.Quarantined = len(bad)
	for _, de := range bad {
		r.log.Error("undecodable record moved to quarantine", "err", de)
	}
	var orphans []snapshot.Record
	var orphanKeys []uint64
	for _, e := range entries {
		c := r.classes[e.Record.Message.Class]
		if c == nil {
			rec := e.Record
			rec.Reason = "unknown class"
			rec.Err = fmt.Sprintf("runtime: class %q is not configured", rec.Message.Class)
			rec.SavedAt = time.Now()
			orphans = append(orphans, rec)
			orphanKeys = append(orphanKeys, e.Key)
			continue
		}
		if err := c.pool.Submit(ctx, &item{msg: e.Record.Message, pendingKey: e.Key}); err != nil {
			r.log.Info("recovery stopped by the stop; the rest stays in the state file", "left", len(entries)-rep.Repushed-len(orphans))
			break
		}
		rep.Repushed++
	}
	if len(orphans) > 0 {
		if _, err := r.store.SaveDead(orphans...); err != nil {
			return fmt.Errorf("runtime: recover: dead-letter %d messages of unknown classes: %w", len(orphans), err)
		}
		if err := r.store.DeletePending(orphanKeys...); err != nil {
			return fmt.Errorf("runtime: recover: %w", err)
		}
		rep.UnknownClass = len(orphans)
		r.log.Warn("saved messages of unknown classes became dead letters", "count", len(orphans))
	}
	return nil
}

// stop runs the stop phases: quiesce, drain, hard stop, snapshot, commit,
// leave.
func (r *Runtime) stop(rep *Report, cancelFetch context.CancelFunc, consumer *sync.WaitGroup, cg *kafka.ConsumerGroup, stopBackground func()) (*Report, error) {
	begin := time.Now()
	r.ready.Store(false)
	r.accepting.Store(false)
	r.log.Info("stop begins")

	// 1. Quiesce: no more fetching.
	phase := time.Now()
	cancelFetch()
	consumer.Wait()
	rep.Quiesce = time.Since(phase)
	r.log.Info("stop phase done", "phase", "quiesce", "took", rep.Quiesce)

	// 2. Drain, bounded by DrainTimeout and by a second signal.
	phase = time.Now()
	before := r.handled()
	drainCtx, cancelDrain := context.WithTimeoutCause(context.Background(), r.cfg.DrainTimeout,
		errors.New("runtime: drain timeout"))
	go func() {
		select {
		case <-r.skipCh:
			cancelDrain()
		case <-drainCtx.Done():
		}
	}()
	var drains sync.WaitGroup
	var timedOut sync.Once
	for _, c := range r.order {
		drains.Go(func() {
			if err := c.pool.Drain(drainCtx); err != nil {
				timedOut.Do(func() { rep.DrainTimedOut = true })
			}
		})
	}
	drains.Wait()
	cancelDrain()
	rep.Drain = time.Since(phase)
	rep.Drained = r.handled() - before
	if rep.DrainTimedOut {
		r.log.Warn("drain ended with work left", "phase", "drain", "drained", rep.Drained, "took", rep.Drain)
	} else {
		r.log.Info("stop phase done", "phase", "drain", "drained", rep.Drained, "took", rep.Drain)
	}

	// 3. Hard stop: take out what has not started, cancel what runs.
	phase = time.Now()
	results := make([]struct {
		unstarted, interrupted []*item
		stragglers             int
	}, len(r.order))
	var stops sync.WaitGroup
	for i, c := range r.order {
		stops.Go(func() {
			res := c.pool.Stop(r.cfg.HardStopGrace, ErrStopping)
			results[i].unstarted, results[i].interrupted, results[i].stragglers = res.Unstarted, res.Interrupted, res.Stragglers
		})
	}
	stops.Wait()
	var left []*item
	var reasons []string
	for _, res := range results {
		rep.Unstarted += len(res.unstarted)
		rep.Interrupted += len(res.interrupted)
		rep.Stragglers += res.stragglers
		// Interrupted first: each started before any unstarted message
		// of its key, and the restart re-pushes in save order.
		for _, it := range res.interrupted {
			left = append(left, it)
			reasons = append(reasons, "interrupted")
		}
		for _, it := range res.unstarted {
			left = append(left, it)
			reasons = append(reasons, "unstarted")
		}
	}
	rep.HardStop = time.Since(phase)
	if rep.Stragglers > 0 {
		r.log.Warn("handlers did not return by the hard-stop grace; recorded as interrupted",
			"phase", "hard_stop", "stragglers", rep.Stragglers, "grace", r.cfg.HardStopGrace)
	}
	r.log.Info("stop phase done", "phase", "hard_stop", "unstarted", rep.Unstarted,
		"interrupted", rep.Interrupted, "took", rep.HardStop)

	// 4. Snapshot: ONE transaction saves what is left and forgets the
	// re-pushed messages that are done.
	phase = time.Now()
	stopBackground()
	now := time.Now()
	var recs []snapshot.Record
	var saved []*item
	for i, it := range left {
		if it.pendingKey != 0 {
			continue // re-pushed and not done: its record is still there
		}
		recs = append(recs, snapshot.Record{Message: it.msg, Reason: reasons[i], SavedAt: now})
		saved = append(saved, it)
	}
	del := r.takeDelKeys()
	if r.beforeSnapshot != nil {
		r.beforeSnapshot(r.store)
	}
	var snapErr error
	if len(recs) > 0 || len(del) > 0 {
		if _, err := r.store.SavePending(recs, del); err != nil {
			snapErr = fmt.Errorf("runtime: snapshot of %d messages failed; their offsets are not committed and Kafka will deliver them again: %w", len(recs), err)
			r.log.Error("snapshot failed", "phase", "snapshot", "messages", len(recs), "err", err)
		}
	}
	if snapErr == nil {
		rep.Snapshotted = len(recs)
		for _, it := range saved {
			if it.tr != nil {
				it.tr.settle(it.seq)
			}
		}
	}
	rep.Snapshot = time.Since(phase)
	r.log.Info("stop phase done", "phase", "snapshot", "saved", rep.Snapshotted, "took", rep.Snapshot)

	// 5. Commit what is done or saved.
	phase = time.Now()
	commitErr := r.finalCommit()
	rep.Commit = time.Since(phase)
	if commitErr != nil {
		r.log.Warn("final commit failed; Kafka will deliver the uncommitted messages again", "phase", "commit", "err", commitErr)
	} else {
		r.log.Info("stop phase done", "phase", "commit", "took", rep.Commit)
	}

	// 6. Leave the group and close the state file.
	phase = time.Now()
	if cg != nil {
		closed := make(chan struct{})
		go func() { cg.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(leaveTimeout):
			r.log.Warn("leaving the group did not finish in time; the broker will expire the session", "phase", "leave", "waited", leaveTimeout)
		}
	}
	closeErr := r.store.Close()
	rep.Leave = time.Since(phase)
	rep.Succeeded, rep.Failed = r.outcomes()
	rep.Stop = time.Since(begin)
	r.log.Info("stop complete", "drained", rep.Drained, "snapshotted", rep.Snapshotted, "unstarted", rep.Unstarted,
		"interrupted", rep.Interrupted, "stragglers", rep.Stragglers, "succeeded", rep.Succeeded, "failed", rep.Failed,
		"repushed", rep.Repushed, "took", rep.Stop)
	if closeErr != nil {
		closeErr = fmt.Errorf("runtime: close state file: %w", closeErr)
	}
	if commitErr != nil {
		commitErr = fmt.Errorf("%w: %w", ErrCommit, commitErr)
	}
	return rep, errors.Join(snapErr, commitErr, closeErr)
}

// handled counts the handler results of every pool so far.
func (r *Runtime) handled() uint64 {
	s, f := r.outcomes()
	return s + f
}

func (r *Runtime) outcomes() (succeeded, failed uint64) {
	for _, c := range r.order {
		st := c.pool.Stats()
		succeeded += st.Succeeded
		failed += st.Failed
	}
	return succeeded, failed
}
