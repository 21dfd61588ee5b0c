package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/signal"
	"os/user"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/internal/deadop"
	"github.com/handoff-go/handoff/runtime"
)

// deadOpFlags are the flags of the online form of requeue and discard
// (with --brokers): the group, the selection besides --all and --class
// (deadSelection's), and how the operation runs.
type deadOpFlags struct {
	cluster clusterFlags
	filter  deadFilterFlags
	dryRun  bool
	rate    float64
	limit   int
	wait    time.Duration
	who     string
	yes     bool // discard's
}

// defaultWait is how long requeue and discard --brokers follow the
// operation they asked for.
const defaultWait = 10 * time.Minute

// sampleSize is how many dead letters a dry run prints.
const sampleSize = 20

// deadOpOnlyFlagNames are the flags of the online form only, besides
// the cluster and selection flags.
var deadOpOnlyFlagNames = []string{"dry-run", "rate", "limit", "wait", "who", "yes"}

func (f *deadOpFlags) register(cmd *cobra.Command, action string) {
	f.cluster.register(cmd)
	f.filter.registerSelection(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&f.dryRun, "dry-run", false, "with --brokers: print how many dead letters the selection takes and a sample; write nothing")
	fl.Float64Var(&f.rate, "rate", 0, "with --brokers: at most this many dead letters a second, for the whole group (0: no limit)")
	fl.IntVar(&f.limit, "limit", 0, fmt.Sprintf("with --brokers: at most this many, the oldest (0: all of them, at most %d)", deadop.MaxIDs))
	fl.DurationVar(&f.wait, "wait", defaultWait, "with --brokers: how long to follow the operation's progress (0: ask for it and return)")
	fl.StringVar(&f.who, "who", "", "with --brokers: who asks, for the group's audit trail (default: the OS user name)")
	if action == deadop.Discard {
		fl.BoolVar(&f.yes, "yes", false, "with --brokers: discard when the selection holds more than one dead letter")
	}
}

// checkOffline rejects the online form's flags on a state file.
func (f *deadOpFlags) checkOffline(cmd *cobra.Command) error {
	for _, names := range [][]string{clusterFlagNames, selectionFlagNames, deadOpOnlyFlagNames} {
		for _, name := range names {
			if fl := cmd.Flags().Lookup(name); fl != nil && fl.Changed {
				return usagef("--%s needs --brokers (the group's online operation); on a state file give IDs or --all [--class]", name)
			}
		}
	}
	return nil
}

// deadOpArgs is the Args of requeue and discard: STATE and IDs, or with
// --brokers IDs only.
func deadOpArgs(cmd *cobra.Command, args []string) error {
	if cmd.Flags().Changed("brokers") {
		return nil // IDs, checked by runDeadOp
	}
	return stateArgs(0, -1, "ID")(cmd, args)
}

// deadOpRun is the RunE of requeue and discard: the online form with
// --brokers, else offline (the state file's form).
func deadOpRun(action string, sel *deadSelection, of *deadOpFlags, offline func(*cobra.Command, []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if !cmd.Flags().Changed("brokers") {
			if err := of.checkOffline(cmd); err != nil {
				return err
			}
			return offline(cmd, args)
		}
		return runE(func(cmd *cobra.Command, args []string) error {
			return runDeadOp(cmd, action, sel, of, args)
		})(cmd, args)
	}
}

