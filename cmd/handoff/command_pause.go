package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/snapshot"
)

func newPauseCmd() *cobra.Command {
	var (
		sf     stateFlags
		reason string
	)
	cmd := &cobra.Command{
		Use:   "pause STATE CLASS [--reason TEXT]",
		Short: "Pause a class in a stopped service's state file",
		Long: `Pause records in the state file STATE that class CLASS is paused: the next
start of the service comes back with the class paused (it takes and starts
no messages; those it holds keep their place) until it is resumed through
the admin API (POST /api/classes/CLASS/resume) or 'handoff resume'. A
running service holds the file's lock: pause it through its admin API
(POST /api/classes/CLASS/pause) instead. The class name is not checked: the
file does not know the service's configuration.`,
		Args: stateArgs(1, 1, "CLASS"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			if args[1] == "" {
				return usagef("empty CLASS")
			}
			return pauseState(args[0], &sf, func(st *snapshot.Store) error {
				if err := st.Update(func(tx *snapshot.Tx) error {
					return tx.PutPause(args[1], snapshot.Pause{Reason: reason, Since: time.Now()})
				}); err != nil {
					return err
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "paused class %q in %s\n", args[1], args[0])
				return err
			})
		}),
	}
	sf.register(cmd)
	cmd.Flags().StringVar(&reason, "reason", "", "why the class is paused, shown by the admin API and dashboard")
	return cmd
}

func newResumeCmd() *cobra.Command {
	var sf stateFlags
	cmd := &cobra.Command{
		Use:   "resume STATE CLASS",
		Short: "Resume a paused class in a stopped service's state file",
		Long: `Resume removes the pause of class CLASS from the state file STATE: the next
start runs the class. A class that is not paused is left as it is. A running
service holds the file's lock: resume the class through its admin API
(POST /api/classes/CLASS/resume) instead.`,
		Args: stateArgs(1, 1, "CLASS"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			return pauseState(args[0], &sf, func(st *snapshot.Store) error {
				var had bool
				if err := st.Update(func(tx *snapshot.Tx) (err error) { had, err = tx.DeletePause(args[1]); return err }); err != nil {
					return err
				}
				msg := "resumed class %q in %s\n"
				if !had {
					msg = "class %q was not paused in %s; nothing changed\n"
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), msg, args[1], args[0])
				return err
			})
		}),
	}
	sf.register(cmd)
	return cmd
}

// pauseLockedError says that a running service holds the state file, and
// that its admin API pauses and resumes classes.
type pauseLockedError struct{ *lockedError }

func (e pauseLockedError) Error() string {
	return fmt.Sprintf("%s is in use by a running service (lock not released within %s): "+
		"pause or resume the class through that service's admin API (POST /api/classes/CLASS/pause or /resume)",
		e.path, e.wait)
}

// pauseState is withState with the pause commands' message for a locked
// file.
func pauseState(path string, sf *stateFlags, fn func(st *snapshot.Store) error) error {
	err := withState(path, sf, fn)
	var le *lockedError
	if errors.As(err, &le) {
		return pauseLockedError{le}
	}
	return err
}
