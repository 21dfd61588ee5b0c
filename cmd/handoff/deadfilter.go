package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/runtime"
	"github.com/handoff-go/handoff/snapshot"
)

// deadFilterFlags are 'dead list's search flags (--class and --topic
// aside: --class is the command's own, --topic clusterFlags').
type deadFilterFlags struct {
	partition     int
	key           string
	errorContains string
	minAttempts   int
	since, until  string
	firstSince    string
	firstUntil    string
	newest        bool
}

// searchFlagNames are the flags of a search (besides --class): with
// one, 'dead list STATE' prints the count of the matches.
var searchFlagNames = []string{"topic", "partition", "key", "error-contains", "min-attempts", "since", "until",
	"first-since", "first-until", "newest"}

func (f *deadFilterFlags) register(cmd *cobra.Command) {
	f.registerSelection(cmd)
	cmd.Flags().BoolVar(&f.newest, "newest", false, "list the newest first")
}

// selectionFlagNames are the flags registerSelection registers.
var selectionFlagNames = []string{"partition", "key", "error-contains", "min-attempts", "since", "until", "first-since", "first-until"}

// registerSelection registers the flags that narrow a selection, without
// --newest (an order, for a listing only).
func (f *deadFilterFlags) registerSelection(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVar(&f.partition, "partition", -1, "only dead letters read from this input partition (-1: any)")
	fl.StringVar(&f.key, "key", "", "only dead letters whose message key is exactly this text")
	fl.StringVar(&f.errorContains, "error-contains", "", "only dead letters whose last error contains this text (case-sensitive)")
	fl.IntVar(&f.minAttempts, "min-attempts", 0, "only dead letters with at least this many failed attempts")
	fl.StringVar(&f.since, "since", "", "only dead letters that last failed at or after this time (RFC 3339, e.g. 2026-12-07T10:00:00Z)")
	fl.StringVar(&f.until, "until", "", "only dead letters that last failed before this time (RFC 3339)")
	fl.StringVar(&f.firstSince, "first-since", "", "only dead letters that first failed at or after this time (RFC 3339)")
	fl.StringVar(&f.firstUntil, "first-until", "", "only dead letters that first failed before this time (RFC 3339)")
}

// filter returns the search the flags, class and topic ("" for any)
// give, or a usage error naming the bad flag.
func (f *deadFilterFlags) filter(cmd *cobra.Command, class, topic string) (runtime.DeadFilter, error) {
	out := runtime.DeadFilter{Class: class, Topic: topic, ErrorContains: f.errorContains, MinAttempts: f.minAttempts, Newest: f.newest}
	if f.partition < -1 {
		return out, usagef("--partition must be a partition number, or -1 for any, got %d", f.partition)
	}
	if f.partition >= 0 {
		p := f.partition
		out.Partition = &p
	}
	if cmd.Flags().Changed("key") {
		out.Key = []byte(f.key)
	}
	if f.minAttempts < 0 {
		return out, usagef("--min-attempts must be >= 0, got %d", f.minAttempts)
	}
	for _, t := range []struct {
		name, s string
		to      *time.Time
	}{{"since", f.since, &out.Since}, {"until", f.until, &out.Until},
		{"first-since", f.firstSince, &out.FirstSince}, {"first-until", f.firstUntil, &out.FirstUntil}} {
		if t.s == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339Nano, t.s)
		if err != nil {
			return out, usagef("--%s must be an RFC 3339 time (2026-12-07T10:00:00Z), got %q", t.name, t.s)
		}
		*t.to = v
	}
	return out, nil
}

// recordMatch is the filter on a state file's or a changelog's record.
func recordMatch(f *runtime.DeadFilter) func(*snapshot.Record) bool {
	return func(r *snapshot.Record) bool {
		dl := runtime.DeadLetter{Message: r.Message, Reason: r.Reason, Err: r.Err, Redeliveries: r.Redeliveries,
			FirstFailed: r.FirstFailed, LastFailed: r.SavedAt}
		return f.Match(&dl)
	}
}
