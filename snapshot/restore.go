package snapshot

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// The restore's and the follow's read-and-apply, and the ownership of a
// partition's state. The changelog is the truth for a partition; the
// file's copy is a cache, valid only while this file owned the partition
// without a break. A break cannot be told from the changelog's content:
// once delete.retention.ms has passed, the tombstones another owner
// wrote for the records it finished are gone, and a stale local copy
// looks like live state. So ownership is explicit: an instance that
// begins owning a partition writes an owner marker naming its file to
// the partition's changelog, and waits for its acknowledgement
// before the partition is fetched (Restore). At an assignment, the latest marker
// (read from the checkpoint on, or remembered in the file when the
// checkpoint is past it) naming another file, or a file with no
// checkpoint for the partition, is a break: the partition is read from
// its start and the file's records of it are replaced by what the read
// holds. A revocation and an assignment back with nobody owning in
// between is not a break: the marker is still this file's.

// Restoration is what [Changelog.Restore] read and applied.
type Restoration struct {
	// Read counts the changelog records read (owner markers left out);
	// Next is the partition's checkpoint: where the read ended, or past
	// the owner marker written there.
	Read int
	Next int64
	// Applied are the records written or deleted in the file.
	Applied Applied
	// Rebuilt: the partition was owned elsewhere since this file last
	// owned it, and its records were rebuilt from the whole changelog.
	Rebuilt bool
	// Misrouted: records of the partition may route to another partition
	// now (one applied does, the file last read the partition whole by
	// another partition count, or the count changed during the
	// restore): the caller moves them (MoveOut).
	Misrouted bool
}

// Restore reads p's changelog from the file's checkpoint for it (from
// the start without one: an empty disk, or a partition that lived
// elsewhere) up to its end, and applies it to the file, last write
// winning, tombstones deleting; after a break it reads it whole and
// rebuilds the file's records of p from it (records of p the read does
// not hold are dropped). Then it makes this file p's owner (the owner
// marker, see the comment at the top of this file) and p is owned here
// (Owns, OwnsPartition, Follow) until Disown; when no record of p may
// route elsewhere (Restoration.Misrouted false: none does, and the count
// did not change during the restore) it keeps that p is routed by the
// count. It blocks for the reads and the marker's
// acknowledgement until ctx ends. With the changelog off it does
// nothing.
func (c *Changelog) Restore(ctx context.Context, p Partition) (Restoration, error) {
	var res Restoration
	if c == nil {
		return res, nil
	}
	from, known, err := c.s.checkpoint(p.Topic, p.Partition)
	if err != nil {
		return res, err
	}
	hadCheckpoint := known
	// Without a checkpoint the read is whole: what it applies is all of p.
	count := c.count(p.Topic)
	stale := known && c.routedBy(p) != count
	recs, moved, next, err := c.read(ctx, p, from, false)
	if errors.Is(err, ErrBeyondEnd) {
		// The changelog is shorter than the file's checkpoint: the topic
		// was made again. Read it whole.
		c.logger.Warn("changelog ends before the state file's checkpoint; reading it from the start", "topic", c.log.Topic(p.Topic),
			"partition", p.Partition, "checkpoint", from)
		from, known = 0, false
		recs, moved, next, err = c.read(ctx, p, 0, false)
	}
	if err != nil {
		return res, err
	}
	recs, latest := splitMarkers(recs)
	rebuild, err := c.broken(p, hadCheckpoint, latest)
	if err != nil {
		return res, err
	}
	if rebuild && from != 0 {
		c.logger.Info("partition owned elsewhere since this file last owned it; rebuilding it from the whole changelog",
			"topic", c.log.Topic(p.Topic), "partition", p.Partition, "checkpoint", from)
		if recs, moved, latest, err = c.withHead(ctx, p, from, recs, moved, latest); err != nil {
			return res, err
		}
	}
	res = Restoration{Next: next, Misrouted: stale}
	if len(recs) > 0 || !known || next != from || rebuild || latest != nil { // else the file is where the changelog is
		recs = dropMovedOut(recs, moved)
		applied, dropped, err := c.s.applyRestore(p.Topic, p.Partition, recs, next, restoreOpts{
			Rebuild: rebuild, Belongs: c.RoutedTo(p), Latest: latest, Renames: c.renames})
		if err != nil {
			return Restoration{}, err
		}
		if rebuild {
			c.rebuilt.Add(1)
			applied.Deleted += dropped
		}
		res = Restoration{Read: len(recs), Next: next, Applied: applied, Rebuilt: rebuild,
			Misrouted: stale || c.misrouted(p, recs)}
	}
	if res.Next, err = c.claim(ctx, p, res.Next); err != nil {
		return Restoration{}, fmt.Errorf("claim: %w", err)
	}
	c.ownRestored(p, &res, count)
	return res, nil
}

