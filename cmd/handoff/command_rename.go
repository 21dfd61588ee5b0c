package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/snapshot"
)

func newRenameClassCmd() *cobra.Command {
	var sf stateFlags
	cmd := &cobra.Command{
		Use:   "rename-class STATE OLD NEW",
		Short: "Give a renamed class's saved records to its new name in a stopped service's state file",
		Long: `Rename-class gives every record of class OLD in the state file STATE
(pending, dead letters, delayed and parked messages, its pause) the class
NEW, in one transaction, so that the next start of a service that renamed
the class re-pushes, requeues and delivers them as NEW's instead of making
them dead letters of an unknown class. Running it again changes nothing. A
running service holds the file's lock: configure the mapping instead
(runtime.Config.ClassRenames, rental's -rename-class OLD=NEW), which does
the same at start.`,
		Args: stateArgs(2, 2, "OLD NEW"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			from, to := args[1], args[2]
			if from == "" || to == "" || from == to {
				return usagef("need two different non-empty class names, got %q and %q", from, to)
			}
			err := withState(args[0], &sf, func(st *snapshot.State) error {
				renamed, err := st.RenameClasses(map[string]string{from: to})
				if err != nil {
					return err
				}
				counts := renamed[from]
				var parts []string
				total := 0
				for _, b := range slices.Sorted(maps.Keys(counts)) {
					total += counts[b]
					parts = append(parts, fmt.Sprintf("%s %d", b, counts[b]))
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "renamed class %q to %q in %s: %d records (%s)\n", from, to, args[0], total, strings.Join(parts, ", "))
				return err
			})
			if le, ok := errors.AsType[*lockedError](err); ok {
				return fmt.Errorf("%s is in use by a running service (lock not released within %s): "+
					"give the service the mapping instead (runtime.Config.ClassRenames; rental -rename-class %s=%s), which renames at start", le.path, le.wait, from, to)
			}
			return err
		}),
	}
	sf.register(cmd)
	return cmd
}
