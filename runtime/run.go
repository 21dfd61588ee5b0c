package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff/pool"
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
	if err := r.checkIdentity(store); err != nil {
		return rep, errors.Join(err, store.Close())
	}
	r.store = store
	r.storeOpen.Store(true)

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
	bg.Go(func() { r.watchBudget(delCtx) })
	// The scheduler and key releases feed the pools: they stop at the
	// quiesce, with fetching.
	feedCtx, stopFeeds := context.WithCancel(context.Background())
	r.relMu.Lock()
	r.relCtx = feedCtx
	r.relMu.Unlock()
	var feeds sync.WaitGroup
	stopFeeding := func() {
		r.relMu.Lock()
		stopFeeds()
		r.relMu.Unlock()
		feeds.Wait()
		r.releases.Wait()
	}
	r.openDLQ()
	r.accepting.Store(true)

	if err := r.recover(runCtx, rep); err != nil {
		r.accepting.Store(false)
		stopFeeding()
		stopDeletes()
		bg.Wait()
		// Nothing was fetched; pools hold only re-pushed messages, which
		// are still in the state file.
		for _, c := range r.order {
			res := c.pool.Stop(0, err)
			for _, it := range slices.Concat(res.Unstarted, res.Waiting, res.Interrupted) {
				r.leftPool(it)
			}
		}
		r.closeDLQ()
		r.storeOpen.Store(false)
		return rep, errors.Join(err, r.store.Close())
	}
	r.log.Info("recovery finished", "repushed", rep.Repushed, "quarantined", rep.Quarantined,
		"unknown_class", rep.UnknownClass, "blocked_keys", rep.BlockedKeys, "took", time.Since(started))
	feeds.Go(func() { r.sched.run(feedCtx) })

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
	return r.stop(rep, func() { cancelFetch(); stopFeeding() }, &consumer, cg, func() { stopDeletes(); bg.Wait() })
}

// checkIdentity records the group and the instance in a new state file,
// and refuses a file of another group. A file of another instance of the
// same group is taken over with a warning.
func (r *Runtime) checkIdentity(store *snapshot.Store) error {
	var group []byte
	var ok bool
	err := store.View(func(tx *snapshot.Tx) (err error) { group, ok, err = tx.Meta(snapshot.MetaGroup); return err })
	if err != nil {
		return fmt.Errorf("runtime: check state file identity: %w", err)
	}
	switch {
	case ok && r.cfg.Group != "" && string(group) != r.cfg.Group:
		return fmt.Errorf("%w: %s belongs to group %q, configured group is %q", ErrOtherGroup, store.Path(), group, r.cfg.Group)
	case !ok && r.cfg.Group != "":
		if err := store.Update(func(tx *snapshot.Tx) error { return tx.PutMeta(snapshot.MetaGroup, []byte(r.cfg.Group)) }); err != nil {
			return fmt.Errorf("runtime: record group in state file: %w", err)
		}
	}
	var inst []byte
	err = store.View(func(tx *snapshot.Tx) (err error) { inst, ok, err = tx.Meta(snapshot.MetaInstance); return err })
	if err != nil {
		return fmt.Errorf("runtime: check state file identity: %w", err)
	}
	if ok && string(inst) == r.cfg.Instance {
		return nil
	}
	if ok {
		r.log.Warn("state file was written by another instance of the group; taking it over", "path", store.Path(),
			"group", r.cfg.Group, "previous_instance", string(inst), "instance", r.cfg.Instance)
	}
	if err := store.Update(func(tx *snapshot.Tx) error { return tx.PutMeta(snapshot.MetaInstance, []byte(r.cfg.Instance)) }); err != nil {
		return fmt.Errorf("runtime: record instance in state file: %w", err)
	}
	return nil
}

func (r *Runtime) startOffset() int64 {
	if r.cfg.StartOffset == StartLast {
		return kafka.LastOffset
	}
	return kafka.FirstOffset
}

