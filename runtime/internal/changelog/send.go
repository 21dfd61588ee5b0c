package changelog

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Out is a record for [Client.Send]: a state write of input partition
// Partition of topic Input. A nil Value is a tombstone (the key is
// deleted); an empty one is a value.
type Out struct {
	Input     string
	Partition int32
	Key       []byte
	Value     []byte
	// Writer, when not nil, goes in the record's header WriterHeader: the
	// ID of the state file that wrote a record under another file's key.
	Writer []byte
	// Moved marks a write of a move of its key to another partition
	// (the tombstone in the old partition, [Rec].Moved, and the put in
	// the new one, [Rec].MovedIn): written with the header [MovedHeader].
	Moved bool

	// Offset is the record's offset in the changelog topic, set once the
	// wait of its Send returned nil; untouched otherwise.
	Offset int64
}

// Send queues recs on the producer, in order, and returns once they are
// queued: at once, unless more records wait for their acknowledgement
// than the producer buffers (262,144), and never after [Config.Timeout]
// has passed since Send began (the records not queued by then fail). The
// producer is idempotent and waits for every in-sync replica, so the
// records of one partition land in the order of the Send calls and,
// within one, of recs. The caller must serialize its Send calls (one
// at a time, as the state file's writes are): two concurrent calls
// interleave their records of a partition in no defined order.
//
// The returned wait blocks until every record is acknowledged, then sets
// each Out's Offset and returns nil; or until one failed, [Config.Timeout]
// passed since Send, ctx ended or the Client closed, and returns the
// error, naming the topic and partition of the first failed record.
// After an error the records' fate is unknown: some may be written, even
// later. wait may be called once.
func (c *Client) Send(recs []*Out) (wait func(ctx context.Context) error) {
	return c.send(recs, func(o *Out) string { return c.Topic(o.Input) })
}

func (c *Client) send(recs []*Out, topic func(*Out) string) func(ctx context.Context) error {
	start := time.Now()
	n := len(recs)
	offsets := make([]int64, n)
	errs := make([]error, n)
	done := make(chan struct{})
	var left atomic.Int64 // records not answered; the last answer closes done
	left.Store(int64(n))
	if n == 0 {
		close(done)
	}
	// The records' context bounds the queueing (a full buffer waits for
	// room) by the timeout too; it ends once every record is answered.
	rctx, cancel := context.WithDeadline(c.life, start.Add(c.cfg.Timeout))
	if n == 0 {
		cancel()
	}
	rs := make([]kgo.Record, n) // one allocation for all of them
	for i, o := range recs {
		r := &rs[i]
		*r = kgo.Record{Topic: topic(o), Partition: o.Partition, Key: o.Key, Value: o.Value}
		if o.Writer != nil {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: WriterHeader, Value: o.Writer})
		}
		if o.Moved {
			r.Headers = append(r.Headers, movedHeaders...)
		}
		c.prod.Produce(rctx, r, func(r *kgo.Record, err error) {
			offsets[i], errs[i] = r.Offset, err
			if left.Add(-1) == 0 {
				close(done)
				cancel()
			}
		})
	}
	return func(ctx context.Context) error {
		// Once the wait gives up, so do the records still queued.
		defer cancel()
		timer := time.NewTimer(c.cfg.Timeout - time.Since(start))
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			return fmt.Errorf("changelog: %d records not acknowledged within %s", n, c.cfg.Timeout)
		case <-ctx.Done():
			return fmt.Errorf("changelog: waiting for %d records' acknowledgement: %w", n, context.Cause(ctx))
		}
		for i, err := range errs {
			if err != nil {
				if errors.Is(err, context.Canceled) && c.life.Err() != nil {
					err = errClosed
				}
				return fmt.Errorf("changelog: writing to %s/%d: %w", topic(recs[i]), recs[i].Partition, err)
			}
		}
		for i, o := range recs {
			o.Offset = offsets[i]
		}
		return nil
	}
}

// errClosed is the failure of records queued when the Client closed.
var errClosed = errors.New("changelog: client closed")

// WriteMeta writes value under key to the meta topic, waits for the
// acknowledgement as [Client.Send]'s wait does, and returns the record's
// offset. A nil value is a tombstone. It may overlap Send: the meta topic
// is apart.
func (c *Client) WriteMeta(ctx context.Context, key, value []byte) (int64, error) {
	o := &Out{Key: key, Value: value}
	if err := c.send([]*Out{o}, func(*Out) string { return c.MetaTopic() })(ctx); err != nil {
		return 0, err
	}
	return o.Offset, nil
}
