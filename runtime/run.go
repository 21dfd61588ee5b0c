package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/runtime/internal/service"
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
// A start that fails before fetching (the state file, the brokers, the
// topics, the recovery) returns an error matching [ErrStart], on one line
// (several causes, such as two classes without topics, are joined with
// "; "). Run does not log that error: its caller reports it, once. What
// the start had begun is stopped by the stop's phases, logged at Debug
// (at Info, as one line, when they handled or saved messages), and the
// Report counts only what that teardown did: no run happened.
//
// Run installs no signal handler; see [HandleSignals]. It may be called
// once; a second call returns [ErrRunTwice].
func (r *Runtime) Run(ctx context.Context) (rep *Report, err error) {
	if !r.life.state.CompareAndSwap(stateNew, stateRunning) {
		return nil, ErrRunTwice
	}
	s := &runState{r: r, rep: &Report{}}
	defer func() {
		r.life.err = err
		r.life.state.Store(stateDone)
		close(r.life.done)
	}()
	stopWatch := context.AfterFunc(ctx, r.life.requestStop)
	defer stopWatch()

	if err := s.open(); err != nil {
		return s.rep, startError{err}
	}
	if err := s.start(); err != nil {
		// Nothing was fetched: the pools hold only re-pushed messages,
		// which are still in the state file, and submitted ones, which
		// the stop saves. The drain is skipped.
		r.life.skipDrain()
		s.startFailed = true
		_, stopErr := s.stop(0, ErrStopping)
		return s.rep, startError{errors.Join(err, stopErr)}
	}
	<-r.life.stopCh
	return s.stop(r.cfg.HardStopGrace, ErrStopping)
}

// runState is what one Run owns from its start to the end of its stop:
// the loops it started, in the order the stop ends them, and the report.
// Its start steps are in this file, its stop phases in stop.go.
type runState struct {
	r   *Runtime
	rep *Report

	// stopFetch ends the consumer group's fetching (group.go), at the
	// quiesce.
	stopFetch context.CancelFunc

	// The scheduler feeds the pools besides fetching (and the key
	// releases, r.releases); it ends at the quiesce too.
	feeds service.Loops

	// Background loops that use the state file: the batched deletes, the
	// drain-estimate watcher and the retries of unsaved failed messages.
	// They end at the snapshot.
	background service.Loops

	// left is what the hard stop took out of the pools, for the snapshot.
	left []leftover
	// deadline is when the stop's budget runs out (see stopBudget).
	deadline time.Time
	// kept is what the state file holds at the end of the stop, for its
	// last log line (kept.go).
	kept slog.Attr
	// newFile is whether the state file was new when open opened it
	// (empty: no record, no meta; see newfile.go).
	newFile bool
	// startFailed is set when the stop tears down a start that failed:
	// no run happened, and its error is Run's to return, not the stop's
	// to log.
	startFailed bool
	// Errors of the stop's phases, joined into Run's.
	snapErr, commitErr, closeErr error
}

// open is the start's first step: it opens the state file and checks
// that it belongs to this group.
func (s *runState) open() error {
	r := s.r
	store, err := snapshot.Open(r.cfg.StatePath, snapshot.Options{LockTimeout: r.cfg.LockTimeout})
	if err != nil {
		return fmt.Errorf("runtime: open state file: %w", err)
	}
	// Whether the file is new is read before this run writes its meta.
	if s.newFile, err = fileEmpty(store); err != nil {
		return errors.Join(fmt.Errorf("runtime: open state file: %w", err), store.Close())
	}
	if err := checkIdentity(store, r.cfg.Group, r.cfg.Instance, r.log); err != nil {
		return errors.Join(err, store.Close())
	}
	if err := renameClasses(store, r.cfg.ClassRenames, r.log); err != nil {
		return errors.Join(err, store.Close())
	}
	if err := recordClasses(store, r.cfg.Classes); err != nil {
		return errors.Join(err, store.Close())
	}
	// The pauses apply before the recovery pushes anything.
	if err := loadPauses(store, r.classes.byName, r.log); err != nil {
		return errors.Join(err, store.Close())
	}
	r.state.opened(store)
	return nil
}

