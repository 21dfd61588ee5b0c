package runtime

import (
	"context"
	"fmt"

	"github.com/handoff-go/handoff/runtime/internal/changelog"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/snapshot"
)

// Ownership of a partition's state. The changelog is the truth for a
// partition; the file's copy is a cache, valid only while this file
// owned the partition without a break. A break cannot be told from the
// changelog's content: once delete.retention.ms has passed, the
// tombstones another owner wrote for the records it finished are gone,
// and a stale local copy looks like live state. So ownership is
// explicit: an instance that begins owning a partition writes an owner
// marker naming its file to the partition's changelog (claim), and
// waits for its acknowledgement before the partition is fetched. At an
// assignment, the latest marker (read from the checkpoint on, or
// remembered in the file when the checkpoint is past it) naming another
// file, or a file with no checkpoint for the partition, is a break: the
// partition is read from its start and the file's records of it are
// replaced by what the read holds (snapshot.State.ApplyRestore). A
// revocation and an assignment back with nobody owning in between (every
// kafka-go rebalance revokes all) is not a break: the marker is still
// this file's.

// ownerView is what an assignment knows of a partition's ownership.
type ownerView struct {
	// latest is the file named by the latest marker the read held, nil
	// when it held none.
	latest *[16]byte
	// rebuild: the file's copy is not trusted (see broken).
	rebuild bool
}

// splitMarkers returns recs without their owner markers, in place, and
// the file the last of them names (nil: none, or none that parses).
func splitMarkers(recs []snapshot.ChangelogRecord) ([]snapshot.ChangelogRecord, *[16]byte) {
	var latest *[16]byte
	kept := recs[:0]
	for _, r := range recs {
		id, ok, err := snapshot.ParseOwnerMarker(r.Key, r.Value)
		if !ok {
			kept = append(kept, r)
			continue
		}
		if err == nil {
			latest = &id
		}
	}
	return kept, latest
}

// broken reports whether the file's copy of topic's partition p is to be
// rebuilt: the file has no checkpoint for it (hadCheckpoint: the one
// stored before a read that found the changelog shorter, a topic made
// again, counts), or the latest marker (latest, else the one the file
// remembers) names another file. A partition no marker was ever written
// for (only versions before the markers owned it) is trusted, as they
// trusted it.
func (l *stateLog) broken(topic string, p int32, hadCheckpoint bool, latest *[16]byte) (bool, error) {
	if !hadCheckpoint {
		return true, nil
	}
	own, hasOwn, owner, remembered, err := l.state.owner(topic, p)
	if err != nil {
		return false, err
	}
	if latest != nil {
		owner, remembered = *latest, true
	}
	return remembered && (!hasOwn || owner != own), nil
}

// ownership strips the owner markers from recs, read from the file's
// checkpoint from (0 and hadCheckpoint false: none) up to next, and
// decides whether the partition is rebuilt; then it reads the partition
// again from its start if the read began later, and returns the records
// to apply, where the read ended and the view.
func (l *stateLog) ownership(ctx context.Context, topic string, p int32, from int64, hadCheckpoint bool,
	recs []snapshot.ChangelogRecord, next int64) ([]snapshot.ChangelogRecord, int64, ownerView, error) {
	var v ownerView
	recs, v.latest = splitMarkers(recs)
	brk, err := l.broken(topic, p, hadCheckpoint, v.latest)
	if err != nil || !brk {
		return recs, next, v, err
	}
	v.rebuild = true
	if from == 0 {
		return recs, next, v, nil
	}
	l.log.Info("partition owned elsewhere since this file last owned it; rebuilding it from the whole changelog",
		"topic", l.client.Topic(topic), "partition", p, "checkpoint", from)
	recs = recs[:0]
	next, err = l.client.Read(ctx, topic, p, 0, func(batch []changelog.Rec) error {
		for _, r := range batch {
			recs = append(recs, snapshot.ChangelogRecord{Offset: r.Offset, Key: r.Key, Value: r.Value})
		}
		return nil
	})
	if err != nil {
		return nil, 0, v, err
	}
	recs, v.latest = splitMarkers(recs)
	return recs, next, v, nil
}

// claim makes this file topic's partition p's owner, once its restore
// applied the changelog up to next: unless the latest marker the file
// knows of is its own already, it writes a marker naming the file,
// waits for its acknowledgement and remembers it. It returns the
// checkpoint to own the partition with: next, or past the marker when
// the marker landed at next. The marker may overlap the state file's
// writes: its place among them does not matter.
func (l *stateLog) claim(ctx context.Context, topic string, p int32, next int64) (int64, error) {
	own, hasOwn, owner, known, err := l.state.owner(topic, p)
	if err != nil {
		return next, err
	}
	if !hasOwn {
		return next, fmt.Errorf("the state file has no changelog ID")
	}
	if known && owner == own {
		return next, nil
	}
	key, value := snapshot.OwnerMarker(own)
	out := &changelog.Out{Input: topic, Partition: p, Key: key, Value: value}
	wait := l.client.Send([]*changelog.Out{out})
	wctx, cancel := l.waitCtx()
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	if err := wait(wctx); err != nil {
		return next, fmt.Errorf("write the owner marker: %w", err)
	}
	if err := l.state.setOwner(topic, p, own); err != nil {
		return next, err
	}
	l.claimed.Add(1)
	if out.Offset == next {
		next++
	}
	return next, nil
}

// sendUnlogged sends the file's records the changelog may never have
// seen (snapshot.State.SendUnlogged), before any partition's restore:
// fresh says the file had no changelog ID before this start.
func (l *stateLog) sendUnlogged(fresh bool) error {
	n, err := l.state.sendUnlogged(fresh)
	if err != nil {
		return fmt.Errorf("runtime: changelog: send the records written without it: %w", err)
	}
	if n > 0 {
		l.log.Info("records written without the changelog sent to it", "records", n)
	}
	return nil
}

// noteOwner remembers owner, the file the last owner marker a follow of
// p read names, before the follow moves p's checkpoint past it: a marker
// of another file means another instance began owning p meanwhile, and
// this file's next assignment of p is a break. It reports false when the
// file could not be written (logged): then the checkpoint must stay
// where it is, so that the next read meets the marker again.
func (l *stateLog) noteOwner(p kclient.Partition, owner *[16]byte) bool {
	if owner == nil {
		return true
	}
	own, err := l.state.noteOwner(p.Topic, int32(p.Partition), *owner)
	if err != nil {
		l.log.Warn("owner marker not remembered; read again at the next look", "partition", p.String(), "err", err)
		return false
	}
	if own != *owner {
		l.log.Warn("another instance began owning a partition this instance owns; its next assignment here rebuilds it from the changelog",
			"partition", p.String())
	}
	return true
}
