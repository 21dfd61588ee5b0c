package changelog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// MovedHeader is the header key of a tombstone that moves its key to
// another partition ([Out].Moved, [Rec].Moved).
const MovedHeader = "handoff-moved"

// movedHeaders are the headers of a moved tombstone; never modified.
var movedHeaders = []kgo.RecordHeader{{Key: MovedHeader}}

// isMoved reports whether hs mark a moved tombstone.
func isMoved(hs []kgo.RecordHeader) bool {
	for _, h := range hs {
		if h.Key == MovedHeader {
			return true
		}
	}
	return false
}

// ErrGrowDenied is returned (wrapped, naming the topic, the permission
// and the command that grows it beforehand) by [Client.Grow] when the
// brokers refuse to add partitions to a changelog topic.
var ErrGrowDenied = errors.New("changelog: not allowed to add partitions to topic")

// Counts returns the partition count of the changelog topic of each of
// inputs that exists (one missing is left out). It asks the brokers, not
// a cache. It blocks until they answered or ctx ends.
func (c *Client) Counts(ctx context.Context, inputs []string) (map[string]int32, error) {
	names := make([]string, len(inputs))
	for i, t := range inputs {
		names[i] = c.Topic(t)
	}
	have, err := c.partitionCounts(ctx, names)
	out := make(map[string]int32, len(have))
	for _, t := range inputs {
		if n, ok := have[c.Topic(t)]; ok {
			out[t] = n
		}
	}
	return out, err
}

// Grow adds partitions to the changelog topics of inputs (each input
// topic mapped to its partition count) that have fewer, up to the input's
// count, and returns the count each changelog topic has then (those it
// could not grow keep theirs; a missing one is left out: [Client.Ensure]
// creates it). A topic another instance grew meanwhile counts as grown.
// A denial is [ErrGrowDenied], naming the permission (ALTER on the topic)
// and the kafka-topics command an operator runs instead; errors of
// several topics are joined. After a growth the client's cached metadata
// of the topic is dropped, so its reads, end offsets and writes see the
// new partitions. Grow blocks until the brokers answered or ctx ends.
func (c *Client) Grow(ctx context.Context, inputs map[string]int32) (map[string]int32, error) {
	ins := slices.Sorted(maps.Keys(inputs))
	have, err := c.Counts(ctx, ins)
	if err != nil {
		return have, err
	}
	req := kmsg.NewPtrCreatePartitionsRequest()
	req.TimeoutMillis = 30_000
	input := map[string]string{} // changelog topic -> input topic
	grown := map[string]bool{}   // changelog topics with more partitions now
	for _, t := range ins {
		n, ok := have[t]
		if !ok || n >= inputs[t] {
			continue
		}
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = c.Topic(t), inputs[t]
		req.Topics = append(req.Topics, rt)
		input[c.Topic(t)] = t
	}
	if len(req.Topics) == 0 {
		return have, nil
	}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return have, fmt.Errorf("changelog: adding partitions to %v: %w", slices.Sorted(maps.Keys(input)), err)
	}
	var errs []error
	for _, rt := range resp.Topics {
		t, ok := input[rt.Topic]
		if !ok {
			continue
		}
		want := inputs[t]
		switch err := kerr.ErrorForCode(rt.ErrorCode); {
		case err == nil:
			c.cfg.Log.Info("added partitions to the changelog topic, as its input topic has", "topic", rt.Topic,
				"from", have[t], "to", want, "input", t)
			have[t], grown[rt.Topic] = want, true
		case errors.Is(err, kerr.InvalidPartitions):
			// Grown by another instance meanwhile (or beyond): read what
			// it has now.
			again, aerr := c.Counts(ctx, []string{t})
			if aerr != nil {
				errs = append(errs, aerr)
				continue
			}
			have[t], grown[rt.Topic] = max(have[t], again[t]), again[t] > have[t]
		case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
			errs = append(errs, fmt.Errorf("%w %s: %w; input topic %s has %d partitions, the changelog %d: it needs ALTER on topic %s, or an operator runs: kafka-topics --alter --topic %s --partitions %d",
				ErrGrowDenied, rt.Topic, err, t, want, have[t], rt.Topic, rt.Topic, want))
		default:
			msg := ""
			if rt.ErrorMessage != nil {
				msg = " (" + *rt.ErrorMessage + ")"
			}
			errs = append(errs, fmt.Errorf("changelog: adding partitions to topic %s, from %d to %d: %w%s", rt.Topic, have[t], want, err, msg))
		}
	}
	for ct, t := range input {
		if !grown[ct] {
			continue
		}
		c.forget(ct)
		if err := c.awaitProducer(ctx, ct, have[t]); err != nil {
			errs = append(errs, err)
		}
	}
	return have, errors.Join(errs...)
}

// Learned tells the client that the changelog topic of input has n
// partitions, more than when it last looked (another instance grew it):
// its cached metadata of the topic is dropped, and it waits until its
// producer knows the n partitions (a write to a partition it does not
// know fails), or ctx ends.
func (c *Client) Learned(ctx context.Context, input string, n int32) error {
	c.forget(c.Topic(input))
	return c.awaitProducer(ctx, c.Topic(input), n)
}

// awaitProducer refreshes the producer's metadata until it knows topic's
// partition n-1 (at once when it never wrote to topic), polling every
// 20ms, bounded by [Config.Timeout] and ctx.
func (c *Client) awaitProducer(ctx context.Context, topic string, n int32) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	for {
		if leader, _, _ := c.prod.PartitionLeader(topic, 0); leader < 0 {
			return nil // not loaded: its first write loads all of it
		}
		if leader, _, _ := c.prod.PartitionLeader(topic, n-1); leader >= 0 {
			return nil
		}
		c.prod.ForceMetadataRefresh()
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("changelog: the producer does not know partition %d of %s yet: %w", n-1, topic, err)
		}
	}
}
