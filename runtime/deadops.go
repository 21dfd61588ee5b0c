package runtime

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/handoff-go/handoff/internal/deadop"
	"github.com/handoff-go/handoff/runtime/internal/service"
	"github.com/handoff-go/handoff/snapshot"
)

// The group's dead-letter operations: a bulk requeue or discard asked
// through any instance (Runtime.StartDeadOp) is a Request record in the
// changelog's meta topic (package internal/deadop). Every instance
// follows that topic (with the pauses, pausemeta.go) into its table of
// recent operations (deadOps), and each carries out its part: the
// request's IDs it owns that are still dead letters and that failed
// before the request was made, at its share of the request's rate,
// through Requeue's and Discard's own paths, writing its progress as a
// Status record. A partition that moves takes its IDs to its next owner,
// which looks for them again whenever what it owns changes. Without the
// changelog the table is this instance's only, and it carries out every
// ID itself.

// DeadOp is a bulk requeue or discard of a selection of the group's dead
// letters ([Runtime.StartDeadOp]).
type DeadOp struct {
	// Action is "requeue" or "discard".
	Action string
	// Filter selects the dead letters, as for [Runtime.GroupDeadLetters]
	// (its Newest is ignored: the oldest are taken first). Ignored when
	// IDs is set.
	Filter DeadFilter
	// IDs, when not empty, names exactly the dead letters to act on
	// (those of them that are dead letters of the group now).
	IDs []string
	// Rate is the dead letters acted on per second for the whole group;
	// 0 is no limit.
	Rate float64
	// Limit takes at most this many of the selection, oldest first; 0
	// takes all, up to deadop.MaxIDs (a larger selection is refused).
	Limit int
	// DryRun counts the selection and returns a sample of it, changing
	// and writing nothing.
	DryRun bool
	// Who asked, for the audit trail: a token's name or a client's
	// address.
	Who string
}

// States of a [DeadOpStatus].
const (
	DeadOpDryRun   = "dry-run"
	DeadOpRunning  = "running"
	DeadOpDone     = "done"
	DeadOpCanceled = "canceled"
)

// DeadOpStatus is an operation as every instance shows it: the request
// and its owners' progress, as far as this instance has followed the meta
// topic (about a second behind the owners).
type DeadOpStatus struct {
	ID     string
	Action string
	Filter DeadFilter
	// Matched is the number of dead letters it names (a dry run's: would
	// name).
	Matched int
	// Sample is a dry run's first dead letters (at most 20), with their
	// owners.
	Sample []GroupDeadLetter
	Rate   float64
	Limit  int
	// Who asked, through which instance ("cli" for the CLI).
	Who, Via string
	Started  time.Time
	// The owners' counts summed (deadop.Progress): Done acted on
	// (FailedAgain of them requeued and dead letters again), Failed
	// acted on with an error, Left still to do by the owners that
	// report, Skipped named ones that were no longer dead letters (or
	// failed again since the request) when their turn came, Unreported
	// those no owner has reported on (on a partition between owners, or
	// gone before an owner looked).
	Done, Failed, FailedAgain, Left, Skipped, Unreported int
	// State is "dry-run", "running" (an owner reports its part running,
	// or none has reported yet), "done" or "canceled".
	State string
	// CanceledBy and CanceledAt say who cancelled it, and when; "" and
	// zero when nobody did.
	CanceledBy string
	CanceledAt time.Time
	// Owners is each owner's last status, by instance name.
	Owners []deadop.Status
}

// Tuning of the operations.
const (
	// opKeep bounds the operations an instance keeps in memory (the
	// audit trail it shows); older ones are forgotten unless running
	// here.
	opKeep = 50
	// opSample bounds a dry run's sample.
	opSample = 20
	// opStatusEvery is how often at most an owner writes its status
	// while it acts; opHeartbeat how often at least while running.
	opStatusEvery = 250 * time.Millisecond
	opHeartbeat   = 2 * time.Second
	// opFresh is how long another owner's running status counts in the
	// rate shares after this instance last received one.
	opFresh = 3 * opHeartbeat
	// opStartGrace is how long after its start an operation nobody has
	// reported on shows as running (the owners' first statuses are on
	// their way), besides opSettle.
	opStartGrace = deadop.StartGrace
	// opStartDelay is how long after it is asked a rate-limited
	// operation begins (Request.StartAt), so that every owner, which
	// follows the meta topic every followInterval, begins with the
	// others; the CLI's requests wait as long.
	opStartDelay = deadop.StartDelay
	// An operation forgotten (past opKeep), over and older than
	// opPruneAge has its records deleted from the meta topic by the
	// next StartDeadOp, opPruneBatch records a call; at most opPruneMax
	// wait.
	opPruneAge   = time.Hour
	opPruneBatch = 200
	opPruneMax   = 10000
	// opStopWrite bounds the last status write of a part the stop
	// ended.
	opStopWrite = 2 * time.Second
	// opMaxAge: an operation older than this is not looked at again.
	opMaxAge = 7 * 24 * time.Hour
	// opSettle bounds how long an owner waits, after its last requeue,
	// for the requeued messages to end, to count those that failed
	// again.
	opSettle = deadop.Settle
	// opScanEvery is how often the table looks for work: a request not
	// started here, or partitions that changed owner.
	opScanEvery = followInterval
)

