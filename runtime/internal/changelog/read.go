package changelog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fetch sizes of a read: one partition per request, so the request's
// bound is the partition's.
const (
	fetchMaxBytes = 8 << 20
	fetchMaxWait  = 500 * time.Millisecond
	// leaderRetries bounds the fetches of one read that find no leader
	// (moved, electing) before the read fails.
	leaderRetries = 20
)

// ErrBeyondEnd is returned (wrapped, naming the topic, partition and
// both offsets) by [Client.Read] when from is past the changelog's end
// offset: the topic was recreated or truncated since from was read, so
// the state read from it before is not the changelog's.
var ErrBeyondEnd = errors.New("changelog: offset beyond the end of the changelog")

// Rec is a record read back: a nil Value is a tombstone, an empty
// non-nil one a value. Key and Value are the Rec's own and may be kept,
// but they are slices of their fetch's response (up to 8 MiB), which
// stays alive while one is: copy what is kept long.
type Rec struct {
	Offset     int64
	Key, Value []byte
	// Writer is the value of the record's WriterHeader; nil without one.
	Writer []byte
	// Moved is a tombstone written when its key moved to another
	// partition of the changelog (the input topic gained partitions):
	// the record lives on there, so a reader does not delete its copy.
	Moved bool
	// MovedIn is the put of such a move in the record's new partition.
	MovedIn bool
}

// WriterHeader is the header of a changelog record written under another
// state file's key: the ID of the file that wrote it (snapshot.Change's
// Writer). A record without it was written by the file its key names, or
// by a version that did not say.
const WriterHeader = "handoff-writer"

// Read reads input partition p's changelog from offset from up to the
// end offset (high watermark) it finds at its start, calling fn with
// the records of each fetch, in offset order, and returns the next
// offset to read: that end offset, or where fn's error or ctx's end
// stopped it. A from before the log's start offset (compacted or
// deleted) reads from the start; a from at the end returns at once; a
// from past the end is an error wrapping [ErrBeyondEnd]. Offsets may
// skip (compaction). Read joins no group and commits nothing: each
// fetch is a plain request to the partition's leader, so reads may run
// concurrently. It blocks until the end, fn's error, the Client's Close
// or ctx's end.
func (c *Client) Read(ctx context.Context, input string, p int32, from int64, fn func([]Rec) error) (next int64, err error) {
	return c.read(ctx, c.Topic(input), p, from, fn)
}

// ReadMetaFrom reads the meta topic from offset from up to its end
// offset, calling fn with the records of each fetch as [Client.Read]
// does, and returns the next offset to read. It blocks as Read does.
func (c *Client) ReadMetaFrom(ctx context.Context, from int64, fn func([]Rec) error) (next int64, err error) {
	return c.read(ctx, c.MetaTopic(), 0, from, fn)
}

func (c *Client) read(ctx context.Context, topic string, p int32, from int64, fn func([]Rec) error) (int64, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(c.life, func() { cancel(errClosed) })
	defer stop()

	start, end, err := c.bounds(ctx, topic, p)
	if err != nil {
		return from, err
	}
	switch {
	case from > end:
		return from, fmt.Errorf("%w: %s/%d from %d, its end is %d (log start %d)", ErrBeyondEnd, topic, p, from, end, start)
	case from < start:
		from = start
	}
	off := from
	for retries := 0; off < end; {
		if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
			return off, fmt.Errorf("changelog: reading %s/%d at %d: %w", topic, p, off, err)
		}
		rp, err := c.fetch(ctx, c.cl, topic, p, off)
		if err != nil {
			if ctx.Err() != nil {
				err = context.Cause(ctx)
			} else if retries < leaderRetries && retriable(err) {
				retries++
				c.forget(topic)
				if sleep(ctx, time.Duration(retries)*50*time.Millisecond) == nil {
					continue
				}
				err = fmt.Errorf("%w (after %w)", context.Cause(ctx), err)
			}
			return off, fmt.Errorf("changelog: reading %s/%d at %d: %w", topic, p, off, err)
		}
		switch ferr := kerr.ErrorForCode(rp.ErrorCode); {
		case ferr == nil:
		case errors.Is(ferr, kerr.OffsetOutOfRange) && rp.LogStartOffset > off:
			off = rp.LogStartOffset // compaction or retention passed us
			continue
		case kerr.IsRetriable(ferr) && retries < leaderRetries:
			retries++
			c.forget(topic)
			if err := sleep(ctx, time.Duration(retries)*50*time.Millisecond); err != nil {
				return off, fmt.Errorf("changelog: reading %s/%d at %d: %w (after %v)", topic, p, off, context.Cause(ctx), ferr)
			}
			continue
		default:
			return off, fmt.Errorf("changelog: reading %s/%d at %d: %w", topic, p, off, ferr)
		}
		retries = 0
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: off, Topic: topic, Partition: p}, rp, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil && len(fp.Records) == 0 {
			return off, fmt.Errorf("changelog: decoding %s/%d at %d: %w", topic, p, off, fp.Err)
		}
		if recs := recsBefore(fp.Records, end); len(recs) > 0 {
			if err := fn(recs); err != nil {
				return recs[len(recs)-1].Offset + 1, err
			}
		}
		switch {
		case next > off:
			off = min(next, end)
		case rp.HighWatermark <= off:
			// The log ends before the end found at the start (an
			// unclean leader election truncated it): nothing more.
			return off, nil
		}
	}
	return off, nil
}

