package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/runtime"
	"github.com/handoff-go/handoff/snapshot"
)

// errorWidth is how many characters of a dead letter's error 'dead list'
// prints.
const errorWidth = 60

func newDeadListCmd() *cobra.Command {
	var (
		sf       stateFlags
		cf       clusterFlags
		class    string
		after    uint64
		limit    int
		jsonFlag bool
		ff       deadFilterFlags
	)
	cmd := &cobra.Command{
		Use:   "list STATE | --brokers HOST:PORT[,...] --group GROUP",
		Short: "List or search dead letters, oldest or newest first: of a state file a page at a time, or of a group's changelog",
		Long:  deadListLong,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("brokers") {
				if len(args) > 0 {
					return usagef("give either STATE or --brokers, not both (got STATE %q)", args[0])
				}
				return nil
			}
			if len(args) == 0 {
				return usagef("missing STATE, the path of a state file, or --brokers and --group to read the group's changelog")
			}
			return stateArgs(0, 0, "")(cmd, args)
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if limit <= 0 {
				return usagef("--limit must be > 0, got %d", limit)
			}
			topic := ""
			if !cmd.Flags().Changed("brokers") && len(cf.topics) > 0 {
				if len(cf.topics) > 1 {
					return usagef("--topic: give it once for a state file (got %d)", len(cf.topics))
				}
				topic = cf.topics[0]
			}
			filter, err := ff.filter(cmd, class, topic)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("brokers") {
				for _, name := range []string{"after", "lock-timeout"} {
					if cmd.Flags().Changed(name) {
						return usagef("--%s is for a state file: not with --brokers", name)
					}
				}
				return listClusterDead(cmd, &cf, &filter, limit, jsonFlag)
			}
			for _, name := range clusterFlagNames {
				if name != "topic" && cmd.Flags().Changed(name) {
					return usagef("--%s needs --brokers", name)
				}
			}
			if err := sf.validate(); err != nil {
				return err
			}
			return withStateReadOnly(args[0], &sf, func(st *snapshot.State) error {
				return listStateDead(cmd, st, class, after, limit, jsonFlag, &filter)
			})
		}),
	}
	sf.register(cmd)
	cf.register(cmd)
	cmd.Flags().StringVar(&class, "class", "", "only dead letters of this message class")
	cmd.Flags().Uint64Var(&after, "after", 0, "start after this position in the file (the next page's value is printed at the end)")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many dead letters")
	cmd.Flags().BoolVar(&jsonFlag, "json", false, "print JSON instead of a table")
	ff.register(cmd)
	return cmd
}

// deadListLong is the long help of 'dead list'.
const deadListLong = `List prints the dead letters of the state file STATE in the order this
file saved them: the dead letter's ID (the KEY column: the same on every
instance of the group, see 'handoff dead'), class, message ID, attempts,
when it first and last failed, and the start of its error. When more
remain it prints the --after value of the next page (a position in this
file, not an ID; with --newest, the page goes on below it). With a
search flag other than --class it prints, after the table, how many
dead letters match in all ("N matches"; --json always has it as
"total"): counting them reads every dead letter of --class, or of every
class, in the file.

The search flags narrow the listing (they are and-ed): --class, --topic
and --partition (where the message was read from; a submitted message
has no topic and partition 0), --key (the message key's exact text),
--error-contains (a substring of the last error), --min-attempts,
--since and --until (RFC 3339; the last failure: since <= last failed <
until), --first-since and --first-until (the same on the first failure;
a dead letter with none matches neither). --newest lists the newest
first. On a state file, --topic is
the origin topic (give it once).

With --brokers and --group instead of STATE it lists the dead letters of
every instance of the group, from the group's changelog topics on the
cluster (GROUP.TOPIC.handoff-changelog, every one the cluster has, or
those of the --topic input topics): it reads each partition to its end,
keeps the last write of each key (a later tombstone deletes a dead
letter), and prints the dead letters by last failure, oldest first, at
most --limit of them, with the input topic and partition, the member of
the group that owns that partition now ("-": nobody; a member is named by
its instance name) and the dead letter's ID, the one the owner's admin
API and 'dead list STATE' print. The search flags apply to them too
(--topic picks the changelogs to read, the input topics; --newest lists
the last failed first). It reads only; the security flags are replay's.`

// listStateDead prints, as a table or JSON, the page of st's dead
// letters of class (empty: every class) after the file position after
// (zero: from the start) matching filter, at most limit of them, with
// the total of those matching when a search flag was given; then it
// warns about undecodable ones.
func listStateDead(cmd *cobra.Command, st *snapshot.State, class string, after uint64, limit int, jsonFlag bool, filter *runtime.DeadFilter) error {
	list, err := st.ListDead(snapshot.DeadQuery{Class: class, Match: recordMatch(filter), From: after,
		Newest: filter.Newest, Limit: limit})
	if err != nil {
		return err
	}
	page, next, total := list.Page, list.Next, list.Total
	if jsonFlag {
		out := deadPageJSON(page, next)
		out.Total = &total
		err = writeJSON(cmd.OutOrStdout(), out)
	} else {
		count := -1 // not printed: the listing of before the search
		for _, name := range searchFlagNames {
			if cmd.Flags().Changed(name) {
				count = total
			}
		}
		err = printDeadList(cmd.OutOrStdout(), page, next, class, count)
	}
	warnUndecodable(cmd.ErrOrStderr(), list.Undecodable)
	return err
}

// printDeadList prints a page of dead letters and, when total (the
// count of the matches on every page) is not negative, the count.
func printDeadList(w io.Writer, page []snapshot.DeadEntry, next uint64, class string, total int) error {
	if len(page) == 0 && total > 0 {
		_, err := fmt.Fprintf(w, "no more dead letters after --after (%d in all)\n", total)
		return err
	}
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
		tab.row(e.String(), oneLine(r.Message.Class, 30), oneLine(r.Message.ID, 50),
			r.Message.Attempt, fmtTime(r.FirstFailed), fmtTime(r.SavedAt), oneLine(r.Err, errorWidth))
	}
	if err := tab.flush(); err != nil {
		return err
	}
	if total >= 0 {
		matches := "matches"
		if total == 1 {
			matches = "match"
		}
		if _, err := fmt.Fprintf(w, "%d %s\n", total, matches); err != nil {
			return err
		}
	}
	if next != 0 {
		_, err := fmt.Fprintf(w, "more: --after %d\n", next)
		return err
	}
	return nil
}

// warnUndecodable tells about dead letters that could not be decoded and
// so were left out, named by their IDs.
func warnUndecodable(w io.Writer, bad []snapshot.UndecodableDead) {
	for _, u := range bad {
		fmt.Fprintf(w, "warning: dead letter %s cannot be decoded and is left out (only 'dead discard' can remove it): %v\n",
			u.String(), u.Err.Err)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
