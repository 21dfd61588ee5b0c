package main

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/snapshot"
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

// walkDead calls fn with every page of dead letters of class ("" for
// all), read in tx. Records that do not decode are not in the pages:
// they are returned, and do not stop the walk.
func walkDead(tx *snapshot.Tx, class string, fn func(page []snapshot.Entry)) ([]*snapshot.DecodeError, error) {
	var bad []*snapshot.DecodeError
	for after := uint64(0); ; {
		page, next, err := tx.DeadPage(class, after, pageSize)
		if err != nil {
			des, ok := decodeErrors(err)
			if !ok {
				return bad, err
			}
			bad = append(bad, des...)
		}
		fn(page)
		if next == 0 {
			return bad, nil
		}
		after = next
	}
}

// decodeErrors returns the *snapshot.DecodeErrors err joins, and false
// when it holds anything else.
func decodeErrors(err error) ([]*snapshot.DecodeError, bool) {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]*snapshot.DecodeError, 0, len(errs))
	for _, e := range errs {
		var de *snapshot.DecodeError
		if !errors.As(e, &de) {
			return nil, false
		}
		out = append(out, de)
	}
	return out, true
}

// deadIDOf returns the ID of the dead letter under key in tx's file,
// as text; the key itself when the ID cannot be read.
func deadIDOf(tx *snapshot.Tx, key uint64) string {
	id, err := tx.DeadID(key)
	if err != nil {
		return fmt.Sprintf("(key %d: %v)", key, err)
	}
	return id.String()
}

// decodeErrorKey returns the sequence key of an undecodable record, or 0
// when its stored key is not one.
func decodeErrorKey(de *snapshot.DecodeError) uint64 {
	if len(de.Key) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(de.Key)
}
