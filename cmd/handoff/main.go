// Command handoff is the operator tool of handoff.
//
// It works on the state file of a service (the bbolt file a runtime keeps
// per instance): read-only, even while the service runs, or offline on a
// stopped service's file for what changes it; with --brokers and --group
// it reads a running group's dead letters from its changelog and has its
// instances requeue or discard them; it replays a retired instance's saved
// messages back to Kafka, and runs an embedded Kafka-protocol broker and
// the demo for local development:
//
//	handoff inspect STATE                      counts and ages per bucket and class (read-only)
//	handoff dead list STATE                    dead letters, a page at a time (read-only)
//	handoff dead list --brokers H --group G    every instance's dead letters, from the group's changelog
//	handoff dead show STATE ID|MESSAGE-ID      one dead letter in full (read-only)
//	handoff dead requeue STATE ID...|--all     move dead letters to pending
//	handoff dead discard STATE ID...|--all     delete dead letters
//	handoff dead requeue --brokers H --group G [--class C --error-contains S ...] [--dry-run] [--rate N] [--limit N]
//	                                           requeue a selection through the running group's owners, with progress
//	handoff dead discard --brokers H --group G ... [--yes]
//	                                           discard a selection the same way (--yes for more than one)
//	handoff dead ops --brokers H --group G     the group's recent dead-letter operations (audit trail), --cancel OP
//	handoff replay STATE --brokers HOST:PORT   produce saved messages to their topics
//	handoff pause STATE CLASS [--reason TEXT]  keep a class paused across the next start
//	handoff resume STATE CLASS                 remove a class's pause
//	handoff rename-class STATE OLD NEW         give a renamed class's saved records to its new name
//	handoff broker                             embedded broker until Ctrl-C
//	handoff demo                               the rental demo
//	handoff version                            the version the binary carries
//
// # State files
//
// A running service holds its state file's lock. Every command on a state
// file waits at most --lock-timeout (500ms) for it. Then the read-only
// commands (inspect, dead list, dead show) read a consistent copy of the
// file, taken into the temporary directory and removed after; the others
// fail saying the file is in use: stop the service first, or use the
// service's admin API.
// A command never creates a state file that does not exist, nor makes
// one of an empty file or of another program's bbolt database: it refuses
// them as not a handoff state file.
//
// # Exit status
//
// 0 on success, 1 when the command failed (the message names the file and
// key), 2 for bad usage (unknown flag, missing or malformed argument, a key
// the file does not hold). A failed or rejected command changes nothing
// unless its message says so; replay keeps what the broker acknowledged.
// 'dead requeue|discard --brokers' exit 0 once the owners are done with
// the operation, 1 when some of it failed or was acted on by no owner,
// it was canceled, --wait passed before its end (the owners go on) or
// Ctrl-C canceled it, and 2
// for a discard of more than one dead letter without --yes (nothing
// written).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff"
)

func main() {
	os.Exit(execute(context.Background(), newRootCmd(), os.Args[1:]))
}

// Exit statuses.
const (
	exitFailure = 1
	exitUsage   = 2
)

// newRootCmd builds the whole command tree. It keeps no state outside the
// tree, so tests build one per run.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "handoff",
		Short: "Inspect and repair handoff state files, replay them to Kafka, run a dev broker or the demo",
		Long: `handoff operates the state file (bbolt) that a handoff runtime keeps per
service instance: pending (saved at the last stop, re-pushed at the next
start), dead letters, quarantine, delayed and parked messages.

Commands on a state file work offline, on a stopped service's file;
with --brokers and --group, 'dead list', 'dead requeue', 'dead discard'
and 'dead ops' work on a running group through the cluster.`,
		Version:       version(),
		Args:          noArgs,
		RunE:          missingCommand,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.AddCommand(
		newInspectCmd(),
		newDeadCmd(),
		newReplayCmd(),
		newPauseCmd(),
		newResumeCmd(),
		newBrokerCmd(),
		newDemoCmd(),
		newRenameClassCmd(),
		newVersionCmd(),
	)
	return root
}

// execute runs root with args, prints the error if any, and returns the
// exit status.
func execute(ctx context.Context, root *cobra.Command, args []string) int {
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	code := exitCode(err)
	fmt.Fprintf(root.ErrOrStderr(), "handoff: %v\n", err)
	if code == exitUsage && cmd != nil {
		fmt.Fprintf(root.ErrOrStderr(), "run '%s --help' for usage\n", cmd.CommandPath())
	}
	return code
}

// usageError is bad command-line input: exit status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// exitError carries the exit status of an error returned by a command's
// RunE.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode maps an error from Execute to an exit status. Errors that did
// not come out of a command's run function are cobra's own (unknown
// command or flag, wrong arguments): usage errors.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var u *usageError
	if errors.As(err, &u) {
		return exitUsage
	}
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return exitUsage
}

// runE wraps a command's run function so that its errors are failures
// (exit status 1) unless they are usage errors.
func runE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := fn(cmd, args)
		if err == nil {
			return nil
		}
		var u *usageError
		var e *exitError
		if errors.As(err, &u) || errors.As(err, &e) {
			return err
		}
		return &exitError{code: exitFailure, err: err}
	}
}

// missingCommand is the run function of a command that only groups
// others.
func missingCommand(cmd *cobra.Command, _ []string) error {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return usagef("%s needs a command: %s", cmd.CommandPath(), strings.Join(names, ", "))
}

// noArgs rejects positional arguments, naming the first.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
		}
		return usagef("%s takes no arguments, got %q", cmd.CommandPath(), args[0])
	}
	return nil
}

// version returns the version the build carries ([handoff.Version]),
// with the module version and VCS revision the Go tool recorded when it
// knows them (a "go install ...@vX" build records the module version; a
// build from a clone records neither unless VCS stamping is on).
func version() string {
	v := handoff.Version
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	var extra []string
	if mv := bi.Main.Version; mv != "" && mv != "(devel)" && mv != "v"+handoff.Version {
		extra = append(extra, "module "+mv)
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
			if len(rev) > 12 {
				rev = rev[:12]
			}
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		extra = append(extra, "revision "+rev+dirty)
	}
	extra = append(extra, bi.GoVersion)
	return v + " (" + strings.Join(extra, ", ") + ")"
}

// newVersionCmd prints the same line as --version.
func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the handoff version this binary carries, its revision and Go version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "handoff version %s\n", version())
			return err
		},
	}
}
