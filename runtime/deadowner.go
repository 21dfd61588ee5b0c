package runtime

import (
	"context"
	"fmt"

	"github.com/handoff-go/handoff/snapshot"
)

// deadElsewhere looks for dead letter id in the changelogs of the
// partitions this instance does not own (read on from where the group's
// listing last read them, deadViews) and returns the *NotOwnerError
// naming its partition and the partition's owner when the last write of
// its key there is not a tombstone; nil when no such partition holds it.
// With the changelog off it returns nil. It blocks for the reads and one
// DescribeGroups request, until ctx ends.
func (l *stateLog) deadElsewhere(ctx context.Context, id snapshot.DeadID) error {
	if id.Local {
		return nil
	}
	others := l.unowned() // not restored here: the local file's copy, if any, is unused
	views, err := l.views.refresh(ctx, l, others)
	if err != nil {
		return fmt.Errorf("runtime: dead letter %s: %w", id, err)
	}
	for i, v := range views {
		alive := false
		v.each(func(d *deadFound) { alive = alive || d.ID == id })
		if !alive {
			continue
		}
		p := others[i]
		owner, err := l.client.Owner(ctx, p.Topic, int32(p.Partition))
		if err != nil {
			return fmt.Errorf("runtime: dead letter %s of topic %s partition %d: find the partition's owner: %w", id, p.Topic, p.Partition, err)
		}
		return &NotOwnerError{Key: id.String(), Topic: p.Topic, Partition: p.Partition, Owner: owner}
	}
	return nil
}