// start recovers the state file into the pools, then starts the
// scheduler and joins the consumer group. A stop requested meanwhile ends
// the recovery early (what is not pushed stays in the file) and skips the
// join. It returns an error when the brokers refused the connection (see
// connection.checkBrokers), the client could not be made or the recovery
// failed.
func (s *runState) start() error {
	r := s.r
	started := time.Now()
	// runCtx ends when a stop is requested; it bounds the recovery push.
	runCtx, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	go func() {
		select {
		case <-r.life.stopCh:
			cancelRun()
		case <-runCtx.Done():
		}
	}()

	s.background.Start(func(ctx context.Context) {
		alive := r.alive.start("state file deleter", snapshot.DeleteInterval)
		defer alive.end()
		r.state.store.RunDeletes(ctx, &r.deletes, r.log, alive.beat, func(d snapshot.DoneRecords) {
			r.sched.forget(d.Delayed...)
			r.clog.unhold(d.Pending...)
		}, r.state.writeFailed)
	})
	s.background.Start(func(ctx context.Context) {
		alive := r.alive.start("state file watch", watchInterval)
		defer alive.end()
		r.state.watch(ctx, alive.beat)
	})
	watch := drainWatch{stats: r.Stats, metrics: r.metrics, log: r.log, drainTimeout: r.cfg.DrainTimeout, alive: &r.alive}
	s.background.Start(watch.run)
	s.background.Start(r.fail.retryUnsaved)
	fetchCtx, stopFetch := context.WithCancel(context.Background())
	s.stopFetch = stopFetch
	r.releases.open()
	r.openDLQ()
	s.background.Start(func(ctx context.Context) {
		alive := r.alive.start("dead-letter retention", r.retainEvery)
		defer alive.end()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-r.life.stopCh:
				cancel()
			case <-ctx.Done():
			}
		}()
		r.retain.run(ctx, r.retainEvery, alive.beat)
	})
	r.life.accepting.Store(true)
	r.life.schedules.open()

	if err := r.conn.checkBrokers(runCtx, len(r.classes.topics) > 0 || r.hasShare(), r.dlq != nil); err != nil {
		return err
	}
	// With topics the client comes first: the changelog needs the
	// topics' partitions before the recovery can tell which records
	// belong to no partition (those it restores now; the others come back
	// with their partitions' assignments).
	var present []string
	if len(r.classes.topics) > 0 && runCtx.Err() == nil {
		if err := r.kafka.open(); err != nil {
			return fmt.Errorf("runtime: %w", err)
		}
		var err error
		if present, err = r.kafka.checkTopics(runCtx); err != nil {
			return err
		}
		r.ready.topicsOK.Store(len(present) == len(r.classes.topics))
		if !r.cfg.LocalStateOnly && runCtx.Err() == nil {
			if err := r.clog.open(runCtx, r.cfg.changelogConfig(r.conn.clientDial(), r.log), r.kafka.client, r.classes.order, present); err != nil {
				return err
			}
			if err := r.clog.loadPauses(runCtx, r.classes.byName); err != nil {
				return err
			}
			r.state.awaitChangelog = r.clog.await
			s.background.Start(r.clog.retryResend)
		}
	}
	if r.cfg.LocalStateOnly {
		// What this run writes reaches no changelog: a later start with
		// it sends the file's records (stateLog.sendUnlogged).
		if err := r.state.clearChangelogComplete(); err != nil {
			return fmt.Errorf("runtime: %w", err)
		}
	}
	rec := recovery{state: r.state, classes: r.classes.byName, order: r.classes.order, orphan: r.fail.orphan, orphans: &r.fail.orphans,
		log: r.log, strays: true}
	rec.want = r.clog.startRecovers()
	rec.resume, rec.elsewhere = r.resumes, r.resumes.run(func(ctx context.Context) []kclient.Partition {
		return r.kafka.partitions(ctx, present)
	})
	if err := rec.run(runCtx, s.rep); err != nil {
		return err
	}
	rep := s.rep
	r.log.Info("recovery finished", "repushed", rep.Repushed, "quarantined", rep.Quarantined,
		"unknown_class", rep.UnknownClass, "blocked_keys", rep.BlockedKeys, "took", time.Since(started),
		"changelog", r.clog.on())
	s.feeds.Start(r.sched.run)
	s.feeds.Start(r.ops.run)
	if r.clog.on() {
		s.feeds.Start(r.restore.follow)
	}
	if len(r.classes.topics) > 0 && runCtx.Err() == nil {
		if !r.clog.on() {
			// With the changelog a new file is what a new pod starts
			// with: its partitions' state comes back from the changelog.
			r.kafka.checkNewFile(runCtx, s.newFile, r.cfg.StatePath, present)
		}
		if runCtx.Err() == nil {
			if err := r.kafka.join(fetchCtx, present); err != nil {
				return fmt.Errorf("runtime: %w", err)
			}
		}
	}
	if r.hasShare() && runCtx.Err() == nil {
		if err := r.shareStart(runCtx, fetchCtx); err != nil { // share.go
			if runCtx.Err() != nil {
				// A stop asked while a share class joined ended its
				// requests: a stop, not a failed start (exit 2).
				return nil
			}
			return err
		}
	}
	if runCtx.Err() != nil {
		return nil // a stop was requested: never ready
	}
	r.ready.started.Store(true)
	r.log.Info("running", "classes", len(r.classes.order), "topics", len(r.classes.topics), "group", r.cfg.Group, "instance", r.cfg.Instance,
		"group_protocol", r.cfg.GroupProtocol, "version", handoff.Version)
	return nil
}
