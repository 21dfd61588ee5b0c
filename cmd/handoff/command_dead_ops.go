package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/internal/deadop"
)

func newDeadOpsCmd() *cobra.Command {
	var (
		cf       clusterFlags
		limit    int
		jsonFlag bool
		cancelOp string
		who      string
	)
	cmd := &cobra.Command{
		Use:   "ops --brokers HOST:PORT[,...] --group GROUP [OP] [--cancel OP]",
		Short: "List a group's recent dead-letter operations (the audit trail) with their progress, or cancel one",
		Long:  deadOpsLong,
		Args:  cobra.MaximumNArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("topic") {
				return usagef("--topic is not for ops: an operation names its dead letters by ID")
			}
			if limit <= 0 {
				return usagef("--limit must be > 0, got %d", limit)
			}
			if cancelOp != "" && len(args) > 0 {
				return usagef("give OP or --cancel OP, not both")
			}
			if cmd.Flags().Changed("who") && cancelOp == "" {
				return usagef("--who needs --cancel")
			}
			d, err := cf.dialer("handoff-dead-ops")
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeoutCause(ctx, cf.timeout, fmt.Errorf("--timeout %s passed", cf.timeout))
			defer cancel()
			m, err := newMetaClient(ctx, &cf, d)
			if err != nil {
				return err
			}
			defer m.Close()
			ops, err := m.readOps(ctx)
			if err != nil {
				return err
			}
			warnChangelogProblems(cmd.ErrOrStderr(), ops.bad)
			out := cmd.OutOrStdout()
			if cancelOp != "" {
				return cancelDeadOp(ctx, out, m, ops, cancelOp, who, cf.group)
			}
			if len(args) > 0 {
				return showDeadOp(out, ops, args[0], m.topic, jsonFlag)
			}
			return listDeadOps(out, ops, limit, jsonFlag, cf.group)
		}),
	}
	cf.register(cmd)
	if err := cmd.Flags().MarkHidden("topic"); err != nil {
		panic(err)
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "at most this many operations, the newest")
	cmd.Flags().BoolVar(&jsonFlag, "json", false, "print JSON instead of a table")
	cmd.Flags().StringVar(&cancelOp, "cancel", "", "cancel this running operation")
	cmd.Flags().StringVar(&who, "who", "", "with --cancel: who cancels, for the audit trail (default: the OS user name)")
	return cmd
}

// showDeadOp prints the operation id of ops, as text or JSON; it fails
// when ops (read from the meta topic topic) has no request of that ID.
func showDeadOp(out io.Writer, ops *metaOps, id, topic string, jsonFlag bool) error {
	op := ops.ops[id]
	if op == nil || op.Request == nil {
		return usagef("no operation %s in meta topic %s", id, topic)
	}
	if jsonFlag {
		return writeJSON(out, opJSONOf(op))
	}
	return printDeadOp(out, op)
}

// listDeadOps prints the requested operations of ops, at most limit of
// them (the first ops.requested lists), as a table or JSON, with how
// many more there are; group is the consumer group the text names.
func listDeadOps(out io.Writer, ops *metaOps, limit int, jsonFlag bool, group string) error {
	list := ops.requested()
	more := 0
	if len(list) > limit {
		more = len(list) - limit
		list = list[:limit]
	}
	if jsonFlag {
		res := opsJSON{Operations: make([]opJSON, len(list)), More: more}
		for i, op := range list {
			res.Operations[i] = opJSONOf(op)
		}
		return writeJSON(out, res)
	}
	return printDeadOps(out, list, more, group)
}

// deadOpsLong is the long help of 'dead ops'.
const deadOpsLong = `Ops reads the group's dead-letter operations from its meta topic
(GROUP.handoff-meta): the bulk requeues and discards asked through any
instance's admin API or dashboard, or with 'dead requeue|discard
--brokers'. It prints them newest first, at most --limit: the
operation's ID, action, state (running, done, canceled), who asked and
through what (an instance's name, or cli), when, how many dead letters
it names, its rate, the owners' progress (done, failed, failed again,
skipped: no longer dead letters, left: still to do, reported or not; a
done operation with some left named dead letters no owner acted on:
gone when their owner looked, or of a partition nobody owned) and the
selection it was made with. The meta topic is compacted: the
operations it still holds are the recent ones.

With OP it prints that operation in detail, each owner's part on its
own line. --cancel OP writes a cancel of a running operation: its
owners stop taking its dead letters, what they did stays done.`

// cancelDeadOp writes a Cancel of operation id, unless it is over.
func cancelDeadOp(ctx context.Context, w io.Writer, m *metaClient, ops *metaOps, id, who, group string) error {
	op := ops.ops[id]
	if op == nil || op.Request == nil {
		return usagef("no operation %s in meta topic %s; nothing written", id, m.topic)
	}
	if op.Cancel != nil {
		_, err := fmt.Fprintf(w, "operation %s was canceled already by %s at %s; nothing written\n", id, op.Cancel.Who, fmtTime(op.Cancel.At))
		return err
	}
	if p := op.progress(); op.over(time.Now()) {
		_, err := fmt.Fprintf(w, "operation %s is over (%s); nothing written\n", id, progressLine(op.Request, p))
		return err
	}
	if who == "" {
		who = osUser()
	}
	if err := writeCancel(ctx, m, id, who); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "canceled operation %s of group %s: its owners stop taking its dead letters (what they did stays done)\n", id, group)
	return err
}

// opState is an operation's state: canceled, done (over) or running.
func opState(op *metaOp) string {
	switch {
	case op.Cancel != nil:
		return deadop.Canceled
	case op.over(time.Now()):
		return deadop.Done
	}
	return deadop.Running
}