// runDeadOp is requeue or discard --brokers: it resolves the selection
// from the group's changelog to the dead letters' IDs, writes a
// deadop.Request to the group's meta topic and follows the owners'
// statuses until the operation is over or --wait passes. Ctrl-C (or
// SIGTERM) while it follows cancels the operation.
func runDeadOp(cmd *cobra.Command, action string, sel *deadSelection, f *deadOpFlags, ids []string) error {
	if cmd.Flags().Changed("lock-timeout") {
		return usagef("--lock-timeout is for a state file: not with --brokers")
	}
	filter, err := f.filter.filter(cmd, sel.class, "")
	if err != nil {
		return err
	}
	given, err := deadOpIDs(cmd, sel, f, ids)
	if err != nil {
		return err
	}
	who := f.who
	if who == "" {
		who = osUser()
	}
	d, err := f.cluster.dialer("handoff-dead-" + action)
	if err != nil {
		return err
	}

	// Ctrl-C or SIGTERM: before the request is written, the command stops
	// having written nothing; after, it cancels the operation. After the
	// first signal the default action is back, so a second one quits at
	// once.
	sigCtx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(sigCtx, stop)
	ctx, cancel := context.WithTimeoutCause(sigCtx, f.cluster.timeout, fmt.Errorf("--timeout %s passed", f.cluster.timeout))
	defer cancel()

	dead, bad, err := groupDead(ctx, &f.cluster, d, &filter)
	if err != nil {
		return err
	}
	warnChangelogProblems(cmd.ErrOrStderr(), bad)
	if len(given) > 0 {
		if dead, err = pickIDs(dead, given, f.cluster.group); err != nil {
			return err
		}
	}
	out := cmd.OutOrStdout()
	what := selectionWhat(sel.class, f.cluster.group)
	if len(dead) == 0 {
		_, err := fmt.Fprintf(out, "no %s to %s\n", what, action)
		return err
	}
	dead, taken, err := limitDead(dead, f.limit, what)
	if err != nil {
		return err
	}
	if f.dryRun {
		return printDryRun(out, action, taken, dead, f.cluster.group)
	}
	if action == deadop.Discard && len(dead) > 1 && !f.yes {
		fmt.Fprintf(out, "discard would delete %s for good\n", taken)
		return usagef("discard selects %d dead letters: add --yes to discard them (--dry-run shows a sample)", len(dead))
	}

	req, value, err := newDeadOpRequest(action, &filter, f, who, dead)
	if err != nil {
		return err
	}
	m, err := newMetaClient(ctx, &f.cluster, d)
	if err != nil {
		return err
	}
	defer m.Close()
	offset, err := m.write(ctx, deadop.RequestKey(req.ID), value)
	if err != nil {
		return err
	}
	printOpWritten(cmd, req, taken, dead, f.cluster.group)
	if f.wait == 0 {
		_, err := fmt.Fprintf(out, "not waiting (--wait 0): 'handoff dead ops --brokers %s --group %s' shows its progress\n",
			strings.Join(f.cluster.brokers, ","), f.cluster.group)
		return err
	}
	return followOp(cmd, sigCtx, m, req, offset, f)
}

// limitDead keeps the first limit of dead (the oldest; zero: all) and
// returns them with the words that say how many of how many were taken,
// what naming them. It fails when more than one operation takes are left.
func limitDead(dead []clusterDead, limit int, what string) ([]clusterDead, string, error) {
	matched := len(dead)
	if limit > 0 && len(dead) > limit {
		dead = dead[:limit] // the oldest: the listing is by last failure
	}
	if len(dead) > deadop.MaxIDs {
		return nil, "", usagef("the selection holds %d %s, more than one operation takes (%d): narrow it, or give --limit", len(dead), what, deadop.MaxIDs)
	}
	taken := fmt.Sprintf("%d %s", len(dead), what)
	if matched > len(dead) {
		taken = fmt.Sprintf("%d of the %d matching %s (--limit %d, the oldest)", len(dead), matched, what, limit)
	}
	return dead, taken, nil
}

// deadOpIDs checks runDeadOp's selection and flags and returns the dead
// letter IDs given, each once, in their order: none when the command
// selects by flags.
func deadOpIDs(cmd *cobra.Command, sel *deadSelection, f *deadOpFlags, ids []string) ([]string, error) {
	selecting := sel.all || sel.class != ""
	for _, name := range selectionFlagNames {
		selecting = selecting || cmd.Flags().Changed(name)
	}
	switch {
	case len(ids) > 0 && selecting:
		return nil, usagef("give IDs or a selection (--all, --class, --error-contains, ...), not both")
	case len(ids) == 0 && !selecting && len(f.cluster.topics) == 0:
		return nil, usagef("missing a selection: IDs, --class, --error-contains, --key, --since, --until, ..., or --all for every dead letter of the group")
	case f.rate < 0 || math.IsNaN(f.rate) || math.IsInf(f.rate, 0):
		return nil, usagef("--rate must be a number of dead letters a second >= 0, got %v", f.rate)
	case f.limit < 0 || f.limit > deadop.MaxIDs:
		return nil, usagef("--limit must be between 0 (all) and %d, got %d", deadop.MaxIDs, f.limit)
	case f.wait < 0:
		return nil, usagef("--wait must be >= 0, got %s", f.wait)
	}
	given := make([]string, 0, len(ids))
	for _, a := range ids {
		id, err := parseDeadID(a)
		if err != nil {
			return nil, err
		}
		if s := id.String(); !slices.Contains(given, s) {
			given = append(given, s)
		}
	}
	return given, nil
}

