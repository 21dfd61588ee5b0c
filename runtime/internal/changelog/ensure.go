package changelog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrTopicDenied is returned (wrapped, naming the topic and the
// permission) by [Client.Ensure] when a changelog topic is missing and
// the brokers refuse to create it.
var ErrTopicDenied = errors.New("changelog: not allowed to create topic")

// ErrNotCompacted is returned (wrapped, naming the topic and its policy)
// by [Client.Ensure] when a changelog topic exists with a cleanup.policy
// other than compact (delete, or compact,delete): retention would delete
// state.
var ErrNotCompacted = errors.New("changelog: topic not compacted")

// Ensure makes sure the changelog topic of each input topic exists with
// at least the input's partition count (inputs maps each input topic to
// its count), and the meta topic with one partition, all compacted. It
// creates the missing ones, with [Config.Replication] and
// cleanup.policy=compact; a topic another instance created meanwhile
// counts as created. Errors, joined: a topic with fewer partitions than
// its input (naming both counts); a missing topic the brokers refuse to
// create ([ErrTopicDenied], naming the permission needed and the command
// that creates it beforehand); an existing topic not compacted
// ([ErrNotCompacted]). A broker that refuses to describe the topics'
// configs is logged at Warn, not an error. Ensure blocks until the
// brokers answered or ctx ends.
func (c *Client) Ensure(ctx context.Context, inputs map[string]int32) error {
	want := map[string]int32{c.MetaTopic(): 1}
	from := map[string]string{c.MetaTopic(): "the classes' pauses"}
	for t, n := range inputs {
		want[c.Topic(t)] = n
		from[c.Topic(t)] = "input topic " + t
	}
	topics := slices.Sorted(maps.Keys(want))

	have, err := c.partitionCounts(ctx, topics)
	if err != nil {
		return err
	}
	var missing []string
	for _, t := range topics {
		if _, ok := have[t]; !ok {
			missing = append(missing, t)
		}
	}
	var errs []error
	if len(missing) > 0 {
		raced, err := c.create(ctx, missing, want)
		if err != nil {
			errs = append(errs, err)
		}
		if len(raced) > 0 {
			again, err := c.partitionCounts(ctx, raced)
			if err != nil {
				return errors.Join(append(errs, err)...)
			}
			maps.Copy(have, again)
		}
	}
	var existing []string
	for _, t := range topics {
		n, ok := have[t]
		if !ok {
			continue
		}
		existing = append(existing, t)
		if n < want[t] {
			errs = append(errs, fmt.Errorf("changelog: topic %s has %d partitions, fewer than the %d of %s", t, n, want[t], from[t]))
		}
	}
	if len(existing) > 0 {
		errs = append(errs, c.checkCompacted(ctx, existing))
	}
	return errors.Join(errs...)
}

// partitionCounts returns the partition count of each of topics that
// exists; a topic the brokers deny describing counts as missing (the
// creation then says whether it may be made).
func (c *Client) partitionCounts(ctx context.Context, topics []string) (map[string]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, fmt.Errorf("changelog: metadata of %s: %w", strings.Join(topics, ", "), err)
	}
	have := map[string]int32{}
	var errs []error
	for _, rt := range resp.Topics {
		name := ""
		if rt.Topic != nil {
			name = *rt.Topic
		}
		switch err := kerr.ErrorForCode(rt.ErrorCode); {
		case err == nil:
			have[name] = int32(len(rt.Partitions))
		case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.TopicAuthorizationFailed):
		default:
			errs = append(errs, fmt.Errorf("changelog: metadata of topic %s: %w", name, err))
		}
	}
	return have, errors.Join(errs...)
}

// create creates topics, compacted, with want's partition counts, and
// returns those that already existed (another instance raced).
func (c *Client) create(ctx context.Context, topics []string, want map[string]int32) (raced []string, _ error) {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	repl := c.cfg.Replication
	if repl == 0 {
		repl = -1
	}
	for _, t := range topics {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic = t
		rt.NumPartitions = want[t]
		rt.ReplicationFactor = repl
		cfg := kmsg.NewCreateTopicsRequestTopicConfig()
		cfg.Name = "cleanup.policy"
		cfg.Value = kmsg.StringPtr("compact")
		rt.Configs = append(rt.Configs, cfg)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, fmt.Errorf("changelog: creating %s: %w", strings.Join(topics, ", "), err)
	}
	var errs []error
	for _, rt := range resp.Topics {
		switch err := kerr.ErrorForCode(rt.ErrorCode); {
		case err == nil:
			c.cfg.Log.Info("created changelog topic", "topic", rt.Topic, "partitions", want[rt.Topic])
		case errors.Is(err, kerr.TopicAlreadyExists):
			raced = append(raced, rt.Topic)
		case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
			errs = append(errs, fmt.Errorf("%w %s: %w; it needs CREATE on topic %s (or on the cluster), or create it beforehand: kafka-topics --create --topic %s --partitions %d%s --config cleanup.policy=compact",
				ErrTopicDenied, rt.Topic, err, rt.Topic, rt.Topic, want[rt.Topic], replicationFlag(c.cfg.Replication)))
		default:
			msg := ""
			if rt.ErrorMessage != nil {
				msg = " (" + *rt.ErrorMessage + ")"
			}
			errs = append(errs, fmt.Errorf("changelog: creating topic %s with %d partitions: %w%s", rt.Topic, want[rt.Topic], err, msg))
		}
	}
	return raced, errors.Join(errs...)
}

func replicationFlag(r int16) string {
	if r == 0 {
		return ""
	}
	return fmt.Sprintf(" --replication-factor %d", r)
}

// checkCompacted checks the cleanup.policy of topics.
func (c *Client) checkCompacted(ctx context.Context, topics []string) error {
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, t := range topics {
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType = kmsg.ConfigResourceTypeTopic
		r.ResourceName = t
		r.ConfigNames = []string{"cleanup.policy"}
		req.Resources = append(req.Resources, r)
	}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return fmt.Errorf("changelog: describing the configs of %s: %w", strings.Join(topics, ", "), err)
	}
	var errs []error
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
				c.cfg.Log.Warn("cannot check that the changelog topic is compacted", "topic", r.ResourceName, "err", err)
				continue
			}
			errs = append(errs, fmt.Errorf("changelog: describing the configs of topic %s: %w", r.ResourceName, err))
			continue
		}
		for _, cfg := range r.Configs {
			if cfg.Name != "cleanup.policy" || cfg.Value == nil {
				continue
			}
			if ps := strings.Split(*cfg.Value, ","); !slices.Contains(ps, "compact") || slices.Contains(ps, "delete") {
				errs = append(errs, fmt.Errorf("%w: %s has cleanup.policy=%s; set it to compact (kafka-configs --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact)",
					ErrNotCompacted, r.ResourceName, *cfg.Value, r.ResourceName))
			}
		}
	}
	return errors.Join(errs...)
}