// deadOps is this instance's table of the group's recent operations and
// its part in them. Safe for concurrent use.
type deadOps struct {
	service.Base // run, from Start to Stop
	r            *Runtime
	logs         *logBackoff // repeated failures' lines

	mu  sync.Mutex
	ops map[string]*opEntry
	// changed is closed, and replaced, at every change of the table.
	changed chan struct{}
	// ctx is the run's (nil before run, done after): workers start in
	// it.
	ctx    context.Context
	closed bool // the run ended: no worker starts
	wake   chan struct{}
	wg     sync.WaitGroup

	// pruned are the meta topic's keys of forgotten operations that
	// the next StartDeadOp deletes (prune).
	pruned [][]byte

	// counts of dead letters acted on, by action and outcome, for the
	// metric.
	acted [2][numOpOutcomes]atomic.Uint64

	// testHookPartEnd, when set by a test before the run, runs in a
	// worker once it told its status writer to stop, before it waits
	// for it.
	testHookPartEnd func()
}

// Outcomes of an act, the outcome label of handoff_dead_letter_ops_total.
type opOutcome int

const (
	opActed   opOutcome = iota // requeued or discarded
	opFailed                   // the requeue or discard failed
	opSkipped                  // no longer a dead letter, or failed again since the request
	numOpOutcomes
)

var opOutcomeNames = [numOpOutcomes]string{"done", "failed", "skipped"}

// opEntry is one operation of the table.
type opEntry struct {
	req    *deadop.Request
	cancel *deadop.Cancel
	// statuses are the owners' last, by instance; seen when this
	// instance received each.
	statuses map[string]deadop.Status
	seen     map[string]time.Time
	// This instance's part: working while a worker runs; stop ends it;
	// scanned is the ownership generation at which its last worker
	// found nothing left to do (-1: none yet); acted the IDs its workers
	// acted on (only a worker reads and writes it).
	working bool
	stop    context.CancelFunc
	scanned int64
	acted   map[string]bool
}