// recover restores the state of ordered classes' keys and re-pushes the
// pending records of the state file into their pools, oldest first. A
// record stays in the file until its message is done, so a crash here
// loses nothing. A stop during recovery leaves the records not yet pushed
// where they are.
func (r *Runtime) recover(ctx context.Context, rep *Report) error {
	if err := r.restoreKeys(rep); err != nil {
		return fmt.Errorf("runtime: recover: %w", err)
	}
	// Keys left releasing (parked messages, no blocker) start releasing
	// once the saved messages are pushed.
	defer r.startRestoredReleases()
	// The records are pushed batch by batch while the next ones are
	// still being read from the file.
	var failed error
	stopped := false
	bad, err := r.store.ScanPending(func(batch []snapshot.Entry) bool {
		for i := range batch {
			pushed, err := r.repush(ctx, &batch[i], rep)
			if err != nil {
				failed = err
				return false
			}
			if !pushed {
				stopped = true
				return false
			}
		}
		return true
	})
	if failed != nil {
		return fmt.Errorf("runtime: recover: %w", failed)
	}
	if err != nil {
		return fmt.Errorf("runtime: recover: %w", err)
	}
	rep.Quarantined = len(bad)
	for _, de := range bad {
		r.log.Error("undecodable record moved to quarantine", "err", de)
	}
	if stopped {
		r.log.Info("recovery stopped by the stop; the rest stays in the state file", "repushed", rep.Repushed)
	}
	return nil
}

// repush pushes the pending record e into the pool of its class, or makes
// it a dead letter when its class is not configured. It reports false
// when the stop ended the push, and an error when the dead letter could
// not be written.
func (r *Runtime) repush(ctx context.Context, e *snapshot.Entry, rep *Report) (bool, error) {
	c := r.classes[e.Record.Message.Class]
	if c == nil {
		key := e.Key
		if !r.orphan(e.Record, func(tx *snapshot.Tx) error { return tx.DeletePending(key) }) {
			return false, fmt.Errorf("could not dead-letter a message of unknown class %q", e.Record.Message.Class)
		}
		rep.UnknownClass++
		return true, nil
	}
	it := fromRecord(e.Record, fromPending)
	it.key = e.Key
	if c.cfg.Ordered && e.Record.Reason == snapshot.ReasonRequeued {
		// A dead letter requeued offline: it is older than the messages
		// parked behind it, so it runs first and its success releases
		// them.
		r.blockIfReleasing(c, it)
	}
	if err := c.pool.Submit(ctx, it); err != nil {
		return false, nil
	}
	rep.Repushed++
	return true, nil
}

// orphan makes a saved message whose class is not configured a dead
// letter, removing its record with del in the same transaction.
func (r *Runtime) orphan(rec snapshot.Record, del func(tx *snapshot.Tx) error) bool {
	rec.Reason = reasonUnknown
	rec.Err = fmt.Sprintf("runtime: class %q is not configured", rec.Message.Class)
	rec.SavedAt = time.Now()
	err := r.store.Update(func(tx *snapshot.Tx) error {
		if _, err := tx.SaveDead(rec); err != nil {
			return err
		}
		return del(tx)
	})
	if err != nil {
		r.log.Error("message of unknown class not dead-lettered", "class", rec.Message.Class, "id", rec.Message.ID, "err", err)
		return false
	}
	r.inc(nil, outDeadLettered)
	r.log.Warn("saved message of an unknown class became a dead letter", "class", rec.Message.Class, "id", rec.Message.ID)
	return true
}