// withHead puts before recs, read of p's changelog from offset from on,
// the head of it (its start up to from), for a rebuild: the first read
// holds the rest already. The head's moved tombstones join moved, and
// its latest owner marker stands for latest when latest is nil.
func (c *Changelog) withHead(ctx context.Context, p Partition, from int64, recs []ChangelogRecord, moved map[int64]bool,
	latest *[16]byte) ([]ChangelogRecord, map[int64]bool, *[16]byte, error) {
	head, hmoved, err := c.readHead(ctx, p, from)
	if err != nil {
		return nil, nil, nil, err
	}
	head, hlatest := splitMarkers(head)
	if latest == nil {
		latest = hlatest
	}
	for o := range hmoved {
		if moved == nil {
			moved = map[int64]bool{}
		}
		moved[o] = true
	}
	return append(head, recs...), moved, latest, nil
}

// ownRestored makes p owned here once restored, and keeps that it is
// routed by count, the count read before the restore began, unless res
// says records of p may route elsewhere, or the count changed since: a
// count learned during the restore may route records of p elsewhere
// that the restore's looks did not see as such, and the growth's own
// moves (of the partitions owned when it was learned) did not include
// p, owned only now. The count is read after own: a growth either sees
// p owned or is seen here.
func (c *Changelog) ownRestored(p Partition, res *Restoration, count int32) {
	c.own(p, res.Next)
	if c.count(p.Topic) != count {
		res.Misrouted = true
	}
	if res.Misrouted {
		return
	}
	if err := c.markRouted(p, count); err != nil {
		c.logger.Warn("partition count of the last move not kept; the next restore of the partition reads its changelog whole again",
			"topic", p.Topic, "partition", p.Partition, "err", err)
	}
}

// read reads p's changelog from offset from to its end. With foreign it
// keeps only what other files wrote, and returns the owner markers
// among them; else every record. moved are the offsets of the moved
// tombstones among the records.
func (c *Changelog) read(ctx context.Context, p Partition, from int64, foreign bool) (recs []ChangelogRecord, moved map[int64]bool, next int64, err error) {
	var own [16]byte
	var hasOwn bool
	if foreign {
		if own, hasOwn, err = c.s.fileID(); err != nil {
			return nil, nil, 0, err
		}
	}
	next, err = c.log.Read(ctx, p.Topic, p.Partition, from, func(batch []LogRecord) error {
		if recs == nil {
			recs = make([]ChangelogRecord, 0, len(batch))
		}
		for i := range batch {
			r := &batch[i]
			if foreign {
				// A move's put is read whoever moved it: the file may have
				// dropped its copy (the apply inserts it only then).
				if _, marker, _ := store.ParseOwnerMarker(r.Key, r.Value); !marker && !r.MovedIn && hasOwn && changelogWrittenBy(r.Key, r.Writer, own) {
					continue // in the file already, or deleted since
				}
			}
			recs, moved = appendRead(recs, moved, r)
		}
		return nil
	})
	if err != nil {
		return nil, nil, 0, err
	}
	return recs, moved, next, nil
}

// errHeadRead stops readHead's read at its end.
var errHeadRead = errors.New("snapshot: changelog head read")

