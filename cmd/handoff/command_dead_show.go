package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/internal/recordjson"
	"github.com/handoff-go/handoff/snapshot"
)

func newDeadShowCmd() *cobra.Command {
	var (
		sf       stateFlags
		jsonFlag bool
	)
	cmd := &cobra.Command{
		Use:   "show STATE ID|MESSAGE-ID",
		Short: "Show one dead letter in full: envelope, error, headers and value",
		Long: `Show prints everything the state file STATE keeps for one dead letter,
named by its ID (as dead list prints it, e.g. 3f2a9c01d4e5b6a7-12) or by
its message ID ("topic/partition/offset" for a Kafka record). Text of a
dead letter ID's form is tried as one first, then as a message ID. Keys,
header values and the value are printed as text when they are valid
UTF-8 without control characters, else as hex. --json prints the admin
API's JSON (GET /api/dead/{id}).`,
		Args: stateArgs(1, 1, "ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			return withStateReadOnly(args[0], &sf, func(st *snapshot.State) error {
				e, ok, idErr, err := findDead(st, args[1])
				if err != nil {
					return err
				}
				if !ok {
					if idErr != nil {
						return usagef("no dead letter with message ID %q in %s, and %v", args[1], args[0], idErr)
					}
					return usagef("no dead letter with ID or message ID %q in %s", args[1], args[0])
				}
				if jsonFlag {
					return writeJSON(cmd.OutOrStdout(), toRecordJSON(e.String(), &e.Record))
				}
				return printRecord(cmd.OutOrStdout(), e.String(), &e.Record)
			})
		}),
	}
	sf.register(cmd)
	cmd.Flags().BoolVar(&jsonFlag, "json", false, "print JSON (bytes in base64) instead of text")
	return cmd
}

// findDead returns the dead letter named by s, with its ID: the one
// whose dead letter ID s is, else the first whose message ID is s.
// Undecodable dead letters are passed over in the search by message ID.
// idErr is why s, of an ID's form, names no dead letter of this file for
// sure (a bare number in a file with IDs).
func findDead(st *snapshot.State, s string) (e snapshot.DeadEntry, ok bool, idErr, err error) {
	if did, perr := snapshot.ParseDeadID(s); perr == nil {
		e, ok, err = st.DeadByID(did)
		switch {
		case errors.Is(err, snapshot.ErrDeadID):
			idErr = err
		case ok || err != nil:
			return e, ok, nil, err
		}
	}
	e, ok, err = st.DeadByMessageID(s)
	return e, ok, idErr, err
}

func printRecord(w io.Writer, id string, r *snapshot.Record) error {
	m := &r.Message
	tab := newTable(w)
	origin := "- (submitted in-process)"
	if m.Origin.IsKafka() {
		origin = fmt.Sprintf("topic %s, partition %d, offset %d", oneLine(m.Origin.Topic, 200), m.Origin.Partition, m.Origin.Offset)
	}
	rows := [][2]string{
		{"key", id},
		{"id", oneLine(m.ID, 500)},
		{"class", oneLine(m.Class, 200)},
		{"origin", origin},
		{"attempts", fmt.Sprint(m.Attempt)},
		{"redeliveries", fmt.Sprint(r.Redeliveries)},
		{"timestamp", fmtTime(m.Timestamp)},
		{"first seen", fmtTime(m.FirstSeen)},
		{"first failed", fmtTime(r.FirstFailed)},
		{"last failed", fmtTime(r.SavedAt)},
		{"reason", oneLine(r.Reason, 200)},
		{"message key", fmtBytes(m.Key)},
	}
	for _, row := range rows {
		tab.row(row[0], row[1])
	}
	if err := tab.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "error:")
	if r.Err == "" {
		fmt.Fprintln(w, "  -")
	} else {
		fmt.Fprint(w, indent(safeText(r.Err), "  "))
	}
	fmt.Fprintf(w, "headers: %d\n", len(m.Headers))
	tab = newTable(w)
	for _, h := range m.Headers {
		tab.row("  "+oneLine(h.Key, 200), fmtBytes(h.Value))
	}
	if err := tab.flush(); err != nil {
		return err
	}
	switch {
	case m.Value == nil:
		fmt.Fprintln(w, "value: (none)")
	case len(m.Value) == 0:
		fmt.Fprintln(w, "value: (empty)")
	case isText(m.Value):
		fmt.Fprintf(w, "value: text, %d bytes\n", len(m.Value))
		fmt.Fprint(w, indent(string(m.Value), "  "))
	default:
		fmt.Fprintf(w, "value: hex, %d bytes\n", len(m.Value))
		fmt.Fprint(w, indent(hex.Dump(m.Value), "  "))
	}
	return nil
}

// safeText keeps s's lines but escapes anything else unprintable.
func safeText(s string) string {
	if isText([]byte(s)) {
		return s
	}
	var out []byte
	for len(s) > 0 {
		line, rest, found := strings.Cut(s, "\n")
		out = append(out, oneLine(line, len(line)+1)...)
		if found {
			out = append(out, '\n')
		}
		s = rest
	}
	return string(out)
}

// recordJSON is a dead letter as the --json flags print it: the admin
// API's JSON (GET /api/dead/{key}), from the same encoder.
type recordJSON = recordjson.Dead

func toRecordJSON(key string, r *snapshot.Record) recordJSON {
	return recordjson.DeadOf(key, &r.Message, recordjson.DeadFields{Reason: r.Reason, Err: r.Err,
		Redeliveries: r.Redeliveries, FirstFailed: r.FirstFailed, LastFailed: r.SavedAt})
}

type deadPageJSONOut struct {
	DeadLetters []recordJSON `json:"dead_letters"`
	// Next is the --after value of the next page; absent on the last.
	Next uint64 `json:"next,omitempty"`
	// Total counts the dead letters the search selects, on every page
	// ('dead list' only).
	Total *int `json:"total,omitempty"`
}

// deadPageJSON is page in JSON.
func deadPageJSON(page []snapshot.DeadEntry, next uint64) deadPageJSONOut {
	out := deadPageJSONOut{DeadLetters: make([]recordJSON, len(page)), Next: next}
	for i := range page {
		out.DeadLetters[i] = toRecordJSON(page[i].String(), &page[i].Record)
	}
	return out
}
