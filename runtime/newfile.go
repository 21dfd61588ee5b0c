package runtime

import (
	"context"
	"errors"
	"log/slog"

	"github.com/handoff-go/handoff/runtime/internal/kclient"
)

// The lost-disk check of the start. With local state only, the state file
// is the one copy of what the instance saved and committed past: the
// stop's snapshot, dead letters, parked, delayed and redelivered
// messages. A start on a new state file for a group that has committed
// offsets for the configured topics is most often a lost disk (an
// emptyDir gone with its pod, a volume not mounted), and then those
// messages are gone; nothing else would say so.
//
// "New" is decided when Run opens the file, before the runtime writes
// anything to it: the file holds no key in any bucket, so no record and
// no meta of a previous run (snapshot.State.Empty). A file this Open
// created is new; a file a previous run used always holds its group, its
// instance and its classes (recorded at every start), so it is never new,
// even with no record left.

// checkNewFile asks the group's committed offsets for topics' partitions
// (kclient.Client.Partitions, then Committed), when the
// state file at path is new (newFile), and sets
// handoff_state_file_new_with_commits: 1, with a warning, when some
// partition has a commit. A failed request is logged at Warn and leaves
// the gauge at 0; the start goes on either way. It blocks for at most
// commitTimeout.
func (k *consumer) checkNewFile(ctx context.Context, newFile bool, path string, topics []string) {
	k.cfg.metrics.stateFileNewWithCommits(false)
	if !newFile || len(topics) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	ps, err := k.client.Partitions(ctx, topics)
	var committed map[kclient.Partition]int64
	if err == nil && len(ps) > 0 {
		committed, err = k.client.Committed(ctx, ps)
	}
	if err != nil {
		if !errors.Is(ctx.Err(), context.Canceled) { // not a stop requested meanwhile
			k.cfg.log.Warn("state file is new; the group's committed offsets could not be asked for", "path", path,
				"group", k.cfg.group, "err", err)
		}
		return
	}
	if len(committed) == 0 {
		k.cfg.log.Debug("state file is new and the group has no commits", "path", path, "group", k.cfg.group)
		return
	}
	k.cfg.metrics.stateFileNewWithCommits(true)
	k.cfg.log.LogAttrs(ctx, slog.LevelWarn, "state file is new but the group has commits: was a disk lost?",
		slog.String("path", path), slog.String("group", k.cfg.group), slog.Int("partitions", len(committed)),
		slog.Any("topics", topics))
}