// readHead reads p's changelog from its start up to offset until (not
// included): the records before a checkpoint, for a rebuild.
func (c *Changelog) readHead(ctx context.Context, p Partition, until int64) (recs []ChangelogRecord, moved map[int64]bool, err error) {
	_, err = c.log.Read(ctx, p.Topic, p.Partition, 0, func(batch []LogRecord) error {
		for i := range batch {
			r := &batch[i]
			if r.Offset >= until {
				return errHeadRead
			}
			recs, moved = appendRead(recs, moved, r)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errHeadRead) {
		return nil, nil, err
	}
	return recs, moved, nil
}

// splitMarkers returns recs without their owner markers, in place, and
// the file the last of them names (nil: none, or none that parses).
func splitMarkers(recs []ChangelogRecord) ([]ChangelogRecord, *[16]byte) {
	var latest *[16]byte
	kept := recs[:0]
	for _, r := range recs {
		id, ok, err := store.ParseOwnerMarker(r.Key, r.Value)
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

// broken reports whether the file's copy of p is to be rebuilt: the file
// has no checkpoint for it (hadCheckpoint: the one stored before a read
// that found the changelog shorter counts), or the latest marker
// (latest, else the one the file remembers) names another file. A
// partition no marker was ever written for (only versions before the
// markers owned it) is trusted, as they trusted it.
func (c *Changelog) broken(p Partition, hadCheckpoint bool, latest *[16]byte) (bool, error) {
	if !hadCheckpoint {
		return true, nil
	}
	own, hasOwn, owner, remembered, err := c.s.owner(p.Topic, p.Partition)
	if err != nil {
		return false, err
	}
	if latest != nil {
		owner, remembered = *latest, true
	}
	return remembered && (!hasOwn || owner != own), nil
}

// dropMovedOut returns recs, read from one changelog partition in offset
// order, without the records of the keys whose last record there is a
// moved tombstone (moved holds their offsets): those records live in
// another partition now, and the reader's copy, if any, is left alone.
// recs' array is reused.
func dropMovedOut(recs []ChangelogRecord, moved map[int64]bool) []ChangelogRecord {
	if len(moved) == 0 {
		return recs
	}
	last := map[string]int64{}
	for _, r := range recs {
		last[string(r.Key)] = r.Offset
	}
	return slices.DeleteFunc(recs, func(r ChangelogRecord) bool { return moved[last[string(r.Key)]] })
}

// claim makes this file p's owner, once its restore applied the
// changelog up to next: unless the latest marker the file knows of is
// its own already, it writes a marker naming the file, waits for its
// acknowledgement (bounded as every changelog wait, and by ctx) and
// remembers it. It returns the checkpoint to own p with: next, or past
// the marker when the marker landed at next. The marker may overlap the
// file's writes: its place among them does not matter.
func (c *Changelog) claim(ctx context.Context, p Partition, next int64) (int64, error) {
	own, hasOwn, owner, known, err := c.s.owner(p.Topic, p.Partition)
	if err != nil {
		return next, err
	}
	if !hasOwn {
		return next, errors.New("the state file has no changelog ID")
	}
	if known && owner == own {
		return next, nil
	}
	key, value := store.OwnerMarker(own)
	out := []LogRecord{{Input: p.Topic, Partition: p.Partition, Key: key, Value: value}}
	wait := c.log.Send(out)
	wctx, cancel := c.waitCtx()
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	if err := wait(wctx); err != nil {
		return next, fmt.Errorf("write the owner marker: %w", err)
	}
	if err := c.s.setOwner(p.Topic, p.Partition, own); err != nil {
		return next, err
	}
	c.claimed.Add(1)
	if out[0].Offset == next {
		next++
	}
	return next, nil
}

// Followed is what [Changelog.Follow] read and applied.
type Followed struct {
	// Records are the other instances' writes it read, and every
	// move's put (moved-out keys left out), in offset order; Applied
	// says which changed the file.
	Records []ChangelogRecord
	// Applied are the records written or deleted in the file.
	Applied Applied
	// Misrouted: one of Records routes to another partition now (written
	// by an instance that routed by an older count): the caller moves
	// the partition's records (MoveOut).
	Misrouted bool
}

// Follow applies what other instances wrote to owned partition p's
// changelog from p's checkpoint up to end, if p is owned and its
// changelog grew past the checkpoint: the writes of other files are
// applied to the file (renamed classes renamed; the file's checkpoint
// of p stays, the one in memory moves), this file's own are skipped (the
// file has them), but for the puts of its moves of records it no longer
// holds (see store's ApplyChangelog). The caller orders it with p's
// restore and revocation. It blocks for the read until ctx ends. Nothing with the changelog off,
// or when p is not owned here.
func (c *Changelog) Follow(ctx context.Context, p Partition, end int64) (Followed, error) {
	var f Followed
	from, ok := c.checkpointOf(p)
	if !ok || end <= from {
		return f, nil
	}
	recs, moved, next, err := c.read(ctx, p, from, true)
	if err != nil {
		return f, fmt.Errorf("read %s from %d: %w", c.log.Topic(p.Topic), from, err)
	}
	recs, owner := splitMarkers(recs)
	recs = dropMovedOut(recs, moved)
	if len(recs) > 0 {
		if f.Applied, err = c.s.applyFollowed(p.Topic, p.Partition, recs, c.renames); err != nil {
			return f, fmt.Errorf("apply other instances' writes: %w", err)
		}
	}
	if owner != nil {
		// A marker of another file means another instance began owning p
		// meanwhile: this file's next assignment of p is a break. Kept
		// before the checkpoint moves past it, else read again next time.
		own, err := c.s.noteOwner(p.Topic, p.Partition, *owner)
		if err != nil {
			return f, fmt.Errorf("remember the owner marker: %w", err)
		}
		if own != *owner {
			c.logger.Warn("another instance began owning a partition this instance owns; its next assignment here rebuilds it from the changelog",
				"topic", p.Topic, "partition", p.Partition)
		}
	}
	c.cover(p, next)
	f.Records = recs
	for _, r := range recs {
		if _, ok := c.movesTo(p, r.Value); ok {
			f.Misrouted = true
			break
		}
	}
	return f, nil
}

// appendRead adds r, read from the changelog, to recs, and its offset to
// moved when r is the tombstone a repartition left (made on first use).
func appendRead(recs []ChangelogRecord, moved map[int64]bool, r *LogRecord) ([]ChangelogRecord, map[int64]bool) {
	recs = append(recs, ChangelogRecord{Offset: r.Offset, Key: r.Key, Value: r.Value, Writer: r.Writer, Moved: r.MovedIn})
	if r.Moved {
		if moved == nil {
			moved = map[int64]bool{}
		}
		moved[r.Offset] = true
	}
	return recs, moved
}
