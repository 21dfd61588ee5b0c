package runtime

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/handoff-go/handoff/runtime/internal/changelog"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/snapshot"
)

// deadElsewhere looks for dead letter id in the changelogs of the
// partitions this instance does not own (read from their start to their
// end: compaction keeps them bounded) and returns the *NotOwnerError
// naming its partition and the partition's owner when the last write of
// its key there is not a tombstone; nil when no such partition holds it.
// With the changelog off it returns nil. It blocks for the reads and one
// DescribeGroups request, until ctx ends.
func (l *stateLog) deadElsewhere(ctx context.Context, id snapshot.DeadID) error {
	if !l.on() || id.Local {
		return nil
	}
	parts := *l.parts.Load()
	for _, topic := range slices.Sorted(maps.Keys(parts)) {
		for p := range parts[topic] {
			if l.ownsPartition(kclient.Partition{Topic: topic, Partition: int(p)}) {
				continue // restored here: the local file has what it holds
			}
			alive := false
			_, err := l.client.Read(ctx, topic, p, 0, func(recs []changelog.Rec) error {
				for _, r := range recs {
					if got, ok := snapshot.ChangelogDeadID(r.Key); ok && got == id {
						alive = r.Value != nil
					}
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("runtime: dead letter %s: read the changelog of topic %s partition %d: %w", id, topic, p, err)
			}
			if !alive {
				continue
			}
			owner, err := l.client.Owner(ctx, topic, p)
			if err != nil {
				return fmt.Errorf("runtime: dead letter %s of topic %s partition %d: find the partition's owner: %w", id, topic, p, err)
			}
			return &NotOwnerError{Key: id.String(), Topic: topic, Partition: int(p), Owner: owner}
		}
	}
	return nil
}
