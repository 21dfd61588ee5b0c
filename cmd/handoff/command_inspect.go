package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/snapshot"
)

// pageSize is how many records a command reads per transaction when it
// walks a whole bucket.
const pageSize = 1000

// bucketReport is one bucket's line of 'inspect'.
type bucketReport struct {
	Name    string `json:"name"`
	Records int    `json:"records"`
	// Oldest and Newest are the earliest and latest SavedAt (for the
	// quarantine: when the value was moved there).
	Oldest time.Time `json:"oldest,omitzero"`
	Newest time.Time `json:"newest,omitzero"`
	// Classes counts the decodable records per message class.
	Classes map[string]int `json:"classes,omitempty"`
	// NextDue is, for the delayed bucket, the earliest due time.
	NextDue time.Time `json:"next_due,omitzero"`

	seen bool // Oldest and Newest hold a time
}

func (b *bucketReport) saw(class string, t time.Time) {
	if b.Classes != nil {
		b.Classes[class]++
	}
	if t.IsZero() {
		return
	}
	if !b.seen || t.Before(b.Oldest) {
		b.Oldest = t
	}
	if !b.seen || t.After(b.Newest) {
		b.Newest = t
	}
	b.seen = true
}

type inspectReport struct {
	Path    string          `json:"path"`
	Size    int64           `json:"size_bytes"`
	Buckets []*bucketReport `json:"buckets"`
	// Copied is set when the file was held by a running service and
	// inspect read a consistent copy of it.
	Copied bool `json:"copied,omitempty"`
	// Undecodable is how many pending, delayed or parked records (or
	// parked keys) failed to decode; inspect --quarantine moves those of
	// pending and parked to the quarantine bucket, as the service does.
	Undecodable int `json:"undecodable,omitempty"`
	// Quarantined is how many undecodable pending or parked records this
	// inspect --quarantine moved to the quarantine bucket.
	Quarantined int `json:"quarantined_now,omitempty"`
}

func newInspectCmd() *cobra.Command {
	var (
		sf             stateFlags
		jsonFlag       bool
		quarantineFlag bool
	)
	cmd := &cobra.Command{
		Use:   "inspect STATE",
		Short: "Show how many records each bucket of a state file holds, per class, and their ages",
		Long: `Inspect prints, for each bucket of the state file STATE (pending, dead,
delayed, parked, quarantine), how many records it holds and the oldest and
newest save time, and the count per message class; for delayed messages
also the earliest due time.

Inspect only reads: it opens the file read-only and changes nothing, and
it works on the file of a running service, which holds it locked: after
--lock-timeout it reads a consistent copy of the file instead (the copy
is taken into the temporary directory and removed). Undecodable records
are counted; with --quarantine (which needs the service stopped) the
undecodable pending and parked records are moved to the quarantine
bucket, as the service would do.`,
		Args: stateArgs(0, 0, ""),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			var rep *inspectReport
			open := withStateReadOnly
			if quarantineFlag {
				open = withState
			}
			err := open(args[0], &sf, func(st *snapshot.Store) error {
				var err error
				rep, err = inspect(st, quarantineFlag)
				return err
			})
			if err != nil {
				return err
			}
			if fi, err := os.Stat(args[0]); err == nil {
				rep.Size = fi.Size()
			}
			if jsonFlag {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return printInspect(cmd.OutOrStdout(), rep)
		}),
	}
	sf.register(cmd)
	cmd.Flags().BoolVar(&jsonFlag, "json", false, "print JSON instead of a table")
	cmd.Flags().BoolVar(&quarantineFlag, "quarantine", false,
		"move undecodable pending and parked records to the quarantine bucket (opens the file for writing: stop the service first)")
	return cmd
}

