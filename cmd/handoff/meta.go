package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff/internal/deadop"
	"github.com/handoff-go/handoff/kafkasec"
)

// metaTopicName is the meta topic of group: one partition, compacted,
// where the runtime keeps the classes' pauses and the group's dead-letter
// operations (internal/deadop).
func metaTopicName(group string) string { return group + ".handoff-meta" }

// metaClient reads and writes the meta topic of one group. It is not
// safe for concurrent use.
type metaClient struct {
	r     *changelogReader
	topic string
}

// newMetaClient connects to f's brokers with d, as newChangelogReader
// does, and checks that the group's meta topic exists (one metadata
// request): a group whose service never ran with the changelog has none,
// and no instance would read what is written there.
func newMetaClient(ctx context.Context, f *clusterFlags, d *kafkasec.Dialer) (*metaClient, error) {
	r, err := newChangelogReader(ctx, f, d, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		return nil, err
	}
	m := &metaClient{r: r, topic: metaTopicName(f.group)}
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(m.topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, r.cl)
	if err == nil && len(resp.Topics) != 1 {
		err = fmt.Errorf("%d topics in the answer, want 1", len(resp.Topics))
	}
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			r.Close()
			return nil, fmt.Errorf("group %s has no meta topic %s: is the group right, does its service run with the changelog?", f.group, m.topic)
		}
	}
	if err != nil {
		r.Close()
		return nil, withCause(ctx, fmt.Errorf("metadata of meta topic %s: %w", m.topic, err))
	}
	return m, nil
}

// Close closes the connections.
func (m *metaClient) Close() { m.r.Close() }

// partition is the meta topic's one partition.
func (m *metaClient) partition() changelogPartition {
	return changelogPartition{Topic: m.topic, Partition: 0}
}

// write writes value under key and returns its offset once every
// in-sync replica has it. It blocks until then or ctx ends.
func (m *metaClient) write(ctx context.Context, key, value []byte) (int64, error) {
	rec := &kgo.Record{Topic: m.topic, Partition: 0, Key: key, Value: value}
	if err := m.r.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return 0, withCause(ctx, fmt.Errorf("write %s to meta topic %s: %w", key, m.topic, err))
	}
	return rec.Offset, nil
}

// metaOp is one dead-letter operation as the meta topic holds it.
type metaOp struct {
	Request  *deadop.Request
	Offset   int64          // the request's
	Cancel   *deadop.Cancel // nil: not cancelled
	Statuses map[string]deadop.Status
}

// statuses returns the owners' statuses, by instance name.
func (o *metaOp) statuses() []deadop.Status {
	out := make([]deadop.Status, 0, len(o.Statuses))
	for _, name := range slices.Sorted(maps.Keys(o.Statuses)) {
		out = append(out, o.Statuses[name])
	}
	return out
}

// progress sums the owners' statuses.
func (o *metaOp) progress() deadop.Progress {
	return deadop.Sum(o.Request, o.Cancel, o.statuses())
}

// over reports whether the operation is over at now, as the runtime
// shows it: cancelled, or every dead letter it names reported on with no
// owner running, or no owner running once deadop.ReportGrace has passed. In
// the last case some may be unreported for good (Progress.Unreported):
// an owner writes nothing about the IDs that were no longer its dead
// letters when it looked, and nothing is written for those of a
// partition nobody owns until an owner comes.
func (o *metaOp) over(now time.Time) bool {
	p := o.progress()
	if p.Over {
		return true
	}
	for _, s := range o.Statuses {
		if s.State == deadop.Running {
			return false
		}
	}
	begin := o.Request.At
	if o.Request.StartAt.After(begin) {
		begin = o.Request.StartAt
	}
	return now.Sub(begin) >= deadop.ReportGrace
}

// metaOps collects the operations' records of the meta topic, in the
// order they were written.
type metaOps struct {
	ops map[string]*metaOp
	bad []changelogProblem
}

// add applies one record of the meta topic: the last write of a key
// wins, a tombstone deletes. A key not of an operation is ignored; one
// that does not decode is kept in bad.
func (s *metaOps) add(topic string, rec changelogRecord) {
	r, ok, err := deadop.Parse(rec.Key, rec.Value)
	if !ok {
		return
	}
	if err != nil {
		s.bad = append(s.bad, changelogProblem{Topic: topic, Partition: 0, Offset: rec.Offset, Err: err})
		return
	}
	if s.ops == nil {
		s.ops = map[string]*metaOp{}
	}
	op := s.ops[r.Op]
	if op == nil {
		op = &metaOp{Statuses: map[string]deadop.Status{}}
		s.ops[r.Op] = op
	}
	switch r.Kind {
	case deadop.KindRequest:
		op.Request, op.Offset = r.Request, rec.Offset
	case deadop.KindCancel:
		op.Cancel = r.Cancel
	case deadop.KindStatus:
		if r.Status == nil {
			delete(op.Statuses, r.Instance)
		} else {
			op.Statuses[r.Instance] = *r.Status
		}
	}
}

// requested returns the operations that have a request, newest first.
func (s *metaOps) requested() []*metaOp {
	var out []*metaOp
	for _, op := range s.ops {
		if op.Request != nil {
			out = append(out, op)
		}
	}
	slices.SortFunc(out, func(a, b *metaOp) int {
		if c := b.Request.At.Compare(a.Request.At); c != 0 {
			return c
		}
		return cmp.Compare(b.Offset, a.Offset)
	})
	return out
}

// readOps reads the meta topic to the end it had when the read began and
// returns its operations. It blocks until then or ctx ends.
func (m *metaClient) readOps(ctx context.Context) (*metaOps, error) {
	var s metaOps
	err := m.r.read(ctx, []changelogPartition{m.partition()}, func(_ changelogPartition, rec changelogRecord) error {
		s.add(m.topic, rec)
		return nil
	})
	if err != nil {
		return nil, withCause(ctx, err)
	}
	return &s, nil
}

// follow calls fn with every record of the meta topic from offset from
// on, as they come, and after each batch of them, and at least every
// tick, calls after. It blocks until after returns an error (which it
// returns; errStopFollow as nil) or ctx ends (ctx's cause).
func (m *metaClient) follow(ctx context.Context, from int64, tick time.Duration, fn func(rec changelogRecord), after func() error) error {
	m.r.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{m.topic: {0: kgo.NewOffset().At(from)}})
	for {
		pollCtx, cancel := context.WithTimeout(ctx, tick)
		fetches := m.r.cl.PollFetches(pollCtx)
		cancel()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) { // the tick
				ferr = errors.Join(ferr, fmt.Errorf("read meta topic %s partition %d: %w", t, p, err))
			}
		})
		if ferr != nil {
			return ferr
		}
		for it := fetches.RecordIter(); !it.Done(); {
			rec := it.Next()
			if !rec.Attrs.IsControl() && rec.Topic == m.topic {
				fn(changelogRecord{Offset: rec.Offset, Key: rec.Key, Value: rec.Value})
			}
		}
		if err := after(); err != nil {
			if errors.Is(err, errStopFollow) {
				return nil
			}
			return err
		}
	}
}

// errStopFollow ends follow without an error.
var errStopFollow = errors.New("stop following")