// bounds returns partition p's log start and end offsets, asking its
// leader; a retriable error (the topic just made, a leader moving) is
// retried after a pause, leaderRetries times.
func (c *Client) bounds(ctx context.Context, topic string, p int32) (start, end int64, _ error) {
	list := func(ts int64) (int64, error) {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.CurrentLeaderEpoch = -1
		rp.Timestamp = ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		for retries := 0; ; retries++ {
			off, err := c.listOffset(ctx, topic, p, req)
			if err == nil || ctx.Err() != nil || retries == leaderRetries || !retriable(err) {
				return off, err
			}
			c.forget(topic)
			if sleep(ctx, time.Duration(retries+1)*50*time.Millisecond) != nil {
				return 0, fmt.Errorf("%w (after %w)", context.Cause(ctx), err)
			}
		}
	}
	start, err := list(-2)
	if err != nil {
		return 0, 0, fmt.Errorf("changelog: start offset of %s/%d: %w", topic, p, err)
	}
	end, err = list(-1)
	if err != nil {
		return 0, 0, fmt.Errorf("changelog: end offset of %s/%d: %w", topic, p, err)
	}
	return start, end, nil
}

// Ends returns the end offsets (high watermarks) of parts of input's
// changelog, with one ListOffsets request to each partition's leader
// for all of that leader's partitions. A partition whose leader did not
// answer, or answered with an error, is left out of the map; the error
// returned joins every such failure, and is nil when every partition
// has its end. It blocks until every leader answered or ctx
// ended.
func (c *Client) Ends(ctx context.Context, input string, parts []int32) (map[int32]int64, error) {
	return c.ends(ctx, c.Topic(input), parts)
}

// MetaEnd returns the meta topic's end offset, with one ListOffsets
// request to its leader.
func (c *Client) MetaEnd(ctx context.Context) (int64, error) {
	ends, err := c.ends(ctx, c.MetaTopic(), []int32{0})
	if err != nil {
		return 0, err
	}
	return ends[0], nil
}

