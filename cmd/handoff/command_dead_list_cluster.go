package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/kafkasec"
	"github.com/handoff-go/handoff/runtime"
	"github.com/handoff-go/handoff/snapshot"
)

// clusterDead is one dead letter of a group's changelog: the last write
// of its key.
type clusterDead struct {
	Input     string // the input topic
	Partition int32
	// Owner is the group member that owns the input partition now; empty
	// when none does.
	Owner  string
	FileID [16]byte // the writer's state file
	// ID is the dead letter's ID, from its changelog key (the writer's
	// file ID and key there): the one its owner's admin API and 'dead
	// list STATE' print.
	ID     snapshot.DeadID
	Offset int64 // in the changelog partition
	Record snapshot.Record
}

// changelogProblem is a changelog record that could not be read as a
// dead letter: its key or (for a dead letter's last write) its value.
type changelogProblem struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

// changelogDead reads parts to their end and returns the dead letters
// their last writes hold, of class ("" for all), with the records that
// could not be decoded. Only the latest write of each dead-letter key is
// kept in memory.
func changelogDead(ctx context.Context, r *changelogReader, parts []changelogPartition, class string) ([]clusterDead, []changelogProblem, error) {
	type last struct {
		key    []byte
		offset int64
		value  []byte
	}
	// The changelog is compacted per partition: last write wins per
	// partition and key. A tombstone (nil value) deletes.
	latest := map[changelogPartition]map[string]last{}
	var bad []changelogProblem
	err := r.read(ctx, parts, func(p changelogPartition, rec changelogRecord) error {
		dead, err := snapshot.IsChangelogDead(rec.Key, rec.Value)
		if err != nil {
			bad = append(bad, changelogProblem{Topic: p.Topic, Partition: p.Partition, Offset: rec.Offset, Err: err})
			return nil
		}
		if !dead {
			return nil
		}
		m := latest[p]
		if m == nil {
			m = map[string]last{}
			latest[p] = m
		}
		if rec.Value == nil {
			delete(m, string(rec.Key))
			return nil
		}
		m[string(rec.Key)] = last{key: rec.Key, offset: rec.Offset, value: rec.Value}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var out []clusterDead
	for p, m := range latest {
		for _, l := range m {
			d, err := snapshot.DecodeChangelogDead(l.key, l.value)
			if err != nil {
				bad = append(bad, changelogProblem{Topic: p.Topic, Partition: p.Partition, Offset: l.offset, Err: err})
				continue
			}
			if class != "" && d.Record.Message.Class != class {
				continue
			}
			out = append(out, clusterDead{Input: p.Input, Partition: p.Partition, FileID: d.Writer, ID: d.ID, Offset: l.offset, Record: d.Record})
		}
	}
	// Oldest first: by last failure, then where it sits.
	slices.SortFunc(out, func(a, b clusterDead) int {
		if c := a.Record.SavedAt.Compare(b.Record.SavedAt); c != 0 {
			return c
		}
		if c := cmpPartition(a.Input, a.Partition, b.Input, b.Partition); c != 0 {
			return c
		}
		return cmp.Compare(a.Offset, b.Offset)
	})
	slices.SortFunc(bad, func(a, b changelogProblem) int {
		if c := cmpPartition(a.Topic, a.Partition, b.Topic, b.Partition); c != 0 {
			return c
		}
		return cmp.Compare(a.Offset, b.Offset)
	})
	return out, bad, nil
}

// listClusterDead is 'dead list --brokers': the dead letters of the
// group's changelog that filter selects, at most limit of them.
func listClusterDead(cmd *cobra.Command, f *clusterFlags, filter *runtime.DeadFilter, limit int, jsonOut bool) error {
	class := filter.Class
	d, err := f.dialer("handoff-dead-list")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeoutCause(ctx, f.timeout, fmt.Errorf("--timeout %s passed", f.timeout))
	defer cancel()
	dead, bad, err := groupDead(ctx, f, d, filter)
	if err != nil {
		return err
	}
	more := 0
	if len(dead) > limit {
		more = len(dead) - limit
		dead = dead[:limit]
	}
	if jsonOut {
		err = writeJSON(cmd.OutOrStdout(), clusterDeadJSON(dead, more))
	} else {
		err = printClusterDead(cmd.OutOrStdout(), dead, more, f.group, class)
	}
	warnChangelogProblems(cmd.ErrOrStderr(), bad)
	return err
}

// groupDead reads the dead letters of f's group from its changelog
// through d and returns those filter selects, by last failure, oldest
// first (filter.Newest: newest first), each with the member owning its
// input partition now, and the records that could not be decoded. It
// blocks until the changelog is read to the end it had when it began,
// or ctx ends (the error then says why).
func groupDead(ctx context.Context, f *clusterFlags, d *kafkasec.Dialer, filter *runtime.DeadFilter) ([]clusterDead, []changelogProblem, error) {
	r, err := newChangelogReader(ctx, f, d)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	parts, err := r.partitions(ctx, f.topics)
	if err != nil {
		return nil, nil, withCause(ctx, err)
	}
	dead, bad, err := changelogDead(ctx, r, parts, filter.Class)
	if err != nil {
		return nil, nil, withCause(ctx, err)
	}
	owners, err := r.owners(ctx)
	if err != nil {
		return nil, nil, withCause(ctx, err)
	}
	match := recordMatch(filter)
	dead = slices.DeleteFunc(dead, func(d clusterDead) bool { return !match(&d.Record) })
	if filter.Newest {
		slices.Reverse(dead)
	}
	for i := range dead {
		dead[i].Owner = owners[topicPartition{dead[i].Input, dead[i].Partition}]
	}
	return dead, bad, nil
}

// warnChangelogProblems tells about the changelog records left out.
func warnChangelogProblems(w io.Writer, bad []changelogProblem) {
	for _, b := range bad {
		fmt.Fprintf(w, "warning: changelog topic %s partition %d offset %d cannot be decoded and is left out: %v\n",
			b.Topic, b.Partition, b.Offset, b.Err)
	}
}

// withCause adds why ctx ended (--timeout, a signal) to err when it did.
func withCause(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() && !strings.Contains(err.Error(), cause.Error()) {
		return fmt.Errorf("%w (%v)", err, cause)
	}
	return err
}

func printClusterDead(w io.Writer, dead []clusterDead, more int, group, class string) error {
	if len(dead) == 0 {
		what := "no dead letters"
		if class != "" {
			what += fmt.Sprintf(" of class %q", class)
		}
		_, err := fmt.Fprintf(w, "%s in the changelog of group %s\n", what, group)
		return err
	}
	tab := newTable(w)
	tab.row("TOPIC", "PARTITION", "OWNER", "KEY", "CLASS", "ID", "ATTEMPTS", "FIRST FAILED", "LAST FAILED", "ERROR")
	for _, d := range dead {
		r := &d.Record
		owner := d.Owner
		if owner == "" {
			owner = "-"
		}
		tab.row(oneLine(d.Input, 60), d.Partition, oneLine(owner, 40), d.ID, oneLine(r.Message.Class, 30), oneLine(r.Message.ID, 50),
			r.Message.Attempt, fmtTime(r.FirstFailed), fmtTime(r.SavedAt), oneLine(r.Err, errorWidth))
	}
	if err := tab.flush(); err != nil {
		return err
	}
	if more > 0 {
		_, err := fmt.Fprintf(w, "%d more (--limit)\n", more)
		return err
	}
	return nil
}

// clusterDeadRecordJSON is a dead letter of the changelog in JSON: the
// fields of the file mode's (the admin API's), and where it is.
type clusterDeadRecordJSON struct {
	recordJSON
	InputTopic     string `json:"input_topic"`
	InputPartition int32  `json:"input_partition"`
	// Owner is the group member owning the input partition; empty when
	// none does.
	Owner string `json:"owner"`
	// FileID is the writer's state file (hex), whose first 8 bytes
	// begin Key, the dead letter ID.
	FileID          string `json:"file_id"`
	ChangelogOffset int64  `json:"changelog_offset"`
}

type clusterDeadJSONOut struct {
	DeadLetters []clusterDeadRecordJSON `json:"dead_letters"`
	// More is how many more --limit left out.
	More int `json:"more,omitempty"`
}

func clusterDeadJSON(dead []clusterDead, more int) clusterDeadJSONOut {
	out := clusterDeadJSONOut{DeadLetters: make([]clusterDeadRecordJSON, len(dead)), More: more}
	for i := range dead {
		d := &dead[i]
		out.DeadLetters[i] = clusterDeadRecordJSON{recordJSON: toRecordJSON(d.ID.String(), &d.Record), InputTopic: d.Input,
			InputPartition: d.Partition, Owner: d.Owner, FileID: hex.EncodeToString(d.FileID[:]), ChangelogOffset: d.Offset}
	}
	return out
}
