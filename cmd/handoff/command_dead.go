package main

import (
	"github.com/spf13/cobra"
)

func newDeadCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "List, show, requeue or discard dead letters: of a stopped service's state file, or of a running group",
		Long: `The dead commands work on the dead-letter bucket of a state file, offline:
the service must be stopped (a running one holds the file's lock; use its
admin API instead). A dead letter is named by its ID, as 'dead list' and
the admin API print it: the first 8 bytes of the ID of the state file
that wrote it, in hex, a dash and its key in that file
(3f2a9c01d4e5b6a7-12). The ID is the same on every instance of the group
and stays when the dead letter's partition moves to another instance.
A file that never ran with the changelog (-local-state-only) has no file
ID: its dead letters' IDs are their bare keys (12); a bare number is
refused on a file that has one, where it could name another instance's
dead letter.
'dead list --brokers HOST:PORT --group GROUP' reads the dead letters of
every instance of a group from its changelog topics on the cluster;
'dead requeue|discard --brokers HOST:PORT --group GROUP' requeue or
discard a selection of them online, through the running instances that
own them (with a dry run, a rate limit and progress), and 'dead ops'
lists those operations.`,
		Args: noArgs,
		RunE: missingCommand,
	}
	cmd.AddCommand(
		newDeadListCmd(),
		newDeadShowCmd(),
		newDeadRequeueCmd(),
		newDeadDiscardCmd(),
		newDeadOpsCmd(),
	)
	return cmd
}