// unparkStrays moves parked messages whose class is gone to the dead
// letters, and those whose class is no longer ordered to pending, where the
// recovery re-pushes them.
func (r *Runtime) unparkStrays() error {
	var parked []snapshot.ParkedCount
	var bad []*snapshot.DecodeError
	err := r.store.View(func(tx *snapshot.Tx) (err error) { parked, bad, err = tx.ParkedKeys(); return err })
	if err == nil && len(bad) > 0 {
		err = r.store.Update(func(tx *snapshot.Tx) error { return tx.Quarantine(bad...) })
	}
	if err != nil {
		return err
	}
	for _, pk := range parked {
		c := r.classes[pk.Class]
		if c != nil && c.cfg.Ordered {
			continue
		}
		var entries []snapshot.ParkedEntry
		err := r.store.View(func(tx *snapshot.Tx) (err error) { entries, bad, err = tx.Parked(pk.Class, pk.Key); return err })
		if err == nil && len(bad) > 0 {
			err = r.store.Update(func(tx *snapshot.Tx) error { return tx.Quarantine(bad...) })
		}
		if err != nil {
			return err
		}
		err = r.store.Update(func(tx *snapshot.Tx) error {
			for _, e := range entries {
				rec := e.Record
				var err error
				if c == nil {
					rec.Reason = reasonUnknown
					rec.Err = fmt.Sprintf("runtime: class %q is not configured", pk.Class)
					_, err = tx.SaveDead(rec)
				} else {
					_, err = tx.SavePending(rec)
				}
				if err != nil {
					return err
				}
				if err := tx.DeleteParked(e.Key); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		r.log.Warn("parked messages of a class that is gone or no longer ordered moved", "class", pk.Class,
			"count", len(entries), "to_dead_letters", c == nil)
	}
	return nil
}

// restoreKeys rebuilds the blocked and releasing keys of ordered classes
// from the state file: a dead letter or a message waiting for redelivery
// blocks its key; a key with parked messages and no blocker is released.
func (r *Runtime) restoreKeys(rep *Report) error {
	if err := r.unparkStrays(); err != nil {
		return err
	}
	ordered := false
	for _, c := range r.order {
		ordered = ordered || c.cfg.Ordered
	}
	if !ordered {
		return nil
	}
	block := func(rec snapshot.Record) {
		c := r.classes[rec.Message.Class]
		if c == nil || !c.cfg.Ordered {
			return
		}
		r.block(c, &item{msg: rec.Message})
	}
	for after := uint64(0); ; {
		var page []snapshot.Entry
		var next uint64
		err := r.store.View(func(tx *snapshot.Tx) (err error) { page, next, err = tx.DeadPage("", after, 1000); return err })
		if err != nil {
			return err
		}
		for _, e := range page {
			block(e.Record)
		}
		if next == 0 {
			break
		}
		after = next
	}
	var after snapshot.DelayedKey
	for {
		var page []snapshot.DelayedEntry
		err := r.store.View(func(tx *snapshot.Tx) (err error) { page, err = tx.ListDelayed(after, 1000); return err })
		if err != nil {
			return err
		}
		for _, e := range page {
			if e.Record.Reason == reasonRedelivery {
				block(e.Record)
			}
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Key
	}
	var parked []snapshot.ParkedCount
	var bad []*snapshot.DecodeError
	err := r.store.View(func(tx *snapshot.Tx) (err error) { parked, bad, err = tx.ParkedKeys(); return err })
	if err == nil && len(bad) > 0 {
		err = r.store.Update(func(tx *snapshot.Tx) error { return tx.Quarantine(bad...) })
	}
	if err != nil {
		return err
	}
	for _, pk := range parked {
		c := r.classes[pk.Class]
		if c == nil || !c.cfg.Ordered {
			continue // moved by unparkStrays
		}
		c.parking.mu.Lock()
		if c.parking.keys[string(pk.Key)] == nil {
			c.parking.keys[string(pk.Key)] = &keyState{releasing: true, release: 1}
		}
		c.parking.mu.Unlock()
	}
	for _, c := range r.order {
		if c.parking != nil {
			c.parking.mu.Lock()
			rep.BlockedKeys += len(c.parking.keys)
			c.parking.mu.Unlock()
		}
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
	r.metrics.setPhase("quiesce", rep.Quiesce)
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
	r.metrics.setPhase("drain", rep.Drain)
	rep.Drained = r.handled() - before
	if rep.DrainTimedOut {
		r.log.Warn("drain ended with work left", "phase", "drain", "drained", rep.Drained, "took", rep.Drain)
	} else {
		r.log.Info("stop phase done", "phase", "drain", "drained", rep.Drained, "took", rep.Drain)
	}

	// 3. Hard stop: take out what has not started, cancel what runs.
	phase = time.Now()
	results := make([]pool.StopResult[*item], len(r.order))
	var stops sync.WaitGroup
	for i, c := range r.order {
		stops.Go(func() { results[i] = c.pool.Stop(r.cfg.HardStopGrace, ErrStopping) })
	}
	stops.Wait()
	type leftover struct {
		it     *item
		reason string
	}
	var left []leftover
	for i, res := range results {
		rep.Unstarted += len(res.Unstarted)
		rep.Interrupted += len(res.Interrupted)
		rep.Waiting += len(res.Waiting)
		rep.Stragglers += res.Stragglers
		if r.order[i].cfg.StopPolicy == StopRedeliver {
			// Kafka messages stay unsettled: the commit stops before
			// them and the partition's next owner reads them again.
			res.Interrupted = r.giveBack(res.Interrupted, &rep.GivenBack)
			res.Waiting = r.giveBack(res.Waiting, &rep.GivenBack)
			res.Unstarted = r.giveBack(res.Unstarted, &rep.GivenBack)
		}
		// Interrupted first, then those waiting out a backoff: each
		// started before any unstarted message of its key, and the
		// restart re-pushes in save order.
		for _, it := range res.Interrupted {
			left = append(left, leftover{it, reasonInterrupted})
		}
		for _, it := range res.Waiting {
			left = append(left, leftover{it, reasonBackoff})
		}
		for _, it := range res.Unstarted {
			left = append(left, leftover{it, reasonUnstarted})
		}
	}
	for _, l := range left {
		r.leftPool(l.it)
	}
	rep.HardStop = time.Since(phase)
	r.metrics.setPhase("hard_stop", rep.HardStop)
	if rep.Stragglers > 0 {
		r.log.Warn("handlers did not return by the hard-stop grace; recorded as interrupted",
			"phase", "hard_stop", "stragglers", rep.Stragglers, "grace", r.cfg.HardStopGrace)
	}
	r.log.Info("stop phase done", "phase", "hard_stop", "unstarted", rep.Unstarted,
		"interrupted", rep.Interrupted, "waiting", rep.Waiting, "took", rep.HardStop)

	// 4. Snapshot: ONE transaction saves what is left and forgets the
	// re-pushed messages that are done.
	phase = time.Now()
	stopBackground()
	now := time.Now()
	var recs []snapshot.Record
	var saved []*item
	var updates []*item // persisted messages whose attempt count moved
	for _, l := range left {
		switch {
		case !l.it.src.persisted():
			recs = append(recs, l.it.record(l.reason, nil, now))
			saved = append(saved, l.it)
		case l.reason == reasonBackoff:
			updates = append(updates, l.it)
		}
		// Otherwise its record is still there, unchanged.
	}
	del := r.takeDone()
	if r.beforeSnapshot != nil {
		r.beforeSnapshot(r.store)
	}
	var snapErr error
	if len(recs) > 0 || !del.empty() || len(updates) > 0 {
		err := r.store.Update(func(tx *snapshot.Tx) error {
			if _, err := tx.SavePending(recs...); err != nil {
				return err
			}
			if err := del.delete(tx); err != nil {
				return err
			}
			for _, it := range updates {
				if err := putSource(tx, it, it.record(reasonBackoff, nil, now)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			snapErr = fmt.Errorf("runtime: snapshot of %d messages failed; their offsets are not committed and Kafka will deliver them again: %w", len(recs), err)
			r.log.Error("snapshot failed", "phase", "snapshot", "messages", len(recs), "err", err)
		}
	}
	if snapErr == nil {
		rep.Snapshotted = len(recs)
		for _, it := range saved {
			if it.src == fromKafka {
				it.tr.settle(it.slot)
			}
		}
	}
	rep.Snapshot = time.Since(phase)
	r.metrics.setPhase("snapshot", rep.Snapshot)
	r.metrics.setSnapshot(rep.Snapshotted)
	r.log.Info("stop phase done", "phase", "snapshot", "saved", rep.Snapshotted, "took", rep.Snapshot)

	// 5. Commit what is done or saved.
	phase = time.Now()
	commitErr := r.finalCommit()
	rep.Commit = time.Since(phase)
	r.metrics.setPhase("commit", rep.Commit)
	switch {
	case errors.Is(commitErr, errGenerationEnded):
		// A rebalance ended the generation during the stop; its end
		// committed what was settled then, and the partitions' new owners
		// read the rest again. Nothing is unsafe, so the stop is clean.
		r.log.Warn("generation ended during the stop; messages settled after it will be delivered again to the partitions' new owners",
			"phase", "commit")
		commitErr = nil
	case commitErr != nil:
		r.log.Warn("final commit failed; Kafka will deliver the uncommitted messages again", "phase", "commit", "err", commitErr)
	default:
		r.log.Info("stop phase done", "phase", "commit", "took", rep.Commit)
	}

	// 6. Let the partition readers finish closing (each bounded by
	// FetchMaxWait plus a second; they have been closing since the
	// quiesce), leave the group and close the state file.
	phase = time.Now()
	r.closing.Wait()
	if cg != nil {
		closed := make(chan struct{})
		go func() { cg.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(leaveTimeout):
			r.log.Warn("leaving the group did not finish in time; the broker will expire the session", "phase", "leave", "waited", leaveTimeout)
		}
	}
	r.closeDLQ()
	r.storeOpen.Store(false)
	closeErr := r.store.Close()
	rep.Leave = time.Since(phase)
	r.metrics.setPhase("leave", rep.Leave)
	r.fillCounts(rep)
	rep.Stop = time.Since(begin)
	r.log.Info("stop complete", "drained", rep.Drained, "snapshotted", rep.Snapshotted, "unstarted", rep.Unstarted,
		"interrupted", rep.Interrupted, "stragglers", rep.Stragglers, "succeeded", rep.Succeeded, "dead_lettered", rep.DeadLettered, "retried", rep.Retried,
		"repushed", rep.Repushed, "took", rep.Stop)
	if closeErr != nil {
		closeErr = fmt.Errorf("runtime: close state file: %w", closeErr)
	}
	if commitErr != nil {
		commitErr = fmt.Errorf("%w: %w", ErrCommit, commitErr)
	}
	return rep, errors.Join(snapErr, commitErr, closeErr)
}

// giveBack returns the items of its that did not come from Kafka, and
// counts the others in n, releasing their ties to the pool: they stay
// unsettled in their trackers.
func (r *Runtime) giveBack(its []*item, n *int) []*item {
	kept := its[:0]
	for _, it := range its {
		if it.src != fromKafka {
			kept = append(kept, it)
			continue
		}
		*n++
		r.leftPool(it)
	}
	return kept
}

// handled counts the messages that left the pools for good so far.
func (r *Runtime) handled() uint64 {
	return r.total(outSucceeded) + r.total(outDeadLettered) + r.total(outRedelivered) +
		r.total(outParked) + r.total(outDeferred)
}

// putSource overwrites, inside tx, the record a persisted item came from.
func putSource(tx *snapshot.Tx, it *item, rec snapshot.Record) error {
	switch it.src {
	case fromPending:
		return tx.PutPending(it.key, rec)
	case fromDelayed:
		return tx.PutDelayed(it.delayedKey, rec)
	case fromParked:
		return tx.PutParked(it.parkedKey, rec)
	case fromDead:
		rec.Reason = reasonFailed
		return tx.PutDead(it.key, rec)
	}
	return nil
}
