package runtime

import (
	"context"
	"github.com/handoff-go/handoff/runtime/internal/service"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/kclient"
)

// Consumer lag as operators read it: for each partition this instance
// holds, the messages between the partition's end (its last stable
// offset with ReadCommitted, its high watermark with ReadUncommitted) and
// the group's committed offset, sampled from the broker (through the client's
// Offsets) every CommitInterval whether or not commits move; and, per
// class, the age of the oldest message fetched and not settled.

// sampleLag sets the lag of the generation's partitions every
// CommitInterval until ctx ends, then removes their series: the
// partitions leave this instance (a rebalance or the stop).
func (g *generation) sampleLag(ctx context.Context) {
	defer func() {
		for _, tr := range g.trackers() {
			g.cfg.metrics.dropLag(tr.topic, tr.partition)
		}
	}()
	if g.k.client == nil {
		return
	}
	t := time.NewTicker(g.cfg.commitInterval)
	defer t.Stop()
	for {
		if err := g.sampleLagOnce(ctx); err != nil && ctx.Err() == nil {
			g.cfg.log.Debug("consumer lag not sampled", "generation", g.id.Load(), "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleLagOnce asks the partitions' leaders for their first offsets and
// their ends and sets each partition's lag: the end minus the committed
// offset or, while the group has committed none, minus where
// reading starts (the first offset with StartFirst; with StartLast the
// lag counts from the first fetched record, none fetched counts 0).
//
// The committed offset is the tracker's last commit or, before this
// instance has committed one, the group's, asked of the coordinator once
// per partition: a franz-go member resumes a partition from the group's
// committed offset without telling it (its trackers start unknown), and
// on an idle partition no commit of ours ever comes. A partition whose
// group offset could not be asked gets no sample this time.
func (g *generation) sampleLagOnce(ctx context.Context) error {
	trs := g.trackers()
	if len(trs) == 0 {
		return nil
	}
	ps := make([]kclient.Partition, len(trs))
	var ask []*tracker // no commit of ours, the group's not known
	var unknown []kclient.Partition
	for i, tr := range trs {
		ps[i] = tr.partitionName()
		if tr.committedOffset() < 0 && tr.groupCommitted.Load() == -2 {
			ask, unknown = append(ask, tr), append(unknown, ps[i])
		}
	}
	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	offs, err := g.k.client.Offsets(ctx, ps)
	if err != nil {
		return err
	}
	var groupErr error
	if len(unknown) > 0 {
		var committed map[kclient.Partition]int64
		if committed, groupErr = g.k.client.Committed(ctx, unknown); groupErr == nil {
			for _, tr := range ask {
				c, ok := committed[tr.partitionName()]
				if !ok {
					c = -1
				}
				tr.groupCommitted.Store(c)
			}
		}
	}
	g.lagMu.Lock()
	defer g.lagMu.Unlock()
	owned := make(map[*tracker]bool, len(trs))
	for _, tr := range g.trackers() {
		owned[tr] = true
	}
	for _, tr := range trs {
		if !owned[tr] {
			continue // removed while the offsets were asked for
		}
		p, ok := offs[tr.partitionName()]
		if !ok {
			continue
		}
		base := tr.committedOffset()
		if base < 0 {
			base = tr.groupCommitted.Load()
		}
		if base == -2 {
			continue // the group's committed offset not known yet
		}
		if base < 0 {
			base = p.First
			if g.cfg.startLast {
				base = tr.firstFetched(p.Last)
			}
		}
		lag := max(p.Last-base, 0)
		tr.lag.Store(lag)
		g.cfg.metrics.setLag(tr.topic, tr.partition, lag)
	}
	return groupErr
}

// oldestUnsettled returns the age of class c's oldest Kafka message that
// is fetched and neither done nor saved, over the partitions this
// instance fetches now; zero when there is none.
func (k *consumer) oldestUnsettled(c *class) time.Duration {
	g := k.fetchingGen()
	if g == nil {
		return 0
	}
	oldest, found := int64(0), false
	for _, tr := range g.trackers() {
		if k.cfg.byTopic[tr.topic] != c {
			continue
		}
		if seen, ok := tr.oldest(); ok && (!found || seen < oldest) {
			oldest, found = seen, true
		}
	}
	if !found {
		return 0
	}
	return time.Duration(max(int64(time.Since(k.cfg.epoch))-oldest, 0))
}

// classLag returns how many partitions of class c's topics this
// instance fetches now and their summed lag as last sampled, -1 while
// none is sampled.
func (k *consumer) classLag(c *class) (partitions int, lag int64) {
	lag = -1
	g := k.fetchingGen()
	if g == nil {
		return 0, lag
	}
	for _, tr := range g.trackers() {
		if k.cfg.byTopic[tr.topic] != c {
			continue
		}
		partitions++
		if l := tr.lag.Load(); l >= 0 {
			lag = max(lag, 0) + l
		}
	}
	return partitions, lag
}

// lagSampler is a service running sampleLag for one generation, from
// Start to Stop (the generation's Quiesce).
type lagSampler struct {
	service.Base
	g *generation
}

// Start runs the generation's sampleLag until Stop or ctx's end.
func (s *lagSampler) Start(ctx context.Context) error { return s.StartLoop(ctx, s.g.sampleLag) }
