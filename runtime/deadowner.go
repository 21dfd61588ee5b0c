package runtime

import (
	"context"
	"fmt"

	"github.com/handoff-go/handoff/snapshot"
)

// deadElsewhere looks for dead letter id in the changelogs of the
// partitions this instance does not own (read on from where the group's
// listing last read them, snapshot.Changelog.DeadIn) and returns the *NotOwnerError
// naming its partition and the partition's owner when the last write of
// its key there is not a tombstone; nil when no such partition holds it.
// With the changelog off it returns nil. It blocks for the reads and one
// DescribeGroups request, until ctx ends.
func (l *stateLog) deadElsewhere(ctx context.Context, id snapshot.DeadID) error {
	if id.Local {
		return nil
	}
	// The partitions not restored here: the local file's copy, if any, is
	// unused.
	var found *snapshot.Partition
	err := l.cl().DeadIn(ctx, l.unowned(), func(p snapshot.Partition, d *snapshot.ChangelogDead) {
		if found == nil && d.ID == id {
			found = &p
		}
	})
	if err != nil {
		return fmt.Errorf("runtime: dead letter %s: %w", id, err)
	}
	if found != nil {
		p := *found
		owner, err := l.client.Owner(ctx, p.Topic, p.Partition)
		if err != nil {
			return fmt.Errorf("runtime: dead letter %s of topic %s partition %d: find the partition's owner: %w", id, p.Topic, p.Partition, err)
		}
		return &NotOwnerError{Key: id.String(), Topic: p.Topic, Partition: int(p.Partition), Owner: owner}
	}
	return nil
}