// inspect reads every bucket of st, in one transaction; with quarantine
// it then moves the undecodable pending and parked records to the
// quarantine bucket, as the service does. Then it reads what that bucket
// holds.
func inspect(st *snapshot.Store, quarantine bool) (*inspectReport, error) {
	rep := &inspectReport{Path: st.Path(), Copied: st.Copied()}
	byName := map[string]*bucketReport{}
	add := func(name string) *bucketReport {
		b := &bucketReport{Name: name}
		byName[name] = b
		rep.Buckets = append(rep.Buckets, b)
		return b
	}
	var (
		before map[string]int
		bad    []*snapshot.DecodeError // to quarantine
	)
	err := st.View(func(tx *snapshot.Tx) error {
		var err error
		if before, err = tx.Counts(); err != nil {
			return err
		}

		pending := add(snapshot.BucketPending)
		pending.Classes = map[string]int{}
		entries, badPending, err := tx.LoadPending()
		if err != nil {
			return err
		}
		bad = append(bad, badPending...)
		for i := range entries {
			pending.saw(entries[i].Record.Message.Class, entries[i].Record.SavedAt)
		}

		dead := add(snapshot.BucketDead)
		dead.Classes = map[string]int{}
		_, err = walkDead(tx, "", func(page []snapshot.Entry) {
			for i := range page {
				dead.saw(page[i].Record.Message.Class, page[i].Record.SavedAt)
			}
		})
		if err != nil {
			return err
		}

		delayed := add(snapshot.BucketDelayed)
		delayed.Classes = map[string]int{}
		// No limit: a short page cannot tell the end from skipped
		// undecodable records.
		des, err := tx.ListDelayed(nil, 0)
		badDelayed, ok := decodeErrors(err)
		if err != nil && !ok {
			return err
		}
		rep.Undecodable += len(badDelayed)
		for i := range des {
			delayed.saw(des[i].Record.Message.Class, des[i].Record.SavedAt)
			if delayed.NextDue.IsZero() || des[i].Due.Before(delayed.NextDue) {
				delayed.NextDue = des[i].Due
			}
		}

		parked := add(snapshot.BucketParked)
		parked.Classes = map[string]int{}
		pks, badKeys, err := tx.ParkedKeys()
		if err != nil {
			return err
		}
		bad = append(bad, badKeys...)
		for _, pk := range pks {
			recs, badRecs, err := tx.Parked(pk.Class, pk.Key)
			if err != nil {
				return err
			}
			bad = append(bad, badRecs...)
			for i := range recs {
				parked.saw(pk.Class, recs[i].Record.SavedAt)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	rep.Undecodable += len(bad)
	if quarantine {
		if err := quarantineBad(st, bad); err != nil {
			return nil, err
		}
	}

	quar := add(snapshot.BucketQuarantine)
	var counts map[string]int
	err = st.View(func(tx *snapshot.Tx) error {
		qs, err := tx.Quarantined()
		if err != nil {
			return err
		}
		for i := range qs {
			quar.saw("", qs[i].At)
		}
		// The counts are the file's own, undecodable records included.
		counts, err = tx.Counts()
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		b := byName[name]
		if b == nil {
			b = add(name)
		}
		b.Records = counts[name]
	}
	rep.Quarantined = counts[snapshot.BucketQuarantine] - before[snapshot.BucketQuarantine]
	return rep, nil
}

func printInspect(w io.Writer, rep *inspectReport) error {
	fmt.Fprintf(w, "state file  %s (%s)\n\n", rep.Path, fmtSize(rep.Size))
	tab := newTable(w)
	tab.row("BUCKET", "RECORDS", "OLDEST", "NEWEST")
	for _, b := range rep.Buckets {
		tab.row(b.Name, b.Records, fmtTime(b.Oldest), fmtTime(b.Newest))
		decoded := 0
		for _, c := range slices.Sorted(maps.Keys(b.Classes)) {
			tab.row("  "+oneLine(c, 40), b.Classes[c], "", "")
			decoded += b.Classes[c]
		}
		if b.Classes != nil && decoded < b.Records {
			tab.row("  (undecodable)", b.Records-decoded, "", "")
		}
	}
	if err := tab.flush(); err != nil {
		return err
	}
	for _, b := range rep.Buckets {
		if !b.NextDue.IsZero() {
			fmt.Fprintf(w, "\nnext delayed message due %s\n", fmtTime(b.NextDue))
		}
	}
	if rep.Copied {
		fmt.Fprintf(w, "\nread from a consistent copy: a running service holds the file\n")
	}
	switch {
	case rep.Quarantined > 0:
		fmt.Fprintf(w, "\nmoved %d undecodable records to quarantine\n", rep.Quarantined)
	case rep.Undecodable > 0:
		fmt.Fprintf(w, "\n%d undecodable records or keys; nothing was changed (inspect --quarantine moves those of pending and parked, as the service does)\n", rep.Undecodable)
	}
	return nil
}

// fmtSize prints a file size in bytes with a binary unit.
func fmtSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