func newDeadOps(r *Runtime, logs *logBackoff) *deadOps {
	return &deadOps{r: r, logs: logs, ops: map[string]*opEntry{}, changed: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// notify wakes the waiters of a change; o.mu is held.
func (o *deadOps) notify() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// poke asks the run to look for work now.
func (o *deadOps) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Start runs the operations' loop (run) until Stop; see
// service.Service.
func (o *deadOps) Start(ctx context.Context) error { return o.StartLoop(ctx, o.run) }

// run is a feed of the run: it starts this instance's part of the
// operations it knows (now, every opScanEvery and when poked) until ctx
// ends, then waits for its workers, which end with ctx.
func (o *deadOps) run(ctx context.Context) {
	o.mu.Lock()
	o.ctx = ctx
	o.mu.Unlock()
	t := time.NewTicker(opScanEvery)
	defer t.Stop()
	for {
		o.schedule()
		select {
		case <-ctx.Done():
			o.mu.Lock()
			o.closed = true // no worker starts after: the wait below is the last
			o.mu.Unlock()
			o.wg.Wait()
			return
		case <-t.C:
		case <-o.wake:
		}
	}
}

// gen is the ownership generation: it moves whenever a partition is
// restored here or revoked.
func (o *deadOps) gen() int64 {
	return o.r.clog.cl().Generation()
}

// schedule starts a worker for each operation that may have work here:
// not cancelled, not too old, none running, and not looked at since what
// this instance owns last changed.
func (o *deadOps) schedule() {
	gen := o.gen()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ctx == nil || o.closed {
		return
	}
	for id, e := range o.ops {
		if e.working || e.cancel != nil || e.scanned == gen || time.Since(e.req.At) > opMaxAge {
			continue
		}
		ctx, stop := context.WithCancel(o.ctx)
		e.working, e.stop = true, stop
		o.wg.Go(func() {
			defer stop()
			o.work(ctx, id, e, gen)
		})
	}
}

// fromMeta applies a record of the meta topic, k and v, that is not a
// pause's; other keys are ignored, an undecodable operation's record is
// logged.
func (o *deadOps) fromMeta(k, v []byte) {
	rec, ok, err := deadop.Parse(k, v)
	if !ok {
		return
	}
	if err != nil {
		o.r.log.Error("undecodable dead-letter operation record in the changelog's meta topic skipped", "key", string(k), "err", err)
		return
	}
	o.apply(rec)
}

// apply puts a record of an operation into the table. Applying the same
// records again (the follow may read them twice) changes nothing.
func (o *deadOps) apply(rec deadop.Record) {
	o.mu.Lock()
	defer o.mu.Unlock()
	defer o.notify()
	e := o.ops[rec.Op]
	switch rec.Kind {
	case deadop.KindRequest:
		if rec.Request == nil {
			if e != nil && !e.working {
				delete(o.ops, rec.Op)
			}
			return
		}
		if e != nil {
			return
		}
		o.ops[rec.Op] = &opEntry{req: rec.Request, statuses: map[string]deadop.Status{}, seen: map[string]time.Time{},
			scanned: -1, acted: map[string]bool{}}
		o.trim()
		o.poke()
	case deadop.KindCancel:
		if e == nil || rec.Cancel == nil || e.cancel != nil {
			return
		}
		e.cancel = rec.Cancel
		if e.stop != nil {
			e.stop()
		}
	case deadop.KindStatus:
		if e == nil || rec.Status == nil {
			return
		}
		if old, ok := e.statuses[rec.Instance]; ok && old.At.After(rec.Status.At) {
			return // an older one, read back after a newer one was kept
		}
		e.statuses[rec.Instance] = *rec.Status
		e.seen[rec.Instance] = time.Now()
	}
}

// trim forgets the oldest operations past opKeep, but none running here;
// o.mu is held.
func (o *deadOps) trim() {
	if len(o.ops) <= opKeep {
		return
	}
	ids := slices.SortedFunc(maps.Keys(o.ops), func(a, b string) int { return o.ops[b].req.At.Compare(o.ops[a].req.At) })
	for _, id := range ids[opKeep:] {
		e := o.ops[id]
		if e.working {
			continue
		}
		delete(o.ops, id)
		if o.over(e) && time.Since(e.req.At) > opPruneAge && len(o.pruned) < opPruneMax {
			o.pruned = append(o.pruned, deadop.RequestKey(id))
			if e.cancel != nil {
				o.pruned = append(o.pruned, deadop.CancelKey(id))
			}
			for inst := range e.statuses {
				o.pruned = append(o.pruned, deadop.StatusKey(id, inst))
			}
		}
	}
}

// over reports whether e is over for good: cancelled, or no owner
// reports running and every ID is accounted for (or it is a day old);
// o.mu is held.
func (o *deadOps) over(e *opEntry) bool {
	if e.cancel != nil {
		return true
	}
	statuses := slices.Collect(maps.Values(e.statuses))
	for _, s := range statuses {
		if s.State == deadop.Running {
			return false
		}
	}
	return deadop.Sum(e.req, nil, statuses).Over || time.Since(e.req.At) > 24*time.Hour
}

// prune tombstones in the meta topic the records of forgotten
// operations that are over (trim), up to opPruneBatch of them a call (in
// the background of StartDeadOp, until ctx, the run's, ends), so
// that the topic keeps about the operations the instances show. A failed
// write is logged; its keys are tried again at the next call.
func (o *deadOps) prune(ctx context.Context) {
	o.mu.Lock()
	n := min(len(o.pruned), opPruneBatch)
	keys := slices.Clone(o.pruned[:n])
	o.pruned = slices.Delete(o.pruned, 0, n)
	o.mu.Unlock()
	for i, k := range keys {
		if err := o.r.clog.writeMeta(ctx, k, nil); err != nil {
			o.mu.Lock()
			o.pruned = append(o.pruned, keys[i:]...)
			o.mu.Unlock()
			o.r.log.Warn("records of old dead-letter operations not deleted from the changelog's meta topic; tried again at the next operation",
				"err", err)
			return
		}
	}
	if len(keys) > 0 {
		o.r.log.Info("records of old dead-letter operations deleted from the changelog's meta topic", "records", len(keys))
	}
}

// write writes an operation's record to the meta topic (nothing without
// the changelog), waiting for its acknowledgement at most
// ChangelogTimeout, and applies it here.
func (o *deadOps) write(ctx context.Context, rec deadop.Record) error {
	var key []byte
	var v any
	switch rec.Kind {
	case deadop.KindRequest:
		key, v = deadop.RequestKey(rec.Op), rec.Request
	case deadop.KindCancel:
		key, v = deadop.CancelKey(rec.Op), rec.Cancel
	default:
		key, v = deadop.StatusKey(rec.Op, rec.Instance), rec.Status
	}
	val, err := deadop.Encode(v)
	if err != nil {
		return err
	}
	if err := o.r.clog.writeMeta(ctx, key, val); err != nil {
		return err
	}
	o.apply(rec)
	return nil
}

// StartDeadOp starts a bulk requeue or discard of the group's dead
// letters that op selects: it resolves the selection to IDs (reading as
// [Runtime.GroupDeadLetters] does, so it blocks for those reads until
// ctx ends, bounded by Config.ChangelogTimeout without a deadline), and,
// unless op.DryRun, writes the request to the changelog's meta topic,
// where every instance follows it and each owner carries out its part
// at its share of op.Rate (see [DeadOp]); it returns at once with the
// operation's status, and [Runtime.DeadOpStatus] follows it. A dry run
// returns the count and a sample and writes nothing. A selection of no
// dead letter is an error wrapping [ErrNotFound], one of more than
// deadop.MaxIDs without a Limit is refused. Resolving holds up to twice
// the selection's dead letters in memory (at most 2×MaxIDs). Without the
// changelog this instance carries out the whole operation on its own
// dead letters.
//
// What is guaranteed: an owner acts only on the IDs it owns that are
// dead letters and last failed no later than the request (so a requeued
// one that fails again is not requeued again by the same operation,
// provided the instances' clocks agree to within the time it takes to
// fail again), one at a time through Requeue's or Discard's path; a
// cancel stops every owner within about a second. What is not: an ID
// whose partition moves while its requeued message runs is requeued
// again by the next owner when the former one could not finish it
// (as a revocation does to any message, at least once); the counts are
// each owner's as last reported.
func (r *Runtime) StartDeadOp(ctx context.Context, op DeadOp) (DeadOpStatus, error) {
	if op.Action != deadop.Requeue && op.Action != deadop.Discard {
		return DeadOpStatus{}, fmt.Errorf("runtime: dead-letter operation: action %q, want %q or %q", op.Action, deadop.Requeue, deadop.Discard)
	}
	if op.Rate < 0 || math.IsNaN(op.Rate) || math.IsInf(op.Rate, 0) {
		return DeadOpStatus{}, fmt.Errorf("runtime: dead-letter operation: rate %v, want 0 (no limit) or more", op.Rate)
	}
	if op.Limit < 0 || op.Limit > deadop.MaxIDs {
		return DeadOpStatus{}, fmt.Errorf("runtime: dead-letter operation: limit %d, want 0 (all) to %d", op.Limit, deadop.MaxIDs)
	}
	if _, err := r.state.get(); err != nil {
		return DeadOpStatus{}, err
	}
	ctx, cancel := r.groupCtx(ctx)
	defer cancel()
	found, err := r.selectDead(ctx, op)
	if err != nil {
		return DeadOpStatus{}, err
	}
	now := time.Now().UTC()
	st := DeadOpStatus{Action: op.Action, Filter: op.Filter, Matched: len(found), Rate: op.Rate, Limit: op.Limit,
		Who: op.Who, Via: r.cfg.Instance, Started: now}
	selection := describeSelection(op)
	if op.DryRun {
		st.State = DeadOpDryRun
		st.Sample = found[:min(len(found), opSample)]
		if err := r.nameOwners(ctx, st.Sample); err != nil {
			return DeadOpStatus{}, err
		}
		r.log.Info("dead-letter operation dry run", "who", op.Who, "via", r.cfg.Instance, "action", op.Action,
			"selection", selection, "count", len(found))
		return st, nil
	}
	if len(found) == 0 {
		return DeadOpStatus{}, fmt.Errorf("%w: %s of %s: no dead letter of the group matches", ErrNotFound, op.Action, selection)
	}
	req := &deadop.Request{ID: newOpID(), Action: op.Action, Filter: toOpFilter(op.Filter), Rate: op.Rate, Limit: op.Limit,
		Who: op.Who, Via: r.cfg.Instance, At: now}
	if op.Rate > 0 {
		req.StartAt = now.Add(opStartDelay)
	}
	for _, g := range found {
		req.IDs = append(req.IDs, g.Key)
		// Every named one failed no later than the request, by its
		// owner's clock too.
		if g.LastFailed.After(req.At) {
			req.At = g.LastFailed.UTC()
		}
	}
	if err := req.Validate(); err != nil {
		return DeadOpStatus{}, fmt.Errorf("runtime: %w", err)
	}
	if err := r.ops.write(ctx, deadop.Record{Kind: deadop.KindRequest, Op: req.ID, Request: req}); err != nil {
		return DeadOpStatus{}, fmt.Errorf("runtime: dead-letter operation %s not started: %w", req.ID, err)
	}
	r.log.Info("dead-letter operation started", "op", req.ID, "who", op.Who, "via", r.cfg.Instance, "action", op.Action,
		"selection", selection, "count", len(req.IDs), "rate", op.Rate, "limit", op.Limit)
	r.ops.mu.Lock()
	if r.ops.ctx != nil && !r.ops.closed && len(r.ops.pruned) > 0 {
		rctx := r.ops.ctx
		r.ops.wg.Go(func() { r.ops.prune(rctx) })
	}
	r.ops.mu.Unlock()
	return r.ops.status(req.ID)
}

// selectDead resolves op's selection to the group's dead letters, oldest
// first, at most op.Limit.
func (r *Runtime) selectDead(ctx context.Context, op DeadOp) ([]GroupDeadLetter, error) {
	if len(op.IDs) > 0 {
		if len(op.IDs) > deadop.MaxIDs {
			return nil, fmt.Errorf("runtime: dead-letter operation: %d IDs, at most %d", len(op.IDs), deadop.MaxIDs)
		}
		for _, id := range op.IDs {
			if _, err := snapshot.ParseDeadID(id); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
			}
		}
		byID, err := r.groupDeadByID(ctx, op.IDs)
		if err != nil {
			return nil, err
		}
		out := slices.Collect(maps.Values(byID))
		slices.SortFunc(out, func(a, b GroupDeadLetter) int { return a.deadAt().compare(b.deadAt()) })
		if op.Limit > 0 && len(out) > op.Limit {
			out = out[:op.Limit]
		}
		return out, nil
	}
	filter := op.Filter
	filter.Newest = false
	limit := op.Limit
	if limit == 0 {
		limit = deadop.MaxIDs
	}
	pg := &groupPager{filter: filter, limit: limit}
	if err := r.groupDead(ctx, filter.Class, pg.add); err != nil {
		return nil, err
	}
	if op.Limit == 0 && pg.total > deadop.MaxIDs {
		return nil, fmt.Errorf("runtime: dead-letter operation: the selection matches %d dead letters, more than %d in one operation: set a limit or narrow it",
			pg.total, deadop.MaxIDs)
	}
	page, _ := pg.page()
	return page, nil
}

// CancelDeadOp cancels operation id: every owner stops taking its IDs
// within about a second (what they did stays done). who is for the audit
// trail. It blocks for the meta topic write, at most
// Config.ChangelogTimeout. Cancelling one already cancelled does
// nothing; an unknown id is an error wrapping [ErrNotFound].
func (r *Runtime) CancelDeadOp(ctx context.Context, id, who string) error {
	r.ops.mu.Lock()
	e := r.ops.ops[id]
	canceled := e != nil && e.cancel != nil
	r.ops.mu.Unlock()
	if e == nil {
		return fmt.Errorf("%w: dead-letter operation %q", ErrNotFound, id)
	}
	if canceled {
		return nil
	}
	if err := r.ops.write(ctx, deadop.Record{Kind: deadop.KindCancel, Op: id, Cancel: &deadop.Cancel{Who: who, At: time.Now().UTC()}}); err != nil {
		return fmt.Errorf("runtime: cancel dead-letter operation %s: %w", id, err)
	}
	r.log.Info("dead-letter operation cancelled", "op", id, "who", who, "via", r.cfg.Instance)
	return nil
}

// DeadOps returns the recent operations this instance knows (at most
// 50, every instance the same ones once it followed the meta topic),
// newest first: the audit trail. It does not block.
func (r *Runtime) DeadOps(ctx context.Context) ([]DeadOpStatus, error) {
	o := r.ops
	o.mu.Lock()
	ids := slices.Collect(maps.Keys(o.ops))
	o.mu.Unlock()
	out := make([]DeadOpStatus, 0, len(ids))
	for _, id := range ids {
		if st, err := o.status(id); err == nil {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b DeadOpStatus) int {
		if c := b.Started.Compare(a.Started); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	return out, nil
}

// DeadOpStatus returns operation id as this instance knows it; an
// unknown (or forgotten) id is an error wrapping [ErrNotFound]. It does
// not block.
func (r *Runtime) DeadOpStatus(ctx context.Context, id string) (DeadOpStatus, error) {
	return r.ops.status(id)
}

// status is [Runtime.DeadOpStatus].
func (o *deadOps) status(id string) (DeadOpStatus, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.ops[id]
	if e == nil {
		return DeadOpStatus{}, fmt.Errorf("%w: dead-letter operation %q", ErrNotFound, id)
	}
	req := e.req
	st := DeadOpStatus{ID: req.ID, Action: req.Action, Filter: fromOpFilter(req.Filter), Matched: len(req.IDs), Rate: req.Rate,
		Limit: req.Limit, Who: req.Who, Via: req.Via, Started: req.At}
	statuses := slices.SortedFunc(maps.Values(e.statuses), func(a, b deadop.Status) int { return cmp.Compare(a.Instance, b.Instance) })
	p := deadop.Sum(req, e.cancel, statuses)
	st.Done, st.Failed, st.FailedAgain, st.Left, st.Skipped, st.Unreported = p.Done, p.Failed, p.FailedAgain, p.Left, p.Skipped, p.Unreported
	st.Owners = statuses
	// Nobody reported yet: the owners begin at StartAt, and write their
	// first status then.
	running := len(statuses) == 0 && time.Since(latest(req.At, req.StartAt)) < opSettle+opStartGrace
	for _, s := range statuses {
		running = running || s.State == deadop.Running
	}
	switch {
	case e.cancel != nil:
		st.State, st.CanceledBy, st.CanceledAt = DeadOpCanceled, e.cancel.Who, e.cancel.At
	case running:
		st.State = DeadOpRunning
	default:
		st.State = DeadOpDone
	}
	return st, nil
}

// opTask is one ID an owner's worker acts on.
type opTask struct {
	key string
}

// work carries out this instance's part of operation id: the IDs it
// owns, still dead letters, that failed no later than the request and
// that it did not act on yet; then, for a requeue, it waits up to
// opSettle for the requeued messages to end and counts those that failed
// again; it writes its status as it goes and at the end.
func (o *deadOps) work(ctx context.Context, id string, e *opEntry, gen int64) {
	r := o.r
	req := e.req
	self := r.cfg.Instance
	finished := false
	defer func() {
		o.mu.Lock()
		e.working, e.stop = false, nil
		if finished {
			e.scanned = gen
		}
		o.mu.Unlock()
	}()
	todo, err := o.scan(req, e.acted)
	if err != nil {
		r.log.Warn("dead-letter operation: this instance's part not looked for; tried again in a second", "op", id, "err", err)
		return
	}
	o.mu.Lock()
	st, had := e.statuses[self]
	o.mu.Unlock()
	if len(todo) == 0 {
		finished = true
		if had && st.State == deadop.Running {
			// A part an earlier run of this instance left running.
			st.State, st.Left, st.Rate = deadop.Done, 0, 0
			o.writeLastStatus(ctx, req, st)
		}
		return
	}
	st.Instance, st.State, st.Left, st.Err = self, deadop.Running, len(todo), ""
	r.log.Info("dead-letter operation: this instance's part started", "op", id, "instance", self, "action", req.Action, "count", len(todo),
		"done_before", st.Done, "who", req.Who, "via", req.Via)
	lim := rate.NewLimiter(rate.Inf, 1)
	if req.Rate > 0 {
		st.Rate = float64(o.share(e, st))
		lim.SetLimit(rate.Limit(st.Rate))
	}
	if wait := time.Until(req.StartAt); wait > 0 {
		// The owners begin together (each follows the meta topic
		// about every second): the group's rate from the start.
		select {
		case <-ctx.Done():
		case <-time.After(min(wait, opStartDelay)):
		}
	}
	// The status is written apart, so that the acts keep their pace.
	// Its writer is stopped by a signal, not by cancelling its write:
	// a cancelled record still queued in the producer fails the ones
	// queued behind it in the meta topic's partition, this part's last
	// status among them (and it would stay "running").
	ps := &partStatus{st: st}
	writerStop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() { ps.writeEvery(ctx, writerStop, o, req) })
	again, stopped := o.actOnAll(ctx, id, e, todo, lim, ps)
	canceled := o.isCanceled(e)
	if req.Action == deadop.Requeue && !stopped && !canceled {
		o.settleRequeued(ctx, req, again, e.acted, ps)
	}
	close(writerStop)
	if o.testHookPartEnd != nil {
		o.testHookPartEnd()
	}
	writer.Wait()
	finished = o.endPart(ctx, id, req, ps.st, canceled, stopped)
}

// endPart writes the last status of this instance's part of operation
// id, st, and logs its end: canceled, or done (what a stop left is the
// next owners'). It reports whether the part is finished here: not when
// the stop or a cancel ended it.
func (o *deadOps) endPart(ctx context.Context, id string, req *deadop.Request, st deadop.Status, canceled, stopped bool) bool {
	finished := false
	switch {
	case canceled:
		st.State = deadop.Canceled
	default:
		// Stopped, the rest is the next owners' (Left 0): this part is
		// over.
		st.State, st.Left = deadop.Done, 0
		finished = !stopped
	}
	st.Rate = 0
	fctx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if stopped {
		// The stop waits for it: briefly.
		fctx, cancel = context.WithTimeout(fctx, opStopWrite)
	}
	o.writeLastStatus(fctx, req, st)
	cancel()
	o.r.log.Info("dead-letter operation: this instance's part ended", "op", id, "instance", o.r.cfg.Instance, "action", req.Action, "state", st.State,
		"done", st.Done, "failed", st.Failed, "failed_again", st.FailedAgain, "skipped", st.Skipped, "stopped", stopped)
	return finished
}

// actOnAll acts on this instance's part of operation id, todo, at the
// pace lim allows (the group's rate shared among the owners), counting
// into ps. It returns the requeued keys not yet known ended (for the
// settle) and whether the stop ended it early (the rest is the next
// owners').
func (o *deadOps) actOnAll(ctx context.Context, id string, e *opEntry, todo []opTask, lim *rate.Limiter, ps *partStatus) (again []string, stopped bool) {
	r, req := o.r, e.req
	lastShare := time.Now()
	for _, t := range todo {
		if ctx.Err() != nil {
			stopped = true
			break
		}
		if !o.stillToDo(req, t.key) {
			// Its partition moved (its next owner does it), or it is
			// gone: no act, no token.
			ps.update(func(st *deadop.Status) { st.Left-- })
			continue
		}
		if req.Rate > 0 {
			if time.Since(lastShare) >= 500*time.Millisecond {
				share := o.share(e, ps.get())
				lim.SetLimit(share)
				ps.update(func(st *deadop.Status) { st.Rate = float64(share) })
				lastShare = time.Now()
			}
			if err := lim.Wait(ctx); err != nil {
				stopped = true
				break
			}
		}
		out, err := o.act(ctx, req, t.key)
		switch {
		case errors.Is(err, ErrNotOwner):
			ps.update(func(st *deadop.Status) { st.Left-- }) // its partition moved: its next owner does it
			continue
		case err != nil && (errors.Is(err, ErrNotRunning) || ctx.Err() != nil):
			stopped = true // not acted on: the next owner does it
		}
		if stopped {
			break
		}
		o.acted[actionIndex(req.Action)][out].Add(1)
		ps.update(func(st *deadop.Status) {
			st.Left--
			switch out {
			case opActed:
				st.Done++
			case opFailed:
				st.Failed++
				st.Err = err.Error()
			case opSkipped:
				st.Skipped++
			}
		})
		switch out {
		case opActed:
			e.acted[t.key] = true
			again = append(again, t.key)
		case opFailed:
			r.log.Warn("dead-letter operation: act failed", "op", id, "action", req.Action, "key", t.key, "err", err)
		}
		if req.Action == deadop.Requeue && len(again) > 64 {
			again = o.failedAgain(req, again, e.acted, ps)
		}
	}
	return again, stopped
}

// settleRequeued waits, up to opSettle, for the requeued messages again
// to end in their pools, counting into ps those that failed again.
func (o *deadOps) settleRequeued(ctx context.Context, req *deadop.Request, again []string, acted map[string]bool, ps *partStatus) {
	deadline := time.Now().Add(opSettle)
	for len(again) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		if again = o.failedAgain(req, again, acted, ps); len(again) == 0 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(opStatusEvery):
		}
	}
}