// WatchMeta waits for the meta topic's records at or after offset from:
// it fetches from there and returns what the fetch brought, in offset
// order, with the offset to watch from next. The broker answers as soon
// as a record is there, or after fetchMaxWait (500ms) with none. A from
// before the log's start (compacted) watches from the start; one past
// its end (the topic recreated) from its end. A failed fetch returns
// its error and from; the next call asks for the topic's leader again.
// It blocks at most about fetchMaxWait, or until ctx ends.
func (c *Client) WatchMeta(ctx context.Context, from int64) ([]Rec, int64, error) {
	topic := c.MetaTopic()
	rp, err := c.fetch(ctx, c.watch, topic, 0, from)
	if err != nil {
		c.forget(topic)
		return nil, from, fmt.Errorf("changelog: watching %s at %d: %w", topic, from, err)
	}
	switch ferr := kerr.ErrorForCode(rp.ErrorCode); {
	case ferr == nil:
	case errors.Is(ferr, kerr.OffsetOutOfRange) && rp.LogStartOffset > from:
		return nil, rp.LogStartOffset, nil
	case errors.Is(ferr, kerr.OffsetOutOfRange) && rp.HighWatermark >= 0 && rp.HighWatermark < from:
		return nil, rp.HighWatermark, nil
	default:
		c.forget(topic)
		return nil, from, fmt.Errorf("changelog: watching %s at %d: %w", topic, from, ferr)
	}
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: from, Topic: topic, Partition: 0}, rp, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil && len(fp.Records) == 0 {
		return nil, from, fmt.Errorf("changelog: decoding %s at %d: %w", topic, from, fp.Err)
	}
	recs := recsBefore(fp.Records, rp.HighWatermark)
	return recs, max(next, from), nil
}

// ends is Ends for changelog topic topic.
func (c *Client) ends(ctx context.Context, topic string, parts []int32) (map[int32]int64, error) {
	tm, err := c.meta(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("changelog: end offsets of %s: %w", topic, err)
	}
	byLeader := map[int32][]int32{}
	var errs []error
	for _, p := range parts {
		leader, ok := tm.leaders[p]
		if !ok {
			errs = append(errs, fmt.Errorf("partition %d: %w", p, errNoLeader))
			continue
		}
		byLeader[leader] = append(byLeader[leader], p)
	}
	ends := make(map[int32]int64, len(parts))
	for leader, ps := range byLeader {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for _, p := range ps {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p
			rp.CurrentLeaderEpoch = -1
			rp.Timestamp = -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		kresp, err := c.cl.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			errs = append(errs, &brokerError{leader, err})
			continue
		}
		for _, t := range kresp.(*kmsg.ListOffsetsResponse).Topics {
			for _, rp := range t.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("partition %d: %w", rp.Partition, err))
					continue
				}
				ends[rp.Partition] = rp.Offset
			}
		}
	}
	if len(errs) > 0 {
		// Leaders move: the next call asks the metadata again.
		c.forget(topic)
		return ends, fmt.Errorf("changelog: end offsets of %s: %w", topic, errors.Join(errs...))
	}
	return ends, nil
}

func (c *Client) listOffset(ctx context.Context, topic string, p int32, req *kmsg.ListOffsetsRequest) (int64, error) {
	leader, _, err := c.leader(ctx, topic, p)
	if err != nil {
		return 0, err
	}
	kresp, err := c.cl.Broker(int(leader)).Request(ctx, req)
	if err != nil {
		return 0, &brokerError{leader, err}
	}
	for _, t := range kresp.(*kmsg.ListOffsetsResponse).Topics {
		for _, rp := range t.Partitions {
			if rp.Partition == p {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return 0, err
				}
				return rp.Offset, nil
			}
		}
	}
	return 0, fmt.Errorf("broker %d: no answer for the partition", leader)
}

// brokerError is a request to a broker that got no answer: retriable.
type brokerError struct {
	id  int32
	err error
}

func (e *brokerError) Error() string { return fmt.Sprintf("broker %d: %v", e.id, e.err) }
func (e *brokerError) Unwrap() error { return e.err }

// errNoLeader is a partition with no leader in the metadata: retriable.
var errNoLeader = errors.New("no leader in the metadata")

func retriable(err error) bool {
	var be *brokerError
	return kerr.IsRetriable(err) || errors.As(err, &be) || errors.Is(err, errNoLeader)
}

// leader returns the leader of partition p of topic, and the topic's id.
func (c *Client) leader(ctx context.Context, topic string, p int32) (int32, [16]byte, error) {
	tm, err := c.meta(ctx, topic)
	if err != nil {
		return 0, [16]byte{}, err
	}
	leader, ok := tm.leaders[p]
	if !ok {
		return 0, tm.id, fmt.Errorf("partition %d: %w", p, errNoLeader)
	}
	return leader, tm.id, nil
}

