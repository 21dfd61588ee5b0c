package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
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
	// Meta is what the file says of itself.
	Meta *metaReport `json:"meta"`
	// Parked lists parked records, by class and key in park order (the
	// order they run in), at most --records of them.
	Parked []parkedRecord `json:"parked_records"`
	// Delayed lists delayed records in due order, at most --records.
	Delayed []delayedRecord `json:"delayed_records"`
}

// metaReport is the state file's meta bucket: who wrote the file, in
// which format, and what it keeps besides records.
type metaReport struct {
	// Group and Instance are what the last service to open the file
	// recorded; empty when none did.
	Group    string `json:"group"`
	Instance string `json:"instance"`
	// Format is the file format mark (1: no record written yet), and
	// Features the features its records need, with their descriptions.
	Format   int               `json:"format"`
	Features map[string]string `json:"features,omitempty"`
	// Classes are the class names services that ran on the file were
	// configured with.
	Classes []string `json:"classes"`
	// Pauses are the classes an operator paused.
	Pauses []pauseReport `json:"pauses"`
	// ChangelogFileID is the file's ID in the changelog keys it writes
	// (hex); empty when it has none yet (no changelog was written).
	ChangelogFileID string `json:"changelog_file_id,omitempty"`
	// Checkpoints are where the changelog partitions the file was
	// restored from, or written to, stand: the next offset of each, by
	// topic and partition.
	Checkpoints []checkpointReport `json:"changelog_checkpoints"`
}

type checkpointReport struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Next      int64  `json:"next_offset"`
}

type pauseReport struct {
	Class  string    `json:"class"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since,omitzero"`
}

// parkedRecord is one parked message.
type parkedRecord struct {
	Class   string    `json:"class"`
	Key     []byte    `json:"key"`
	KeyText *string   `json:"key_text,omitempty"`
	ID      string    `json:"id"`
	SavedAt time.Time `json:"saved_at,omitzero"`
	// Blocker is the message its key waits for, when the file holds it:
	// a dead letter, a message waiting for its redelivery, or a dead
	// letter requeued offline (a pending record); nil when none is
	// there (the key is released at the next start).
	Blocker *blockerReport `json:"blocker,omitempty"`
}

type blockerReport struct {
	ID string `json:"id"`
	// Bucket is where it is: dead, delayed or pending.
	Bucket string `json:"bucket"`
}

// delayedRecord is one delayed message.
type delayedRecord struct {
	Due     time.Time `json:"due"`
	Class   string    `json:"class"`
	Key     []byte    `json:"key"`
	KeyText *string   `json:"key_text,omitempty"`
	ID      string    `json:"id"`
	// Reason is why it waits: "redelivery" (a failed message's next
	// attempt), "deferred" (a handoff-deliver-at header), "scheduled"
	// (Runtime.Schedule), ...
	Reason  string    `json:"reason"`
	SavedAt time.Time `json:"saved_at,omitzero"`
}

// keyText is a key as text for JSON when it is printable, else nil.
func keyText(k []byte) *string {
	if k == nil || !isText(k) {
		return nil
	}
	s := string(k)
	return &s
}

// blockerOf is the key of blockers: class and message key (nil and empty
// are one key, as parking keeps them).
func blockerOf(class string, key []byte) string { return class + "\x00" + string(key) }