// partStatus is a worker's status while it acts, written by its writer.
type partStatus struct {
	mu    sync.Mutex
	st    deadop.Status
	dirty bool
}

// get returns the status.
func (ps *partStatus) get() deadop.Status {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.st
}

// update changes the status with fn and returns what is left.
func (ps *partStatus) update(fn func(st *deadop.Status)) int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	fn(&ps.st)
	ps.dirty = true
	return ps.st.Left
}

// writeEvery writes the status of req every opStatusEvery while it
// changes, at least every opHeartbeat, until stop is closed (a write
// under way ends first) or ctx ends.
func (ps *partStatus) writeEvery(ctx context.Context, stop <-chan struct{}, o *deadOps, req *deadop.Request) {
	t := time.NewTicker(opStatusEvery)
	defer t.Stop()
	var last time.Time
	for first := true; ; first = false {
		ps.mu.Lock()
		st, dirty := ps.st, ps.dirty
		ps.dirty = false
		ps.mu.Unlock()
		if first || dirty || time.Since(last) >= opHeartbeat {
			o.writeStatus(ctx, req, st)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// opLastWrites bounds the attempts at a part's last status.
const opLastWrites = 3

// writeLastStatus writes st, the last status of this instance's part of
// req, trying again (up to opLastWrites times in all, until ctx ends)
// when a write fails: nothing writes this part's status after it, and a
// write can fail for a reason not its own (a record of this instance's
// meta topic writes cancelled before it was sent fails the records
// queued behind it).
func (o *deadOps) writeLastStatus(ctx context.Context, req *deadop.Request, st deadop.Status) {
	for i := 1; ; i++ {
		st.At = time.Now().UTC()
		rec := deadop.Record{Kind: deadop.KindStatus, Op: req.ID, Instance: o.r.cfg.Instance, Status: &st}
		err := o.write(ctx, rec)
		if err == nil {
			return
		}
		if i == opLastWrites || ctx.Err() != nil {
			o.apply(rec) // this instance's next part carries its counts on
			if ctx.Err() == nil {
				o.r.log.Warn("dead-letter operation's last progress of this instance's part not written; its next part writes it",
					"op", req.ID, "attempts", i, "err", err)
			}
			return
		}
	}
}

// isCanceled reports whether e was cancelled.
func (o *deadOps) isCanceled(e *opEntry) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return e.cancel != nil
}

// failedAgain counts in ps those of keys (requeued here by req) that
// are dead letters again since, and returns the ones still running. One
// that is a dead letter as it was and no longer claimed by its requeue
// was given back unstarted (its partition was revoked, or the stop took
// it out of its pool): it is counted done no more and leaves acted, so
// that its owner, this instance too if it owns the partition again,
// requeues it.
func (o *deadOps) failedAgain(req *deadop.Request, keys []string, acted map[string]bool, ps *partStatus) []string {
	// The claims first: a requeue that ends deletes (or updates) its
	// record before it lets go of its claim.
	claimed := map[uint64]bool{}
	for _, k := range o.r.fail.requeues.claimed() {
		claimed[k] = true
	}
	locals, recs, err := o.r.state.deadByIDs(keys)
	if err != nil {
		return keys // looked at again at the next turn
	}
	left := keys[:0]
	again, back := 0, 0
	for i, k := range keys {
		rec := recs[i]
		switch {
		case rec == nil: // handled: its record is gone
		case rec.SavedAt.After(req.At):
			again++
		case !claimed[locals[i]]:
			back++
			delete(acted, k)
		default:
			left = append(left, k)
		}
	}
	if again > 0 || back > 0 {
		ps.update(func(st *deadop.Status) { st.FailedAgain += again; st.Done -= back })
	}
	return left
}

// share is this instance's share of e's rate, mine being its current
// status: the rate times its part of what is left, reckoned as what it
// has left, what the other owners that report running have left by now
// (their last status, less what their share has done since), and the
// IDs nobody reports on (on a partition between owners, or of an owner
// that restarts), which an owner will take up. So the owners together
// stay at or below the rate while partitions move, and at it otherwise.
func (o *deadOps) share(e *opEntry, mine deadop.Status) rate.Limit {
	self := o.r.cfg.Instance
	o.mu.Lock()
	defer o.mu.Unlock()
	left := mine.Left
	den := float64(left)
	accounted := mine.Done + mine.Failed + mine.Skipped + left
	now := time.Now()
	for inst, s := range e.statuses {
		if inst == self {
			continue
		}
		accounted += s.Done + s.Failed + s.Skipped
		if s.State != deadop.Running || now.Sub(e.seen[inst]) >= opFresh {
			continue
		}
		accounted += s.Left
		// Its status is up to a follow's interval and a write's
		// interval old.
		since := min(max(now.Sub(s.At), 0), opFresh).Seconds()
		den += max(0, float64(s.Left)-since*s.Rate)
	}
	den += float64(max(0, len(e.req.IDs)-accounted))
	if den <= 0 || left <= 0 {
		return rate.Limit(e.req.Rate)
	}
	return rate.Limit(e.req.Rate * float64(left) / den)
}

// writeStatus writes st, this instance's status of req, to the meta
// topic and keeps it here. A failed write is logged; the next one
// carries the counts.
func (o *deadOps) writeStatus(ctx context.Context, req *deadop.Request, st deadop.Status) {
	st.At = time.Now().UTC()
	rec := deadop.Record{Kind: deadop.KindStatus, Op: req.ID, Instance: o.r.cfg.Instance, Status: &st}
	if err := o.write(ctx, rec); err != nil {
		o.apply(rec) // this instance's next part carries its counts on
		if ctx.Err() == nil {
			o.logs.warn(o.r.log, "deadop/status", "dead-letter operation's progress not written; the next write carries it",
				"op", req.ID, "err", err)
		}
	}
}

// scan returns the IDs of req this instance acts on: those it owns
// that are dead letters here, failed no later than req.At and are not in
// acted, in req's order (oldest first).
func (o *deadOps) scan(req *deadop.Request, acted map[string]bool) ([]opTask, error) {
	_, recs, err := o.r.state.deadByIDs(req.IDs)
	if err != nil {
		return nil, err
	}
	var out []opTask
	for i, rec := range recs {
		if rec == nil || acted[req.IDs[i]] || rec.SavedAt.After(req.At) {
			continue
		}
		if !o.r.fail.cfg.clog.mine(rec) {
			continue
		}
		out = append(out, opTask{key: req.IDs[i]})
	}
	return out, nil
}

// stillToDo reports whether dead letter key is still this instance's to
// act on for req: here, of a partition it owns, and failed no later than
// req. (The act checks again under its claim; this spares a token and
// the act's search of the changelogs for one that moved.)
func (o *deadOps) stillToDo(req *deadop.Request, key string) bool {
	_, recs, err := o.r.state.deadByIDs([]string{key})
	if err != nil {
		return true // the act says what failed
	}
	rec := recs[0]
	return rec != nil && !rec.SavedAt.After(req.At) && o.r.fail.cfg.clog.mine(rec)
}

// act requeues or discards dead letter key for req through Requeue's or
// Discard's path, unless it failed again since req was made. An error
// wrapping ErrNotOwner or ErrNotRunning is not an outcome: the ID is not
// this instance's to act on now.
func (o *deadOps) act(ctx context.Context, req *deadop.Request, key string) (opOutcome, error) {
	check := func(dl DeadLetter) error {
		if dl.LastFailed.After(req.At) {
			return errFailedSince
		}
		return nil
	}
	var err error
	if req.Action == deadop.Requeue {
		err = o.r.fail.requeueChecked(ctx, key, check, "op", req.ID)
	} else {
		err = o.r.fail.discardChecked(ctx, key, check, "op", req.ID)
	}
	switch {
	case err == nil:
		return opActed, nil
	case errors.Is(err, ErrNotOwner), errors.Is(err, ErrNotRunning):
		return 0, err
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrRequeued), errors.Is(err, errFailedSince):
		return opSkipped, nil
	}
	return opFailed, err
}

// errFailedSince refuses an operation's act on a dead letter that
// failed again after the request was made (it was requeued since).
var errFailedSince = errors.New("runtime: dead letter failed again since the operation was asked")

func actionIndex(action string) int {
	if action == deadop.Discard {
		return 1
	}
	return 0
}

// deadByIDs returns the keys in this file and the records of the dead
// letters ids, in ids' order (0 and nil for an ID that is not here, or
// not an ID), in one read.
func (f *stateFile) deadByIDs(ids []string) ([]uint64, []*snapshot.Record, error) {
	return f.store.DeadByIDs(ids)
}

// viaOwner carries out a single requeue or discard of key, a dead letter
// another instance owns (ne), as a one-ID operation: it writes the
// request and waits, until ctx ends (bounded by ChangelogTimeout without
// a deadline), for the owner's status, and returns its outcome. When no
// answer came it cancels the operation and returns ne, saying so.
func (r *Runtime) viaOwner(ctx context.Context, action, key string, ne *NotOwnerError) error {
	ctx, cancel := r.groupCtx(ctx)
	defer cancel()
	g, err := r.GetGroupDeadLetter(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return err // gone since: nothing to ask
	}
	if err != nil {
		return fmt.Errorf("%w (it was not asked of the owner: %w)", ne, err)
	}
	req := &deadop.Request{ID: newOpID(), Action: action, IDs: []string{key}, Via: r.cfg.Instance, At: time.Now().UTC()}
	if g.LastFailed.After(req.At) {
		req.At = g.LastFailed.UTC()
	}
	if err := r.ops.write(ctx, deadop.Record{Kind: deadop.KindRequest, Op: req.ID, Request: req}); err != nil {
		return fmt.Errorf("%w (asking it through the changelog's meta topic failed: %w)", ne, err)
	}
	r.log.Info("dead letter's "+action+" asked of its owner", "op", req.ID, "key", key, "owner", ne.Owner, "via", r.cfg.Instance)
	for {
		r.ops.mu.Lock()
		e, changed := r.ops.ops[req.ID], r.ops.changed
		var p deadop.Progress
		var errText string
		if e != nil {
			p = deadop.Sum(req, nil, slices.Collect(maps.Values(e.statuses)))
			for _, s := range e.statuses {
				errText = cmp.Or(errText, s.Err)
			}
		}
		r.ops.mu.Unlock()
		switch {
		case p.Done > 0:
			return nil
		case p.Failed > 0:
			return fmt.Errorf("runtime: %s dead letter %s through its owner %s (operation %s): %s", action, key, ne.Owner, req.ID, errText)
		case p.Skipped > 0:
			return fmt.Errorf("%w: dead letter %s (its owner %s found it no longer a dead letter, or failed again since)", ErrNotFound, key, ne.Owner)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ChangelogTimeout)
			cerr := r.CancelDeadOp(cctx, req.ID, "timeout of the "+action+" through "+r.cfg.Instance)
			ccancel()
			what := "cancelled"
			if cerr != nil {
				what = "not cancelled: " + cerr.Error()
			}
			return fmt.Errorf("%w (asked of it as operation %s; it did not answer before %v; the operation is %s, unless the owner acted first)",
				ne, req.ID, context.Cause(ctx), what)
		}
	}
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// newOpID returns a new operation ID: 16 random hex digits.
func newOpID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// toOpFilter and fromOpFilter convert a selection for the audit trail.
func toOpFilter(f DeadFilter) deadop.Filter {
	out := deadop.Filter{Class: f.Class, Topic: f.Topic, Partition: f.Partition, ErrorContains: f.ErrorContains, MinAttempts: f.MinAttempts,
		Since: f.Since, Until: f.Until, FirstSince: f.FirstSince, FirstUntil: f.FirstUntil}
	if f.Key != nil {
		k := string(f.Key)
		out.Key = &k
	}
	return out
}

func fromOpFilter(f deadop.Filter) DeadFilter {
	out := DeadFilter{Class: f.Class, Topic: f.Topic, Partition: f.Partition, ErrorContains: f.ErrorContains, MinAttempts: f.MinAttempts,
		Since: f.Since, Until: f.Until, FirstSince: f.FirstSince, FirstUntil: f.FirstUntil}
	if f.Key != nil {
		out.Key = []byte(*f.Key)
	}
	return out
}

// describeSelection is op's selection for the audit log line.
func describeSelection(op DeadOp) string {
	if len(op.IDs) > 0 {
		if len(op.IDs) <= 5 {
			return "ids=" + strings.Join(op.IDs, ",")
		}
		return fmt.Sprintf("ids=%s,... (%d)", strings.Join(op.IDs[:5], ","), len(op.IDs))
	}
	f := op.Filter
	var parts []string
	add := func(k, v string) { parts = append(parts, k+"="+v) }
	if f.Class != "" {
		add("class", f.Class)
	}
	if f.Topic != "" {
		add("topic", f.Topic)
	}
	if f.Partition != nil {
		add("partition", fmt.Sprint(*f.Partition))
	}
	if f.Key != nil {
		add("key", fmt.Sprintf("%q", f.Key))
	}
	if f.ErrorContains != "" {
		add("error", fmt.Sprintf("%q", f.ErrorContains))
	}
	if f.MinAttempts > 0 {
		add("min_attempts", fmt.Sprint(f.MinAttempts))
	}
	for _, t := range []struct {
		k string
		v time.Time
	}{{"since", f.Since}, {"until", f.Until}, {"first_since", f.FirstSince}, {"first_until", f.FirstUntil}} {
		if !t.v.IsZero() {
			add(t.k, t.v.Format(time.RFC3339Nano))
		}
	}
	if op.Limit > 0 {
		add("limit", fmt.Sprint(op.Limit))
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, " ")
}
