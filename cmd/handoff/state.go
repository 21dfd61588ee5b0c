package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/snapshot"
)

// defaultLockTimeout is how long a command waits for a running service's
// lock on the state file.
const defaultLockTimeout = 500 * time.Millisecond

// stateFlags are the flags of every command that opens a state file.
type stateFlags struct {
	lockTimeout time.Duration
	// cmd is the command the flags are registered on: where a write's
	// warnings go.
	cmd *cobra.Command
}

func (f *stateFlags) register(cmd *cobra.Command) {
	f.cmd = cmd
	cmd.Flags().DurationVar(&f.lockTimeout, "lock-timeout", defaultLockTimeout,
		"how long to wait for another process's lock on the state file")
}

func (f *stateFlags) validate() error {
	if f.lockTimeout <= 0 {
		return usagef("--lock-timeout must be > 0, got %s", f.lockTimeout)
	}
	return nil
}

// lockedError says that a running service holds the state file.
type lockedError struct {
	path string
	wait time.Duration
	err  error // wraps snapshot.ErrLocked
}

func (e *lockedError) Error() string {
	return fmt.Sprintf("%s is in use by a running service (lock not released within %s): "+
		"stop the service first, or use that service's admin API to list, requeue or discard its dead letters",
		e.path, e.wait)
}

func (e *lockedError) Unwrap() error { return e.err }

// withState opens the existing state file at path for writing, runs fn
// on it and closes it, joining the errors. A running service's lock
// makes it fail with a lockedError.
func withState(path string, f *stateFlags, fn func(st *snapshot.State) error) error {
	return openState(path, f, false, fn)
}

// withStateReadOnly is withState for commands that only read: it changes
// nothing in the file, and on the file of a running service (whose lock
// it waits for up to --lock-timeout) it reads a consistent copy (see
// snapshot.Options.ReadOnly).
func withStateReadOnly(path string, f *stateFlags, fn func(st *snapshot.State) error) error {
	return openState(path, f, true, fn)
}

func openState(path string, f *stateFlags, readOnly bool, fn func(st *snapshot.State) error) (err error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("state file %s does not exist", path)
	case err != nil:
		return fmt.Errorf("state file %s: %w", path, err)
	case fi.IsDir():
		return fmt.Errorf("state file %s is a directory", path)
	}
	st, err := snapshot.Open(path, snapshot.Options{LockTimeout: f.lockTimeout, ReadOnly: readOnly, Existing: true})
	if errors.Is(err, snapshot.ErrLocked) {
		return &lockedError{path: path, wait: f.lockTimeout, err: err}
	}
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	if !readOnly {
		warnChangelog(st, f)
	}
	return fn(st)
}

// warnChangelog warns, before a command writes to the state file of a
// service that runs with the state changelog, that the write reaches
// the file only: the next restore of the records' partitions, on any
// instance, reads the changelog, which does not have it.
func warnChangelog(st *snapshot.State, f *stateFlags) {
	info, err := st.FileInfo()
	if err != nil || !info.HasFileID {
		return
	}
	w := io.Writer(os.Stderr)
	if f.cmd != nil {
		w = f.cmd.ErrOrStderr()
	}
	fmt.Fprintf(w, "warning: %s is written with a state changelog (file id %x): this command changes the file only, not the changelog, "+
		"so a restore of the records' partitions undoes it; use the running service's admin API instead\n", st.Path(), info.FileID)
}

// parseDeadID parses a dead letter ID as the commands (and the admin
// API) print it: 16 hex digits, a dash and a number, or a bare number
// in a file that never ran with the changelog.
func parseDeadID(s string) (snapshot.DeadID, error) {
	id, err := snapshot.ParseDeadID(s)
	if err != nil {
		return id, usagef("malformed dead letter ID %q: want 16 hex digits, a dash and a number (e.g. 3f2a9c01d4e5b6a7-12), as 'dead list' prints", s)
	}
	return id, nil
}

// stateArgs returns an Args validator for commands taking STATE and then
// between min and max more arguments (max < 0: any number), described by
// more for the error message.
func stateArgs(min, max int, more string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return usagef("missing STATE, the path of a state file")
		case len(args)-1 < min:
			return usagef("missing %s after STATE", more)
		case max >= 0 && len(args)-1 > max:
			return usagef("unexpected argument %q", args[1+max])
		}
		return nil
	}
}
