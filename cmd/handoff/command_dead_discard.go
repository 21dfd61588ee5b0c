package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/internal/deadop"
	"github.com/handoff-go/handoff/snapshot"
)

func newDeadDiscardCmd() *cobra.Command {
	var (
		sf  stateFlags
		sel deadSelection
		of  deadOpFlags
	)
	cmd := &cobra.Command{
		Use: "discard STATE ID... | --all [--class C] | --brokers HOST:PORT[,...] --group GROUP ID... | --all | SEARCH FLAGS",
		Example: `  handoff dead discard state.db 3f2a9c01d4e5b6a7-12
  handoff dead discard state.db --all --class orders
  handoff dead discard --brokers kafka:9092 --group rental --class orders --error-contains timeout --dry-run
  handoff dead discard --brokers kafka:9092 --group rental --class orders --since 2026-12-07T10:00:00Z --rate 20 --yes`,
		Short: "Delete dead letters for good: of a stopped service's state file, or of a running group through its owners",
		Long: `Discard deletes the dead letters with the given IDs (or all, or all of a
class) from the state file STATE in one transaction. They cannot be
recovered: use 'dead show' or 'dead list --json' first if you may need
them. Dead letters that cannot be decoded are deleted too, by ID or with
--all (without --class).

With --brokers and --group instead of STATE it discards online, through
the running group, as 'dead requeue --brokers' requeues (see its help:
the same selection flags, --dry-run, --rate, --limit, --wait, --who,
progress, Ctrl-C to cancel): the owner of each dead letter's partition
deletes it. A selection of more than one dead letter needs --yes:
without it the command prints how many it selects and exits with status
2, writing nothing.`,
		Args: deadOpArgs,
		RunE: deadOpRun(deadop.Discard, &sel, &of, sel.run(&sf, "discard", true, func(cmd *cobra.Command, st *snapshot.State, dead []snapshot.DeadRef) error {
			if err := st.Delete(deadSources(dead)...); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "discarded %d %s\n", len(dead), sel.what())
			return err
		})),
	}
	sf.register(cmd)
	sel.register(cmd, "discard")
	of.register(cmd, deadop.Discard)
	return cmd
}
