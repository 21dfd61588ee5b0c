package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/internal/deadop"
	"github.com/handoff-go/handoff/snapshot"
)

// deadSelection is which dead letters requeue and discard act on: the
// IDs given, or --all (of --class).
type deadSelection struct {
	all   bool
	class string
}

func (s *deadSelection) register(cmd *cobra.Command, verb string) {
	cmd.Flags().BoolVar(&s.all, "all", false, verb+" every dead letter (of --class, if given) instead of the IDs")
	cmd.Flags().StringVar(&s.class, "class", "", "with --all, or with --brokers: only dead letters of this message class")
}

// run is the RunE of requeue and discard: it checks the flags, opens the
// state file, resolves the selection (allowBad: undecodable dead letters
// may be selected) and calls act with them, unless there are none.
func (s *deadSelection) run(sf *stateFlags, verb string, allowBad bool, act func(cmd *cobra.Command, st *snapshot.State, sel []snapshot.DeadRef) error) func(*cobra.Command, []string) error {
	return runE(func(cmd *cobra.Command, args []string) error {
		if err := sf.validate(); err != nil {
			return err
		}
		given, err := s.parse(args[1:])
		if err != nil {
			return err
		}
		return withState(args[0], sf, func(st *snapshot.State) error {
			sel, bad, err := s.resolve(st, given, allowBad)
			if err != nil {
				return err
			}
			warnUndecodable(cmd.ErrOrStderr(), bad)
			if len(sel) == 0 {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "no %s to %s\n", s.what(), verb)
				return err
			}
			return act(cmd, st, sel)
		})
	})
}

// parse checks the arguments after STATE against the flags and returns
// the IDs given, without touching the file.
func (s *deadSelection) parse(args []string) ([]snapshot.DeadID, error) {
	switch {
	case s.all && len(args) > 0:
		return nil, usagef("give IDs or --all, not both")
	case !s.all && len(args) == 0:
		return nil, usagef("missing ID after STATE (or --all)")
	case !s.all && s.class != "":
		return nil, usagef("--class needs --all")
	}
	ids := make([]snapshot.DeadID, 0, len(args))
	for _, a := range args {
		id, err := parseDeadID(a)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// resolve returns the dead letters of st to act on: those of the given
// IDs, each checked to be a dead letter of the file (a usage error names
// those that are not), or all dead letters of the class. Dead letters
// that cannot be decoded are included only when undecodable is true
// (discard): with the given IDs they are otherwise an error, with --all
// they are left out and returned.
func (s *deadSelection) resolve(st *snapshot.State, given []snapshot.DeadID, undecodable bool) ([]snapshot.DeadRef, []snapshot.UndecodableDead, error) {
	if !s.all {
		var missing []string
		sel := make([]snapshot.DeadRef, 0, len(given))
		for _, id := range given {
			e, ok, err := st.DeadByID(id)
			if errors.Is(err, snapshot.ErrDeadID) {
				return nil, nil, usagef("%v; nothing changed", err)
			}
			var de *snapshot.DecodeError
			switch {
			case errors.As(err, &de) && undecodable:
			case errors.As(err, &de):
				return nil, nil, fmt.Errorf("dead letter %s in %s cannot be decoded, so it cannot be requeued (discard it): %w", id, st.Path(), err)
			case err != nil:
				return nil, nil, err
			case !ok:
				missing = append(missing, id.String())
				continue
			}
			sel = append(sel, e.DeadRef)
		}
		if len(missing) > 0 {
			return nil, nil, usagef("no dead letter with ID %s in %s; nothing changed", strings.Join(missing, ", "), st.Path())
		}
		return sel, nil, nil
	}
	sel, bad, err := st.DeadRefs(s.class)
	if err != nil {
		return nil, nil, err
	}
	if undecodable && s.class == "" {
		for _, u := range bad {
			if u.Key != 0 {
				sel = append(sel, u.DeadRef)
			}
		}
		bad = nil
	}
	return sel, bad, nil
}

// keys returns the keys in the file of sel.
// deadSources returns the sources of the dead letters sel, for
// snapshot.State.Delete.
func deadSources(sel []snapshot.DeadRef) []snapshot.Source {
	out := make([]snapshot.Source, len(sel))
	for i := range sel {
		out[i] = snapshot.Source{From: snapshot.FromDead, Key: sel[i].Key}
	}
	return out
}

func keys(sel []snapshot.DeadRef) []uint64 {
	out := make([]uint64, len(sel))
	for i := range sel {
		out[i] = sel[i].Key
	}
	return out
}

// what names the selection for messages: "dead letters" or "dead letters
// of class C".
func (s *deadSelection) what() string {
	if s.class != "" {
		return fmt.Sprintf("dead letters of class %q", s.class)
	}
	return "dead letters"
}

func newDeadRequeueCmd() *cobra.Command {
	var (
		sf  stateFlags
		sel deadSelection
		of  deadOpFlags
	)
	cmd := &cobra.Command{
		Use: "requeue STATE ID... | --all [--class C] | --brokers HOST:PORT[,...] --group GROUP ID... | --all | SEARCH FLAGS",
		Example: `  handoff dead requeue state.db 3f2a9c01d4e5b6a7-12
  handoff dead requeue state.db --all --class orders
  handoff dead requeue --brokers kafka:9092 --group rental --class orders --error-contains timeout --dry-run
  handoff dead requeue --brokers kafka:9092 --group rental --class orders --since 2026-12-07T10:00:00Z --rate 20`,
		Short: "Requeue dead letters: of a stopped service's state file, or of a running group through its owners",
		Long: `Requeue moves the dead letters with the given IDs (or all, or all of a class) of the
state file STATE to its pending bucket in one transaction, with their
attempt count reset. The service re-pushes pending messages into their
class's pool when it next starts, before it fetches from Kafka.

With --brokers and --group instead of STATE it requeues online, through
the running group: it lists the group's dead letters from its changelog
(as 'dead list --brokers' does), picks those the selection takes (the
IDs given, or --all, or the search flags: --class, --topic, --partition,
--key, --error-contains, --min-attempts, --since, --until, --first-since,
--first-until, and-ed as in 'dead list'), the oldest first up to
--limit, and writes a request naming them by ID to the group's meta
topic (GROUP.handoff-meta). The instance owning each dead letter's
partition requeues it into its class's pool (a dead letter that is no
longer one is skipped, so nothing is requeued twice), at most --rate a
second for the whole group. The command prints the progress (done,
failed again, left) until every owner is done, or until --wait passes
(the owners go on; 'dead ops' shows them). Ctrl-C cancels the operation:
the owners stop taking its dead letters, what they did stays done.
--dry-run prints how many the selection takes and a sample, and writes
nothing. 'dead ops' lists the group's recent operations, with who asked
(--who, default the OS user name).`,
		Args: deadOpArgs,
		RunE: deadOpRun(deadop.Requeue, &sel, &of, sel.run(&sf, "requeue", false, func(cmd *cobra.Command, st *snapshot.State, dead []snapshot.DeadRef) error {
			newKeys, err := st.RequeueDead(keys(dead)...)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !sel.all {
				for i, d := range dead {
					if i < len(newKeys) {
						fmt.Fprintf(out, "dead %s -> pending %d\n", d.String(), newKeys[i])
					}
				}
			}
			_, err = fmt.Fprintf(out, "requeued %d %s to pending; the service handles them again at its next start\n",
				len(newKeys), sel.what())
			return err
		})),
	}
	sf.register(cmd)
	sel.register(cmd, "requeue")
	of.register(cmd, deadop.Requeue)
	return cmd
}
