package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/snapshot"
)

func newPauseCmd() *cobra.Command {
	var (
		sf     stateFlags
		reason string
		force  bool
	)
	cmd := &cobra.Command{
		Use:   "pause STATE CLASS [--reason TEXT]",
		Short: "Pause a class in a stopped service's state file",
		Long: `Pause records in the state file STATE that class CLASS is paused: the next
start of the service comes back with the class paused (it takes and starts
no messages; those it holds keep their place) until it is resumed through
the admin API (POST /api/classes/CLASS/resume) or 'handoff resume'. A
running service holds the file's lock: pause it through its admin API
(POST /api/classes/CLASS/pause) instead. With the state changelog (the
default), that start also writes the pause to the group's meta topic, so
every instance of the group pauses the class.

The class must be one the file has seen: one its service was configured
with when it last ran on it (the runtime records its classes in the file),
or the class of a record it holds, or one paused already. Any other name
is refused, since it is most often a typo that would pause nothing; --force
pauses it anyway (for a class a new version of the service brings).`,
		Args: stateArgs(1, 1, "CLASS"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			if args[1] == "" {
				return usagef("empty CLASS")
			}
			return pauseState(args[0], &sf, func(st *snapshot.State) error {
				if !force {
					if err := checkSeen(st, args[1]); err != nil {
						return err
					}
				}
				if err := st.PutPause(args[1], snapshot.Pause{Reason: reason, Since: time.Now()}); err != nil {
					return err
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "paused class %q in %s\n", args[1], args[0])
				return err
			})
		}),
	}
	sf.register(cmd)
	cmd.Flags().StringVar(&reason, "reason", "", "why the class is paused, shown by the admin API and dashboard")
	cmd.Flags().BoolVar(&force, "force", false, "pause CLASS even if the state file has never seen it (no service ran with it, no record or pause names it)")
	return cmd
}

// unknownClassError is a pause of a class the state file has never
// seen.
type unknownClassError struct {
	class, path string
	known       []string
}

func (e *unknownClassError) Error() string {
	known := "none"
	if len(e.known) > 0 {
		known = strings.Join(e.known, ", ")
	}
	return fmt.Sprintf("class %q is unknown to %s (classes it has seen: %s); nothing changed: check the name, or pass --force to pause it anyway",
		e.class, e.path, known)
}

// checkSeen returns an *unknownClassError unless the state file has seen
// class: its service recorded it, a pause names it, or a record of any
// bucket is of it. The records are read only when the first two do not
// name it (a file written before the runtime recorded its classes).
func checkSeen(st *snapshot.State, class string) error {
	seen := map[string]bool{}
	info, err := st.FileInfo()
	if err != nil {
		return err
	}
	for _, n := range info.Classes {
		seen[n] = true
	}
	for n := range info.Pauses {
		seen[n] = true
	}
	if seen[class] {
		return nil
	}
	rep, err := inspect(st, false, 0)
	if err != nil {
		return err
	}
	for _, b := range rep.Buckets {
		for n := range b.Classes {
			seen[n] = true
		}
	}
	if seen[class] {
		return nil
	}
	return &unknownClassError{class: class, path: st.Path(), known: slices.Sorted(maps.Keys(seen))}
}

func newResumeCmd() *cobra.Command {
	var sf stateFlags
	cmd := &cobra.Command{
		Use:   "resume STATE CLASS",
		Short: "Resume a paused class in a stopped service's state file",
		Long: `Resume removes the pause of class CLASS from the state file STATE: the next
start runs the class. A class that is not paused is left as it is. A running
service holds the file's lock: resume the class through its admin API
(POST /api/classes/CLASS/resume) instead. With the state changelog (the
default), a pause made through the admin API is kept in the group's meta
topic too, and the next start pauses the class again from there: resume
it through the admin API of any running instance.`,
		Args: stateArgs(1, 1, "CLASS"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			return pauseState(args[0], &sf, func(st *snapshot.State) error {
				had, err := st.DeletePause(args[1])
				if err != nil {
					return err
				}
				msg := "resumed class %q in %s\n"
				if !had {
					msg = "class %q was not paused in %s; nothing changed\n"
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), msg, args[1], args[0])
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
func pauseState(path string, sf *stateFlags, fn func(st *snapshot.State) error) error {
	err := withState(path, sf, fn)
	var le *lockedError
	if errors.As(err, &le) {
		return pauseLockedError{le}
	}
	return err
}