func printDeadOps(w io.Writer, list []*metaOp, more int, group string) error {
	if len(list) == 0 {
		_, err := fmt.Fprintf(w, "no dead-letter operations in the meta topic of group %s\n", group)
		return err
	}
	tab := newTable(w)
	tab.row("OP", "ACTION", "STATE", "WHO", "VIA", "AT", "COUNT", "RATE", "DONE", "FAILED", "FAILED AGAIN", "SKIPPED", "LEFT", "SELECTION")
	for _, op := range list {
		r, p := op.Request, op.progress()
		tab.row(oneLine(r.ID, 40), r.Action, opState(op), oneLine(r.Who, 30), oneLine(r.Via, 30), fmtTime(r.At), len(r.IDs),
			fmtRate(r.Rate), p.Done, p.Failed, p.FailedAgain, p.Skipped, p.Left+p.Unreported, oneLine(selectionOf(r), 80))
	}
	if err := tab.flush(); err != nil {
		return err
	}
	if more > 0 {
		_, err := fmt.Fprintf(w, "%d more (--limit)\n", more)
		return err
	}
	return nil
}

// printDeadOp prints one operation in detail.
func printDeadOp(w io.Writer, op *metaOp) error {
	r, p := op.Request, op.progress()
	fmt.Fprintf(w, "operation %s: %s of %d dead letters, %s\n", r.ID, r.Action, len(r.IDs), opState(op))
	fmt.Fprintf(w, "asked by %s via %s at %s; rate %s; selection: %s\n", r.Who, r.Via, fmtTime(r.At), fmtRate(r.Rate), selectionOf(r))
	if op.Cancel != nil {
		fmt.Fprintf(w, "canceled by %s at %s\n", op.Cancel.Who, fmtTime(op.Cancel.At))
	}
	fmt.Fprintf(w, "progress: %s\n", progressLine(r, p))
	statuses := op.statuses()
	if len(statuses) == 0 {
		_, err := fmt.Fprintln(w, "no owner has reported yet")
		return err
	}
	tab := newTable(w)
	tab.row("INSTANCE", "STATE", "DONE", "FAILED", "FAILED AGAIN", "SKIPPED", "LEFT", "AT", "ERROR")
	for _, s := range statuses {
		tab.row(oneLine(s.Instance, 40), s.State, s.Done, s.Failed, s.FailedAgain, s.Skipped, s.Left, fmtTime(s.At), oneLine(cmpDash(s.Err), errorWidth))
	}
	return tab.flush()
}

func cmpDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fmtRate(r float64) string {
	if r == 0 {
		return "-"
	}
	return strconv.FormatFloat(r, 'g', -1, 64) + "/s"
}

// selectionOf describes what an operation was asked with, as the flags
// of 'dead requeue --brokers' would give it; "no filter" for IDs given
// one by one or --all.
func selectionOf(r *deadop.Request) string {
	f := &r.Filter
	var parts []string
	add := func(name, v string) { parts = append(parts, name+"="+v) }
	if f.Class != "" {
		add("class", strconv.Quote(f.Class))
	}
	if f.Topic != "" {
		add("topic", strconv.Quote(f.Topic))
	}
	if f.Partition != nil {
		add("partition", strconv.Itoa(*f.Partition))
	}
	if f.Key != nil {
		add("key", strconv.Quote(*f.Key))
	}
	if f.ErrorContains != "" {
		add("error-contains", strconv.Quote(f.ErrorContains))
	}
	if f.MinAttempts > 0 {
		add("min-attempts", strconv.Itoa(f.MinAttempts))
	}
	for _, t := range []struct {
		name string
		at   time.Time
	}{{"since", f.Since}, {"until", f.Until}, {"first-since", f.FirstSince}, {"first-until", f.FirstUntil}} {
		if !t.at.IsZero() {
			add(t.name, t.at.UTC().Format(time.RFC3339Nano))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "no filter")
	}
	if r.Limit > 0 {
		add("limit", strconv.Itoa(r.Limit))
	}
	return strings.Join(parts, " ")
}

// opJSON is an operation in JSON: its request, cancel and the owners'
// statuses as the meta topic holds them, with their sum.
type opJSON struct {
	*deadop.Request
	State    string          `json:"state"`
	Count    int             `json:"count"`
	Progress progressJSON    `json:"progress"`
	Cancel   *deadop.Cancel  `json:"cancel,omitempty"`
	Owners   []deadop.Status `json:"owners"`
}

// progressJSON is deadop.Progress in JSON; Left counts the unreported
// too, as the table's LEFT does.
type progressJSON struct {
	Done        int  `json:"done"`
	Failed      int  `json:"failed"`
	FailedAgain int  `json:"failed_again"`
	Skipped     int  `json:"skipped"`
	Left        int  `json:"left"`
	Unreported  int  `json:"unreported"`
	Over        bool `json:"over"`
}

type opsJSON struct {
	Operations []opJSON `json:"operations"`
	More       int      `json:"more,omitempty"`
}

func opJSONOf(op *metaOp) opJSON {
	p := op.progress()
	return opJSON{Request: op.Request, State: opState(op), Count: len(op.Request.IDs), Cancel: op.Cancel, Owners: op.statuses(),
		Progress: progressJSON{Done: p.Done, Failed: p.Failed, FailedAgain: p.FailedAgain, Skipped: p.Skipped,
			Left: p.Left + p.Unreported, Unreported: p.Unreported, Over: op.over(time.Now())}}
}
