package main

import (
	"encoding/binary"
	"errors"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/snapshot"
)

func newDeadCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "List, show, requeue or discard the dead letters of a stopped service's state file",
		Long: `The dead commands work on the dead-letter bucket of a state file, offline:
the service must be stopped (a running one holds the file's lock; use its
admin API instead). Keys are the decimal record keys 'dead list' prints.
'dead list --brokers HOST:PORT --group GROUP' reads the dead letters of
every instance of a group from its changelog topics on the cluster.`,
		Args: noArgs,
		RunE: missingCommand,
	}
	cmd.AddCommand(
		newDeadListCmd(),
		newDeadShowCmd(),
		newDeadRequeueCmd(),
		newDeadDiscardCmd(),
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

// decodeErrorKey returns the sequence key of an undecodable record, or 0
// when its stored key is not one.
func decodeErrorKey(de *snapshot.DecodeError) uint64 {
	if len(de.Key) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(de.Key)
}
