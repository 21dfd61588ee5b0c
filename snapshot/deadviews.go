package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// The dead letters of the partitions another instance owns, as their
// changelogs hold them: the group's listing and the lookup of a dead
// letter's owner read them here. What each partition's changelog holds
// is kept in memory between calls: a call reads each partition on from
// where the last one stopped, so a dashboard that pages or polls reads
// only what was written since. A partition's view is read from the
// start again when it is older than deadViewFresh (a tombstone may be
// compacted away after the topic's delete.retention.ms, a day by
// default: read within it, none is missed) or the changelog was made
// again.

// deadViewFresh is how long a partition's view is read on before it is
// read from the start again.
const deadViewFresh = time.Hour

// deadReaders bounds the partitions DeadIn reads at once.
const deadReaders = 4

// deadViews is the views of the partitions read so far.
type deadViews struct {
	mu sync.Mutex
	m  map[Partition]*deadView
}

// deadView is one changelog partition's dead letters, by changelog key.
type deadView struct {
	mu    sync.Mutex
	next  int64
	since time.Time // when it was read from the start
	dead  map[string]ChangelogDead
}

// DeadIn calls each with every dead letter the changelogs of parts hold
// (the last write of its key there is not a tombstone), partition after
// partition in parts' order and in no order within one, once it has read
// them all on from where the last call stopped, up to deadReaders
// partitions at once. each must not keep d. An undecodable dead letter
// is logged and left out. It blocks for the reads until ctx ends; on a
// failed read it returns the error and calls each with nothing. Nothing
// with the changelog off.
func (c *Changelog) DeadIn(ctx context.Context, parts []Partition, each func(p Partition, d *ChangelogDead)) error {
	if c == nil || len(parts) == 0 {
		return nil
	}
	vs := &c.views
	vs.mu.Lock()
	if vs.m == nil {
		vs.m = map[Partition]*deadView{}
	}
	views := make([]*deadView, len(parts))
	for i, p := range parts {
		if vs.m[p] == nil {
			vs.m[p] = &deadView{}
		}
		views[i] = vs.m[p]
	}
	vs.mu.Unlock()
	errs := make([]error, len(parts))
	sem := make(chan struct{}, deadReaders)
	var wg sync.WaitGroup
	for i := range parts {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = c.readView(ctx, views[i], parts[i])
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, v := range views {
		v.mu.Lock()
		for k := range v.dead {
			d := v.dead[k]
			each(parts[i], &d)
		}
		v.mu.Unlock()
	}
	return nil
}

// readView reads p's changelog into v on from where v stopped.
func (c *Changelog) readView(ctx context.Context, v *deadView, p Partition) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.dead == nil || time.Since(v.since) > deadViewFresh {
		v.next, v.since, v.dead = 0, time.Now(), map[string]ChangelogDead{}
	}
	apply := func(recs []LogRecord) error {
		for i := range recs {
			rec := &recs[i]
			if _, marker, _ := store.ParseOwnerMarker(rec.Key, rec.Value); marker {
				continue
			}
			if _, ok := changelogDeadID(rec.Key); !ok {
				continue // another bucket's, or not a record's key: the partition's restore reports it
			}
			if rec.Value == nil {
				delete(v.dead, string(rec.Key))
				continue
			}
			d, err := DecodeChangelogDead(rec.Key, rec.Value)
			if err != nil {
				c.logger.Warn("undecodable dead letter in the changelog left out of the group's dead letters",
					"topic", c.log.Topic(p.Topic), "partition", p.Partition, "offset", rec.Offset, "err", err)
				delete(v.dead, string(rec.Key))
				continue
			}
			v.dead[string(rec.Key)] = d
		}
		return nil
	}
	next, err := c.log.Read(ctx, p.Topic, p.Partition, v.next, apply)
	if errors.Is(err, ErrBeyondEnd) {
		// The changelog was made again: read it whole.
		v.next, v.since, v.dead = 0, time.Now(), map[string]ChangelogDead{}
		next, err = c.log.Read(ctx, p.Topic, p.Partition, 0, apply)
	}
	v.next = next // what was applied stays applied, also on a failure
	if err != nil {
		return fmt.Errorf("read the changelog of topic %s partition %d: %w", p.Topic, p.Partition, err)
	}
	return nil
}
