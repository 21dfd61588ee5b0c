package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/snapshot"
)

// errorWidth is how many characters of a dead letter's error 'dead list'
// prints.
const errorWidth = 60

func newDeadListCmd() *cobra.Command {
	var (
		sf       stateFlags
		class    string
		after    uint64
		limit    int
		jsonFlag bool
	)
	cmd := &cobra.Command{
		Use:   "list STATE",
		Short: "List dead letters, oldest first, a page at a time",
		Long: `List prints the dead letters of the state file STATE in key (save) order:
key, class, message ID, attempts, when it first and last failed, and the
start of its error. When more remain it prints the --after value of the
next page.`,
		Args: stateArgs(0, 0, ""),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			if limit <= 0 {
				return usagef("--limit must be > 0, got %d", limit)
			}
			return withStateReadOnly(args[0], &sf, func(st *snapshot.Store) error {
				var page []snapshot.Entry
				var next uint64
				// The page comes with the decode errors of its records.
				err := st.View(func(tx *snapshot.Tx) (err error) { page, next, err = tx.DeadPage(class, after, limit); return err })
				var bad []*snapshot.DecodeError
				if err != nil {
					var ok bool
					if bad, ok = decodeErrors(err); !ok {
						return err
					}
				}
				if jsonFlag {
					err = writeJSON(cmd.OutOrStdout(), deadPageJSON(page, next))
				} else {
					err = printDeadList(cmd.OutOrStdout(), page, next, class)
				}
				warnUndecodable(cmd.ErrOrStderr(), bad)
				return err
			})
		}),
	}
	sf.register(cmd)
	cmd.Flags().StringVar(&class, "class", "", "only dead letters of this message class")
	cmd.Flags().Uint64Var(&after, "after", 0, "start after this key (the next page's value is printed at the end)")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many dead letters")
	cmd.Flags().BoolVar(&jsonFlag, "json", false, "print JSON instead of a table")
	return cmd
}

func printDeadList(w io.Writer, page []snapshot.Entry, next uint64, class string) error {
	if len(page) == 0 {
		if class != "" {
			_, err := fmt.Fprintf(w, "no dead letters of class %q\n", class)
			return err
		}
		_, err := fmt.Fprintln(w, "no dead letters")
		return err
	}
	tab := newTable(w)
	tab.row("KEY", "CLASS", "ID", "ATTEMPTS", "FIRST FAILED", "LAST FAILED", "ERROR")
	for _, e := range page {
		r := &e.Record
		tab.row(e.Key, oneLine(r.Message.Class, 30), oneLine(r.Message.ID, 50),
			r.Message.Attempt, fmtTime(r.FirstFailed), fmtTime(r.SavedAt), oneLine(r.Err, errorWidth))
	}
	if err := tab.flush(); err != nil {
		return err
	}
	if next != 0 {
		_, err := fmt.Fprintf(w, "more: --after %d\n", next)
		return err
	}
	return nil
}

// warnUndecodable tells about dead letters that could not be decoded and
// so were left out.
func warnUndecodable(w io.Writer, bad []*snapshot.DecodeError) {
	for _, de := range bad {
		fmt.Fprintf(w, "warning: dead letter %d cannot be decoded and is left out (only 'dead discard' can remove it): %v\n",
			decodeErrorKey(de), de.Err)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