// newDeadOpRequest returns the operation request asking the owners of
// dead to apply action, by who, and its encoded value. Its At is now, or
// the latest last failure of dead when that is later.
func newDeadOpRequest(action string, filter *runtime.DeadFilter, f *deadOpFlags, who string, dead []clusterDead) (*deadop.Request, []byte, error) {
	now := time.Now().UTC()
	req := &deadop.Request{ID: newOpID(), Action: action, Filter: opFilter(filter, f.cluster.topics), Rate: f.rate,
		Limit: f.limit, Who: who, Via: "cli", At: now}
	if req.Rate > 0 {
		req.StartAt = now.Add(deadop.StartDelay)
	}
	req.IDs = make([]string, len(dead))
	for i := range dead {
		req.IDs[i] = dead[i].ID.String()
		// An owner acts on those that last failed no later than At (a
		// later failure is a requeued one failing again): At is not
		// before any named one's last failure, whatever this machine's
		// clock says.
		if saved := dead[i].Record.SavedAt; saved.After(req.At) {
			req.At = saved.UTC()
		}
	}
	if err := req.Validate(); err != nil {
		return nil, nil, err
	}
	value, err := deadop.Encode(req)
	if err != nil {
		return nil, nil, err
	}
	return req, value, nil
}

// printOpWritten prints that the request req (for taken, the selected
// dead) was written, and warns on stderr about those no member of group
// owns now.
func printOpWritten(cmd *cobra.Command, req *deadop.Request, taken string, dead []clusterDead, group string) {
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "operation %s: %s %s, asked of their owners as %s", req.ID, req.Action, taken, req.Who)
	if req.Rate > 0 {
		fmt.Fprintf(out, " at %g a second", req.Rate)
	}
	fmt.Fprintln(out)
	if unowned := countUnowned(dead); unowned > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d of them are in partitions no member of group %s owns now: they wait for one\n",
			unowned, group)
	}
}

// followOp follows req's statuses in the meta topic from offset on,
// printing a progress line when it changed (at most once a second),
// until the operation is over (metaOp.over: an error when some of it
// failed, was cancelled or was acted on by no owner), --wait passes (an
// error: the owners go on) or sigCtx ends (a signal, or the command's
// context): then it writes a Cancel and returns an error.
func followOp(cmd *cobra.Command, sigCtx context.Context, m *metaClient, req *deadop.Request, offset int64, f *deadOpFlags) error {
	out := cmd.OutOrStdout()
	errWait := fmt.Errorf("--wait %s passed", f.wait)
	ctx, cancel := context.WithTimeoutCause(sigCtx, f.wait, errWait)
	defer cancel()
	op := &metaOp{Request: req, Offset: offset, Statuses: map[string]deadop.Status{}}
	ops := &metaOps{ops: map[string]*metaOp{req.ID: op}}
	var (
		last    deadop.Progress
		printed time.Time
		changed bool
	)
	err := m.follow(ctx, offset, time.Second, func(rec changelogRecord) { ops.add(m.topic, rec) }, func() error {
		p := op.progress()
		if p != last {
			changed, last = true, p
		}
		if op.over(time.Now()) {
			return errStopFollow
		}
		if changed && time.Since(printed) >= time.Second {
			fmt.Fprintf(out, "%s: %s\n", req.Action, progressLine(req, p))
			changed, printed = false, time.Now()
		}
		return nil
	})
	p := op.progress()
	for _, s := range op.statuses() {
		if s.Err != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: instance %s: %s\n", s.Instance, s.Err)
		}
	}
	switch {
	case err == nil && op.Cancel != nil:
		return fmt.Errorf("operation %s was canceled by %s at %s: %s", req.ID, op.Cancel.Who, fmtTime(op.Cancel.At), progressLine(req, p))
	case err == nil && p.Failed > 0:
		return fmt.Errorf("operation %s is over, %d failed: %s", req.ID, p.Failed, progressLine(req, p))
	case err == nil && p.Unreported > 0:
		return fmt.Errorf("operation %s is over with %d of its dead letters acted on by no owner (no longer dead letters when their owner looked, "+
			"or of partitions nobody owns: an owner that comes acts on them; 'handoff dead ops %s' shows it): %s",
			req.ID, p.Unreported, req.ID, progressLine(req, p))
	case err == nil:
		_, err := fmt.Fprintf(out, "%s: over: %s\n", req.Action, progressLine(req, p))
		return err
	case errors.Is(err, errWait):
		return fmt.Errorf("stopped following operation %s after --wait %s, the owners go on: %s; "+
			"'handoff dead ops' shows it, 'handoff dead ops --cancel %s' cancels it", req.ID, f.wait, progressLine(req, p), req.ID)
	case sigCtx.Err() == nil:
		return fmt.Errorf("following operation %s: %w", req.ID, err)
	}
	// Interrupted: cancel, under a context of its own.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(sigCtx), f.cluster.timeout)
	defer wcancel()
	if cerr := writeCancel(wctx, m, req.ID, req.Who); cerr != nil {
		return fmt.Errorf("interrupted, and could not cancel operation %s (%s): %w", req.ID, progressLine(req, p), cerr)
	}
	return fmt.Errorf("interrupted: canceled operation %s, the owners stop taking its dead letters (what they did stays done): %s",
		req.ID, progressLine(req, p))
}

