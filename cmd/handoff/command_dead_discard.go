package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/snapshot"
)

func newDeadDiscardCmd() *cobra.Command {
	var (
		sf  stateFlags
		sel deadSelection
	)
	cmd := &cobra.Command{
		Use:   "discard STATE ID... | --all [--class C]",
		Short: "Delete dead letters for good",
		Long: `Discard deletes the dead letters with the given IDs (or all, or all of a
class) from the state file STATE in one transaction. They cannot be
recovered: use 'dead show' or 'dead list --json' first if you may need
them. Dead letters that cannot be decoded are deleted too, by ID or with
--all (without --class).`,
		Args: stateArgs(0, -1, "ID"),
		RunE: sel.run(&sf, "discard", true, func(cmd *cobra.Command, st *snapshot.State, dead []snapshot.DeadRef) error {
			if err := st.DeleteDead(keys(dead)...); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "discarded %d %s\n", len(dead), sel.what())
			return err
		}),
	}
	sf.register(cmd)
	sel.register(cmd, "discard")
	return cmd
}
