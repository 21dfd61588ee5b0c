package main

import (
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/snapshot"
)

func newDeadShowCmd() *cobra.Command {
	var (
		sf       stateFlags
		jsonFlag bool
	)
	cmd := &cobra.Command{
		Use:   "show STATE KEY",
		Short: "Show one dead letter in full: envelope, error, headers and value",
		Long: `Show prints everything the state file STATE keeps for the dead letter KEY.
Keys, header values and the value are printed as text when they are valid
UTF-8 without control characters, else as hex.`,
		Args: stateArgs(1, 1, "KEY"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			key, err := parseKey(args[1])
			if err != nil {
				return err
			}
			return withState(args[0], &sf, func(st *snapshot.Store) error {
				var rec snapshot.Record
				var ok bool
				err := st.View(func(tx *snapshot.Tx) (err error) { rec, ok, err = tx.GetDead(key); return err })
				if err != nil {
					return err
				}
				if !ok {
					return usagef("no dead letter with key %d in %s", key, args[0])
				}
				if jsonFlag {
					return writeJSON(cmd.OutOrStdout(), toRecordJSON(key, &rec))
				}
				return printRecord(cmd.OutOrStdout(), key, &rec)
			})
		}),
	}
	sf.register(cmd)
	cmd.Flags().BoolVar(&jsonFlag, "json", false, "print JSON (bytes in base64) instead of text")
	return cmd
}

func printRecord(w io.Writer, key uint64, r *snapshot.Record) error {
	m := &r.Message
	tab := newTable(w)
	origin := "- (submitted in-process)"
	if m.Origin.IsKafka() {
		origin = fmt.Sprintf("topic %s, partition %d, offset %d", oneLine(m.Origin.Topic, 200), m.Origin.Partition, m.Origin.Offset)
	}
	rows := [][2]string{
		{"key", fmt.Sprint(key)},
		{"id", oneLine(m.ID, 500)},
		{"class", oneLine(m.Class, 200)},
		{"origin", origin},
		{"attempts", fmt.Sprint(m.Attempt)},
		{"redeliveries", fmt.Sprint(r.Redeliveries)},
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

// recordJSON is a record as the --json flags print it. Byte fields are
// base64 (encoding/json), null when nil.
type recordJSON struct {
	Key          uint64       `json:"key"`
	ID           string       `json:"id"`
	Class        string       `json:"class"`
	MessageKey   []byte       `json:"message_key"`
	Value        []byte       `json:"value"`
	Headers      []headerJSON `json:"headers"`
	Topic        string       `json:"topic,omitempty"`
	Partition    int          `json:"partition"`
	Offset       int64        `json:"offset"`
	Attempt      int          `json:"attempt"`
	Redeliveries int          `json:"redeliveries"`
	FirstSeen    time.Time    `json:"first_seen,omitzero"`
	Reason       string       `json:"reason"`
	Error        string       `json:"error,omitempty"`
	FirstFailed  time.Time    `json:"first_failed,omitzero"`
	SavedAt      time.Time    `json:"saved_at,omitzero"`
}

type headerJSON struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

func toRecordJSON(key uint64, r *snapshot.Record) recordJSON {
	m := &r.Message
	j := recordJSON{
		Key: key, ID: m.ID, Class: m.Class, MessageKey: m.Key, Value: m.Value,
		Topic: m.Origin.Topic, Partition: m.Origin.Partition, Offset: m.Origin.Offset,
		Attempt: m.Attempt, Redeliveries: r.Redeliveries, FirstSeen: m.FirstSeen,
		Reason: r.Reason, Error: r.Err, FirstFailed: r.FirstFailed, SavedAt: r.SavedAt,
		Headers: make([]headerJSON, len(m.Headers)),
	}
	for i, h := range m.Headers {
		j.Headers[i] = headerJSON{Key: h.Key, Value: h.Value}
	}
	return j
}

type deadPageJSONOut struct {
	DeadLetters []recordJSON `json:"dead_letters"`
	// Next is the --after value of the next page; absent on the last.
	Next uint64 `json:"next,omitempty"`
}

func deadPageJSON(page []snapshot.Entry, next uint64) deadPageJSONOut {
	out := deadPageJSONOut{DeadLetters: make([]recordJSON, len(page)), Next: next}
	for i := range page {
		out.DeadLetters[i] = toRecordJSON(page[i].Key, &page[i].Record)
	}
	return out
}