// writeCancel writes a Cancel of operation id by who.
func writeCancel(ctx context.Context, m *metaClient, id, who string) error {
	value, err := deadop.Encode(&deadop.Cancel{Who: who, At: time.Now().UTC()})
	if err != nil {
		return err
	}
	_, err = m.write(ctx, deadop.CancelKey(id), value)
	return err
}

// progressLine says how far an operation is: done, failed, failed
// again, skipped, left (still to do: what the owners said is left and
// what no owner reported on yet) of how many.
func progressLine(req *deadop.Request, p deadop.Progress) string {
	var b strings.Builder
	fmt.Fprintf(&b, "done %d", p.Done)
	if p.Failed > 0 {
		fmt.Fprintf(&b, ", failed %d", p.Failed)
	}
	if req.Action == deadop.Requeue {
		fmt.Fprintf(&b, ", failed again %d", p.FailedAgain)
	}
	if p.Skipped > 0 {
		fmt.Fprintf(&b, ", skipped %d (no longer dead letters)", p.Skipped)
	}
	fmt.Fprintf(&b, ", left %d of %d", p.Left+p.Unreported, len(req.IDs))
	return b.String()
}

// printDryRun prints what the operation would take and a sample.
func printDryRun(w io.Writer, action, taken string, dead []clusterDead, group string) error {
	owners := map[string]int{}
	for i := range dead {
		owners[cmp.Or(dead[i].Owner, "-")]++
	}
	var per []string
	for _, o := range slices.Sorted(maps.Keys(owners)) {
		per = append(per, fmt.Sprintf("%s %d", o, owners[o]))
	}
	fmt.Fprintf(w, "dry run: %s would take %s (owners: %s); nothing written\n", action, taken, strings.Join(per, ", "))
	sample := dead[:min(len(dead), sampleSize)]
	if err := printClusterDead(w, sample, 0, group, ""); err != nil {
		return err
	}
	if more := len(dead) - len(sample); more > 0 {
		_, err := fmt.Fprintf(w, "and %d more\n", more)
		return err
	}
	return nil
}

// pickIDs returns the dead letters of dead with the given IDs, in the
// order given; a usage error names those the group's changelog does not
// hold.
func pickIDs(dead []clusterDead, ids []string, group string) ([]clusterDead, error) {
	byID := make(map[string]clusterDead, len(dead))
	for _, d := range dead {
		byID[d.ID.String()] = d
	}
	var out []clusterDead
	var missing []string
	for _, id := range ids {
		d, ok := byID[id]
		if !ok {
			missing = append(missing, id)
			continue
		}
		out = append(out, d)
	}
	if len(missing) > 0 {
		return nil, usagef("no dead letter with ID %s in the changelog of group %s; nothing written", strings.Join(missing, ", "), group)
	}
	return out, nil
}

// selectionWhat names the selection for messages.
func selectionWhat(class, group string) string {
	if class != "" {
		return fmt.Sprintf("dead letters of class %q of group %s", class, group)
	}
	return "dead letters of group " + group
}

func countUnowned(dead []clusterDead) int {
	n := 0
	for i := range dead {
		if dead[i].Owner == "" {
			n++
		}
	}
	return n
}

// opFilter is the selection filter and topics give, for the audit trail.
func opFilter(f *runtime.DeadFilter, topics []string) deadop.Filter {
	out := deadop.Filter{Class: f.Class, Partition: f.Partition, ErrorContains: f.ErrorContains, MinAttempts: f.MinAttempts,
		Since: f.Since, Until: f.Until, FirstSince: f.FirstSince, FirstUntil: f.FirstUntil}
	if len(topics) == 1 {
		out.Topic = topics[0]
	}
	if f.Key != nil {
		k := string(f.Key)
		out.Key = &k
	}
	return out
}

// newOpID returns a new operation ID: 16 random hex digits, the form
// of the runtime's own operations.
func newOpID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// osUser is the OS user's name for the audit trail, "unknown" when it
// cannot be found.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	for _, env := range []string{"USER", "USERNAME", "LOGNAME"} {
		if v := os.Getenv(env); v != "" {
			return v
		}
	}
	return "unknown"
}