// fetch sends one Fetch request for partition p at off to its leader,
// through cl, and returns the partition's answer.
func (c *Client) fetch(ctx context.Context, cl *kgo.Client, topic string, p int32, off int64) (*kmsg.FetchResponseTopicPartition, error) {
	leader, id, err := c.leader(ctx, topic, p)
	if err != nil {
		return nil, err
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(fetchMaxWait / time.Millisecond)
	req.MinBytes = 1
	req.MaxBytes = fetchMaxBytes
	req.SessionID = 0
	req.SessionEpoch = -1 // no fetch session: every request is whole
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rt.TopicID = id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = p
	rp.FetchOffset = off
	rp.CurrentLeaderEpoch = -1
	rp.LastFetchedEpoch = -1
	rp.LogStartOffset = -1
	rp.PartitionMaxBytes = fetchMaxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := cl.Broker(int(leader)).Request(ctx, req)
	if err != nil {
		return nil, &brokerError{leader, err}
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("fetch from broker %d: %w", leader, err)
	}
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			if rp := &resp.Topics[i].Partitions[j]; rp.Partition == p {
				return rp, nil
			}
		}
	}
	return nil, fmt.Errorf("fetch from broker %d: no answer for the partition", leader)
}

// topicMeta is what a fetch needs of a topic: its id (fetch v13 and
// later name topics by id) and each partition's leader.
type topicMeta struct {
	id      [16]byte
	leaders map[int32]int32
}

// meta returns topic's metadata, cached until forget. Concurrent calls
// for a topic not cached share one Metadata request (the restores of a
// generation's partitions start together): the first asks, the others
// wait for its answer, and ask themselves only when it failed.
func (c *Client) meta(ctx context.Context, topic string) (*topicMeta, error) {
	c.mu.Lock()
	if tm := c.leaders[topic]; tm != nil {
		c.mu.Unlock()
		return tm, nil
	}
	if call := c.asking[topic]; call != nil {
		c.mu.Unlock()
		select {
		case <-call.done:
			if call.err == nil {
				return call.tm, nil
			}
			return c.askMeta(ctx, topic) // its asker's ctx may have ended, not ours
		case <-ctx.Done():
			return nil, fmt.Errorf("metadata: %w", context.Cause(ctx))
		}
	}
	call := &metaCall{done: make(chan struct{})}
	c.asking[topic] = call
	c.mu.Unlock()
	call.tm, call.err = c.askMeta(ctx, topic)
	c.mu.Lock()
	delete(c.asking, topic)
	c.mu.Unlock()
	close(call.done)
	return call.tm, call.err
}

// metaCall is a Metadata request in flight for one topic: done is
// closed once tm or err is set.
type metaCall struct {
	done chan struct{}
	tm   *topicMeta
	err  error
}

// askMeta sends a Metadata request for topic and caches the answer.
func (c *Client) askMeta(ctx context.Context, topic string) (*topicMeta, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("metadata: %w", err)
		}
		tm := &topicMeta{id: t.TopicID, leaders: make(map[int32]int32, len(t.Partitions))}
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 && p.Leader >= 0 {
				tm.leaders[p.Partition] = p.Leader
			}
		}
		c.mu.Lock()
		c.leaders[topic] = tm
		c.mu.Unlock()
		return tm, nil
	}
	return nil, errors.New("metadata: no answer for the topic")
}

// forget drops topic's cached metadata, after a leader error.
func (c *Client) forget(topic string) {
	c.mu.Lock()
	delete(c.leaders, topic)
	c.mu.Unlock()
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recsBefore converts the fetched records below end (those written
// after the read began are left for a later read).
func recsBefore(records []*kgo.Record, end int64) []Rec {
	recs := make([]Rec, 0, len(records))
	for _, r := range records {
		if r.Offset >= end {
			break // written after the read began
		}
		rec := Rec{Offset: r.Offset, Key: r.Key, Value: r.Value, Moved: r.Value == nil && isMoved(r.Headers), MovedIn: r.Value != nil && isMoved(r.Headers)}
		for _, h := range r.Headers {
			if h.Key == WriterHeader {
				rec.Writer = h.Value
			}
		}
		recs = append(recs, rec)
	}
	return recs
}
