package snapshot

import (
	"bytes"
	"context"
	"maps"
	"slices"

	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// Partitions added to an input topic. A record that did not come from
// Kafka belongs to the partition its key routes to by the input topic's
// partition count (ChangelogConfig.Route and Count), and lives in that
// partition's changelog. When the input topic gains partitions, keys
// route elsewhere: the owner of each partition moves the records of its
// changelog whose key routes elsewhere now (MoveOut): each is written
// to its new partition (same changelog key, same value, the moved mark
// and this file as writer), then tombstoned in the old one with the
// moved mark. A moved tombstone is not a delete: the record lives on in
// its new partition, so a restore or follow of the old partition leaves
// the reader's copy alone (dropMovedOut). A restore or a follow that
// brings back a record that routes elsewhere (written by an instance
// that routed by the old count), or a restore of a partition the file
// last read whole by another count, says so (Restoration.Misrouted,
// Followed.Misrouted), and the caller moves the partition's records.

// routedBy returns the partition count by which p's changelog was last
// read whole and moved here; 0 when never, or when the file cannot
// tell.
func (c *Changelog) routedBy(p Partition) int32 { return c.s.routedBy(p.Topic, p.Partition) }

// markRouted keeps in the file, alone, that p's records are where count
// routes them (read whole and moved, or a restore found none to move):
// the next restore of p does not look again unless the count changed.
// count is the one read before the look began: one learned during it
// may have routed a record the look did not move.
func (c *Changelog) markRouted(p Partition, count int32) error {
	return c.s.setRoutedBy(p.Topic, p.Partition, count)
}

// movesTo reports the partition the record value of p's changelog
// routes to now, if it is live, decodes and routes to another partition
// of p's topic.
func (c *Changelog) movesTo(p Partition, value []byte) (int32, bool) {
	if value == nil {
		return 0, false
	}
	rec, err := store.PeekRecord(value) // the routing fields only, not kept
	if err != nil {
		return 0, false
	}
	t, q, ok := c.route(&rec.Message)
	if !ok || t != p.Topic || q == p.Partition {
		return 0, false
	}
	return q, true
}

// misrouted reports whether the last write of a key among recs, read
// from p's changelog in offset order, is a record that routes to another
// partition of p's topic now: what MoveOut would move. It decodes the
// values in memory, without copying them; a restore of 100k records no
// longer reads them back from the file for it (which took about a fifth
// of the restore's CPU).
func (c *Changelog) misrouted(p Partition, recs []ChangelogRecord) bool {
	var found map[string]bool
	for i := range recs {
		r := &recs[i]
		if _, ok := c.movesTo(p, r.Value); ok {
			if found == nil {
				found = map[string]bool{}
			}
			found[string(r.Key)] = true
		} else if found != nil {
			delete(found, string(r.Key))
		}
	}
	return len(found) > 0
}

// movedRec is a record of a changelog partition whose key routes to
// another partition of its topic now.
type movedRec struct {
	to         int32
	key, value []byte
}

// MoveOut reads p's changelog whole and moves every record whose key
// routes to another partition now: written there, then, once all are
// acknowledged, tombstoned in p with the moved mark (a failure between
// the two leaves a record in both, which the next move of p ends, never
// in none); then it keeps that p is routed by the count read before
// its read (a count learned meanwhile makes the growth move p again, p
// being owned). The checkpoints stay: the follow reads these writes
// back. It returns how many records it moved. The caller orders it with p's restore, follow and revocation,
// and owns p. It blocks for the read and the writes until ctx ends.
// Nothing with the changelog off.
func (c *Changelog) MoveOut(ctx context.Context, p Partition) (int, error) {
	if c == nil {
		return 0, nil
	}
	count := c.count(p.Topic)
	last := map[string]movedRec{}
	_, err := c.log.Read(ctx, p.Topic, p.Partition, 0, func(batch []LogRecord) error {
		for i := range batch {
			r := &batch[i]
			to, ok := c.movesTo(p, r.Value)
			if !ok {
				delete(last, string(r.Key))
				continue
			}
			last[string(r.Key)] = movedRec{to: to, key: bytes.Clone(r.Key), value: bytes.Clone(r.Value)}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if len(last) > 0 {
		var writer []byte
		if id, ok, err := c.s.fileID(); err == nil && ok {
			writer = id[:]
		}
		puts := make([]LogRecord, 0, len(last))
		tombs := make([]LogRecord, 0, len(last))
		for _, k := range slices.Sorted(maps.Keys(last)) {
			m := last[k]
			// The put says it is a move, and who moved it: the instance
			// that created the record may have dropped its copy (a rebuild
			// of the new partition before the move reached it) and must
			// take it back.
			puts = append(puts, LogRecord{Input: p.Topic, Partition: m.to, Key: m.key, Value: m.value, Moved: true, Writer: writer})
			tombs = append(tombs, LogRecord{Input: p.Topic, Partition: p.Partition, Key: m.key, Moved: true})
		}
		for _, recs := range [][]LogRecord{puts, tombs} {
			wctx, cancel := c.waitCtx()
			err := c.log.Send(recs)(wctx)
			cancel()
			if err != nil {
				return 0, err
			}
		}
	}
	return len(last), c.markRouted(p, count)
}