func newInspectCmd() *cobra.Command {
	var (
		sf             stateFlags
		jsonFlag       bool
		quarantineFlag bool
		recordsFlag    int
	)
	cmd := &cobra.Command{
		Use:   "inspect STATE",
		Short: "Show how many records each bucket of a state file holds, per class, and their ages",
		Long: `Inspect prints, for each bucket of the state file STATE (pending, dead,
delayed, parked, quarantine), how many records it holds and the oldest and
newest save time, and the count per message class; for delayed messages
also the earliest due time. Then the file's meta: the group and instance
that last ran on it, the file format and its features, the classes it
has seen and the paused ones, its changelog file ID (the writer ID in
the changelog keys it writes) and its changelog checkpoints (per
changelog topic and partition, the next offset); then the parked records (class, key, ID,
and the message their key waits for when the file holds it: a dead
letter, a redelivery or a requeued dead letter) in the order they will
run, and the delayed records in due order (due time, class, key, ID,
reason), at most --records of each.

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
			err := open(args[0], &sf, func(st *snapshot.State) error {
				var err error
				rep, err = inspect(st, quarantineFlag, recordsFlag)
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
	cmd.Flags().IntVar(&recordsFlag, "records", 50, "list at most this many parked and this many delayed records (-1: all)")
	return cmd
}

// inspect reads every bucket of st, in one transaction; with quarantine
// it then moves the undecodable pending and parked records to the
// quarantine bucket, as the service does. Then it reads what that bucket
// holds.
func inspect(st *snapshot.State, quarantine bool, limit int) (*inspectReport, error) {
	rep := &inspectReport{Path: st.Path(), Copied: st.Copied(), Parked: []parkedRecord{}, Delayed: []delayedRecord{}}
	byName := map[string]*bucketReport{}
	add := func(name string) *bucketReport {
		b := &bucketReport{Name: name, Classes: map[string]int{}}
		byName[name] = b
		rep.Buckets = append(rep.Buckets, b)
		return b
	}
	before, err := st.Counts()
	if err != nil {
		return nil, err
	}
	pending, dead, delayed, parked := add(snapshot.BucketPending), add(snapshot.BucketDead), add(snapshot.BucketDelayed), add(snapshot.BucketParked)
	undecodable, err := st.Walk(inspectWalk(rep, limit, pending, dead, delayed, parked))
	if err != nil {
		return nil, err
	}
	bad := countUndecodable(rep, undecodable)
	if rep.Meta, err = readMeta(st); err != nil {
		return nil, err
	}
	if quarantine {
		if err := st.Quarantine(bad...); err != nil {
			return nil, err
		}
	}

	quar := add(snapshot.BucketQuarantine)
	quar.Classes = nil
	qs, err := st.Quarantined()
	if err != nil {
		return nil, err
	}
	for i := range qs {
		quar.saw("", qs[i].At)
	}
	// The counts are the file's own, undecodable records included.
	counts, err := st.Counts()
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		b := byName[name]
		if b == nil {
			b = add(name)
			b.Classes = nil
		}
		b.Records = counts[name]
	}
	rep.Quarantined = counts[snapshot.BucketQuarantine] - before[snapshot.BucketQuarantine]
	return rep, nil
}

// inspectWalk returns the walk of a state file that counts its pending,
// dead, delayed and parked records into those buckets' reports, lists in
// rep the first limit (negative: all) delayed and parked records, and
// names the message each parked key waits for.
func inspectWalk(rep *inspectReport, limit int, pending, dead, delayed, parked *bucketReport) snapshot.Walk {
	room := func(n int) bool { return limit < 0 || n < limit }
	// blockers maps blockerOf(class, key) to the message a parked key
	// waits for, as the runtime finds it at start.
	blockers := map[string]*blockerReport{}
	return snapshot.Walk{
		Pending: func(e *snapshot.Entry) {
			r := &e.Record
			pending.saw(r.Message.Class, r.SavedAt)
			if r.Reason == snapshot.ReasonRequeued {
				blockers[blockerOf(r.Message.Class, r.Message.Key)] = &blockerReport{ID: r.Message.ID, Bucket: snapshot.BucketPending}
			}
		},
		Dead: func(e *snapshot.Entry) {
			m := &e.Record.Message
			dead.saw(m.Class, e.Record.SavedAt)
			if k := blockerOf(m.Class, m.Key); blockers[k] == nil {
				blockers[k] = &blockerReport{ID: m.ID, Bucket: snapshot.BucketDead}
			}
		},
		Delayed: func(e *snapshot.DelayedEntry) {
			r := &e.Record
			delayed.saw(r.Message.Class, r.SavedAt)
			if delayed.NextDue.IsZero() || e.Due.Before(delayed.NextDue) {
				delayed.NextDue = e.Due
			}
			if k := blockerOf(r.Message.Class, r.Message.Key); r.Reason == reasonRedelivery && blockers[k] == nil {
				blockers[k] = &blockerReport{ID: r.Message.ID, Bucket: snapshot.BucketDelayed}
			}
			if room(len(rep.Delayed)) {
				rep.Delayed = append(rep.Delayed, delayedRecord{Due: e.Due, Class: r.Message.Class, Key: r.Message.Key,
					KeyText: keyText(r.Message.Key), ID: r.Message.ID, Reason: r.Reason, SavedAt: r.SavedAt})
			}
		},
		Parked: func(pk snapshot.ParkedCount, recs []snapshot.ParkedEntry) {
			for i := range recs {
				r := &recs[i].Record
				parked.saw(pk.Class, r.SavedAt)
				if room(len(rep.Parked)) {
					rep.Parked = append(rep.Parked, parkedRecord{Class: pk.Class, Key: pk.Key, KeyText: keyText(pk.Key),
						ID: r.Message.ID, SavedAt: r.SavedAt, Blocker: blockers[blockerOf(pk.Class, pk.Key)]})
				}
			}
		},
	}
}

// countUndecodable counts in rep the undecodable records of the delayed,
// pending and parked buckets and returns those of pending and parked,
// the ones to quarantine. Undecodable dead letters are not counted here:
// the dead commands report them.
func countUndecodable(rep *inspectReport, undecodable []*snapshot.DecodeError) []*snapshot.DecodeError {
	var bad []*snapshot.DecodeError
	for _, de := range undecodable {
		switch de.Bucket {
		case snapshot.BucketDelayed:
			rep.Undecodable++
		case snapshot.BucketPending, snapshot.BucketParked:
			rep.Undecodable++
			bad = append(bad, de)
		}
	}
	return bad
}

// reasonRedelivery is the Reason of a delayed record that waits for a
// failed message's next attempt (the runtime's): it blocks its key.
const reasonRedelivery = "redelivery"

// readMeta reads what the file's meta bucket says of the file.
func readMeta(st *snapshot.State) (*metaReport, error) {
	info, err := st.FileInfo()
	if err != nil {
		return nil, err
	}
	m := &metaReport{Group: info.Group, Instance: info.Instance, Format: info.Format, Features: info.Features,
		Classes: []string{}, Pauses: []pauseReport{}, Checkpoints: []checkpointReport{}}
	m.Classes = append(m.Classes, info.Classes...)
	for _, c := range slices.Sorted(maps.Keys(info.Pauses)) {
		m.Pauses = append(m.Pauses, pauseReport{Class: c, Reason: info.Pauses[c].Reason, Since: info.Pauses[c].Since})
	}
	if info.HasFileID {
		m.ChangelogFileID = hex.EncodeToString(info.FileID[:])
	}
	for _, topic := range slices.Sorted(maps.Keys(info.Checkpoints)) {
		for _, p := range slices.Sorted(maps.Keys(info.Checkpoints[topic])) {
			m.Checkpoints = append(m.Checkpoints, checkpointReport{Topic: topic, Partition: p, Next: info.Checkpoints[topic][p]})
		}
	}
	return m, nil
}

// printMeta prints what the file's meta bucket says of it, m: group,
// instance, format, classes, pauses and changelog checkpoints.
func printMeta(w io.Writer, m *metaReport) error {
	orNone := func(s string) string {
		if s == "" {
			return "(none)"
		}
		return oneLine(s, 80)
	}
	fmt.Fprintf(w, "\nmeta\n")
	tab := newTable(w)
	tab.row("  group", orNone(m.Group))
	tab.row("  instance", orNone(m.Instance))
	features := "none"
	if len(m.Features) > 0 {
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(m.Features)) {
			parts = append(parts, oneLine(name, 40))
		}
		features = strings.Join(parts, ", ")
	}
	tab.row("  format", fmt.Sprintf("%d (features: %s)", m.Format, features))
	var names []string
	for _, c := range m.Classes {
		names = append(names, oneLine(c, 40))
	}
	tab.row("  classes", orNone(strings.Join(names, ", ")))
	if len(m.Pauses) == 0 {
		tab.row("  paused", "(none)")
	}
	for _, p := range m.Pauses {
		tab.row("  paused", fmt.Sprintf("%s since %s: %s", oneLine(p.Class, 40), fmtTime(p.Since), oneLine(p.Reason, 60)))
	}
	if err := tab.flush(); err != nil {
		return err
	}
	// A table of its own: changelog topic names are long.
	tab = newTable(w)
	tab.row("  changelog file id", orNone(m.ChangelogFileID))
	if len(m.Checkpoints) == 0 {
		tab.row("  changelog", "(no checkpoints)")
	}
	for _, c := range m.Checkpoints {
		tab.row(fmt.Sprintf("  changelog/%s/%d", oneLine(c.Topic, 80), c.Partition), fmt.Sprintf("next offset %d", c.Next))
	}
	return tab.flush()
}

// printRecords prints the meta and the listed parked and delayed
// records of rep, after the buckets.
func printRecords(w io.Writer, rep *inspectReport, counts map[string]int) error {
	if err := printMeta(w, rep.Meta); err != nil {
		return err
	}
	more := func(listed int, bucket string) {
		if n := counts[bucket]; n > listed {
			fmt.Fprintf(w, "  ... %d more (--records)\n", n-listed)
		}
	}
	if counts[snapshot.BucketParked] > 0 {
		fmt.Fprintf(w, "\nparked records, in the order they run\n")
		tab := newTable(w)
		tab.row("  CLASS", "KEY", "ID", "SAVED", "WAITS FOR")
		for _, p := range rep.Parked {
			blocker := "(nothing in this file: released at the next start)"
			if p.Blocker != nil {
				blocker = fmt.Sprintf("%s (%s)", oneLine(p.Blocker.ID, 60), p.Blocker.Bucket)
			}
			tab.row("  "+oneLine(p.Class, 40), oneLine(fmtBytes(p.Key), 40), oneLine(p.ID, 60), fmtTime(p.SavedAt), blocker)
		}
		if err := tab.flush(); err != nil {
			return err
		}
		more(len(rep.Parked), snapshot.BucketParked)
	}
	if counts[snapshot.BucketDelayed] > 0 {
		fmt.Fprintf(w, "\ndelayed records, in due order\n")
		tab := newTable(w)
		tab.row("  DUE", "CLASS", "KEY", "ID", "REASON")
		for _, d := range rep.Delayed {
			tab.row("  "+fmtTime(d.Due), oneLine(d.Class, 40), oneLine(fmtBytes(d.Key), 40), oneLine(d.ID, 60), oneLine(d.Reason, 20))
		}
		if err := tab.flush(); err != nil {
			return err
		}
		more(len(rep.Delayed), snapshot.BucketDelayed)
	}
	return nil
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
	counts := map[string]int{}
	for _, b := range rep.Buckets {
		counts[b.Name] = b.Records
	}
	return printRecords(w, rep, counts)
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
