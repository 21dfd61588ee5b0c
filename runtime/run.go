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
// the services it started, by the stop phase that ends them, and the
// report. Its start steps are in this file, its stop phases in stop.go.
type runState struct {
	r   *Runtime
	rep *Report

	// ends is the services the start launched, by the phase of the stop
	// that ends them (see launch and stopPhases).
	ends [phaseCount][]service.Service

	// grace and cause are what the hard stop gives running handlers.
	grace time.Duration
	cause error
	// left is what the hard stop took out of the pools, for the snapshot.
	left []takenOut
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

// launch starts svc under ctx and has the stop end it at phase end. A
// service that did not start is not ended; its error is returned.
func (s *runState) launch(ctx context.Context, end stopPhase, svc service.Service) error {
	if err := svc.Start(ctx); err != nil {
		return err
	}
	s.endAt(end, svc)
	return nil
}

// endAt has the stop end svc, started or not, at phase end.
func (s *runState) endAt(end stopPhase, svc service.Service) {
	s.ends[end] = append(s.ends[end], svc)
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
	runCtx, cancelRun := r.life.stopContext()
	defer cancelRun()

	s.startBackground()
	// The fetching (consumer group and share classes) ends at the
	// quiesce, joined or not.
	s.endAt(phaseQuiesce, r.kafka)
	r.life.accepting.Store(true)
	r.life.schedules.open()

	if err := r.kafka.cfg.conn.checkBrokers(runCtx, len(r.classes.topics) > 0 || r.hasShare(), r.dlq != nil); err != nil {
		return err
	}
	present, err := s.openKafka(runCtx)
	if err != nil {
		return err
	}
	if err := s.recover(runCtx, present, started); err != nil {
		return err
	}
	if err := s.startFeeds(runCtx, present); err != nil {
		return err
	}
	if runCtx.Err() != nil {
		return nil // a stop was requested: never ready
	}
	r.ready.started.Store(true)
	r.log.Info("running", "classes", len(r.classes.order), "topics", len(r.classes.topics), "group", r.cfg.Group, "instance", r.cfg.Instance,
		"group_protocol", r.cfg.GroupProtocol, "version", handoff.Version)
	return nil
}

// startBackground launches the loops that use the state file, ended at
// the snapshot, and the dead-letter publisher, ended at the leave.
func (s *runState) startBackground() {
	r := s.r
	bg := context.Background()
	// None of these fails to start.
	_ = s.launch(bg, phaseSnapshot, service.NewLoop(func(ctx context.Context) {
		alive := r.alive.start("state file deleter", snapshot.DeleteInterval)
		defer alive.end()
		r.state.store.RunDeletes(ctx, &r.deletes, r.log, alive.beat, r.restore.doneDeleted, r.state.writeFailed)
	}))
	_ = s.launch(bg, phaseSnapshot, service.NewLoop(func(ctx context.Context) {
		alive := r.alive.start("state file watch", watchInterval)
		defer alive.end()
		r.state.watch(ctx, alive.beat)
	}))
	_ = s.launch(bg, phaseSnapshot, r.newDrainWatch())
	_ = s.launch(bg, phaseSnapshot, r.fail)
	_ = s.launch(bg, phaseQuiesce, &r.releases)
	if r.dlq = r.newDLQ(); r.dlq != nil {
		_ = s.launch(bg, phaseLeave, r.dlq)
	}
	_ = s.launch(bg, phaseSnapshot, r.retain)
}

// openKafka makes the Kafka client, checks the topics and opens the
// changelog, when there are topics; it returns the topics present. With
// topics the client comes first: the changelog needs the topics'
// partitions before the recovery can tell which records belong to no
// partition (those it restores now; the others come back with their
// partitions' assignments).
func (s *runState) openKafka(runCtx context.Context) ([]string, error) {
	r := s.r
	var present []string
	if len(r.classes.topics) > 0 && runCtx.Err() == nil {
		if err := r.kafka.open(); err != nil {
			return nil, fmt.Errorf("runtime: %w", err)
		}
		var err error
		if present, err = r.kafka.checkTopics(runCtx); err != nil {
			return nil, err
		}
		r.ready.topicsOK.Store(len(present) == len(r.classes.topics))
		if !r.cfg.LocalStateOnly && runCtx.Err() == nil {
			if err := r.clog.open(runCtx, r.cfg.changelogConfig(r.kafka.cfg.conn.clientDial(), r.log), r.kafka.client, r.classes.order, present); err != nil {
				return nil, err
			}
			if err := r.clog.loadPauses(runCtx, r.classes.byName); err != nil {
				return nil, err
			}
			r.state.clog = r.clog
			_ = s.launch(context.Background(), phaseSnapshot, service.NewLoop(r.clog.retryResend))
		}
	}
	if r.cfg.LocalStateOnly {
		// What this run writes reaches no changelog: a later start with
		// it sends the file's records (snapshot.State.OpenChangelog).
		if err := r.state.clearChangelogComplete(); err != nil {
			return nil, fmt.Errorf("runtime: %w", err)
		}
	}
	return present, nil
}

// recover re-pushes the state file's saved messages into their pools,
// before any fetch; see recovery.
func (s *runState) recover(runCtx context.Context, present []string, started time.Time) error {
	r := s.r
	rec := recovery{state: r.state, classes: r.classes.byName, order: r.classes.order, fail: r.fail, orphans: &r.fail.orphans,
		log: r.log, strays: true}
	rec.want = r.clog.startRecovers()
	rec.resume, rec.elsewhere = r.restore.resumes, r.restore.resumes.run(func(ctx context.Context) []kclient.Partition {
		return r.kafka.partitions(ctx, present)
	})
	if err := rec.run(runCtx, s.rep); err != nil {
		return err
	}
	rep := s.rep
	r.log.Info("recovery finished", "repushed", rep.Repushed, "quarantined", rep.Quarantined,
		"unknown_class", rep.UnknownClass, "blocked_keys", rep.BlockedKeys, "took", time.Since(started),
		"changelog", r.clog.on())
	return nil
}

// startFeeds launches what feeds the pools besides the recovery, ended
// at the quiesce: the scheduler, the dead-letter operations, the follow
// of other instances' writes, the consumer group's fetching and the
// share classes' members.
func (s *runState) startFeeds(runCtx context.Context, present []string) error {
	r := s.r
	bg := context.Background()
	_ = s.launch(bg, phaseQuiesce, r.sched)
	_ = s.launch(bg, phaseQuiesce, r.ops)
	_ = s.launch(bg, phaseQuiesce, service.NewLoop(r.restore.follow))
	if len(r.classes.topics) > 0 && runCtx.Err() == nil && r.clog.newFileLosesState() {
		r.kafka.checkNewFile(runCtx, s.newFile, r.cfg.StatePath, present)
	}
	if runCtx.Err() == nil {
		if err := r.kafka.Start(bg); err != nil { // joins the topics present, if any
			return fmt.Errorf("runtime: %w", err)
		}
	}
	if r.hasShare() && runCtx.Err() == nil {
		if err := s.startShares(runCtx); err != nil { // share.go
			if runCtx.Err() != nil {
				// A stop asked while a share class joined ended its
				// requests: a stop, not a failed start (exit 2).
				return nil
			}
			return err
		}
	}
	return nil
}
