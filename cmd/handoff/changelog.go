package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff/internal/groupmember"
	"github.com/handoff-go/handoff/kafkasec"
)

// changelogSuffix ends the name of every changelog topic:
// <group>.<input topic>.handoff-changelog.
const changelogSuffix = ".handoff-changelog"

// changelogTopicName is the changelog topic of input topic of group.
func changelogTopicName(group, input string) string {
	return group + "." + input + changelogSuffix
}

// clusterFlags are the flags of a command that reads a group's changelog
// from the cluster.
type clusterFlags struct {
	brokers []string
	group   string
	topics  []string // input topics; empty: every changelog topic of the group
	timeout time.Duration
	sec     kafkasec.Options
}

// clusterFlagNames are the flags clusterFlags registers, security flags
// included: the file mode of a command rejects them.
var clusterFlagNames = []string{"brokers", "group", "topic", "timeout",
	"tls-ca", "tls-cert", "tls-key", "tls", "sasl-mechanism", "sasl-username", "sasl-password-file"}

func (f *clusterFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringSliceVar(&f.brokers, "brokers", nil, "read the group's changelog from these Kafka bootstrap brokers, host:port[,host:port] (instead of STATE)")
	fl.StringVar(&f.group, "group", "", "with --brokers: the service's consumer group (its changelog topics are GROUP.TOPIC"+changelogSuffix+")")
	fl.StringArrayVar(&f.topics, "topic", nil, "with --brokers: read only the changelog of this input topic (repeatable; default: every changelog topic of the group)")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "with --brokers: how long reading the changelog may take")
	fl.AddGoFlagSet(secFlags(&f.sec))
}

// dialer validates the flags and returns the dialer they configure.
func (f *clusterFlags) dialer(clientID string) (*kafkasec.Dialer, error) {
	if f.brokers = brokerList(f.brokers); len(f.brokers) == 0 {
		return nil, usagef("--brokers needs host:port[,host:port]")
	}
	if f.group = strings.TrimSpace(f.group); f.group == "" {
		return nil, usagef("--brokers needs --group, the service's consumer group")
	}
	for _, t := range f.topics {
		if strings.TrimSpace(t) == "" {
			return nil, usagef("--topic needs an input topic name")
		}
	}
	if f.timeout <= 0 {
		return nil, usagef("--timeout must be > 0, got %s", f.timeout)
	}
	tlsConfig, mech, err := f.sec.Load()
	if err != nil {
		return nil, usagef("%v", err)
	}
	return &kafkasec.Dialer{TLS: tlsConfig, SASL: mech, ClientID: clientID}, nil
}

// changelogPartition is one partition of a changelog topic, which holds
// the records written for the same partition of its input topic.
type changelogPartition struct {
	Topic     string // the changelog topic
	Input     string // its input topic
	Partition int32
}

// changelogRecord is one record of a changelog partition.
type changelogRecord struct {
	Offset     int64
	Key, Value []byte // Value nil: a tombstone
}

// changelogReader reads the changelog topics of one consumer group, and
// who in the group owns their input partitions. It is not safe for
// concurrent use.
type changelogReader struct {
	cl    *kgo.Client
	group string
}

// newChangelogReader connects to f's brokers with d, with the client
// options extra besides its own. A refused TLS handshake or SASL
// authentication fails it; an unreachable broker fails the first request
// instead.
func newChangelogReader(ctx context.Context, f *clusterFlags, d *kafkasec.Dialer, extra ...kgo.Opt) (*changelogReader, error) {
	// Control records (transaction markers) are kept so that a partition
	// ending with one is seen to its end; read skips them.
	opts := []kgo.Opt{kgo.SeedBrokers(f.brokers...), kgo.ClientID(d.ClientID), kgo.KeepControlRecords()}
	if d.TLS != nil || d.SASL != nil {
		// What retrying cannot fix ends the command before any request.
		if err := d.Check(ctx, f.brokers); err != nil {
			if _, ok := errors.AsType[*kafkasec.ConnectError](err); ok {
				return nil, err
			}
		}
		opts = append(opts, kgo.Dialer(d.DialContext))
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client for %s: %w", strings.Join(f.brokers, ","), err)
	}
	return &changelogReader{cl: cl, group: f.group}, nil
}

// Close closes the connections.
func (r *changelogReader) Close() { r.cl.Close() }

// partitions returns every partition of the changelog topics of the
// input topics, or when inputs is empty of every changelog topic of the
// group the cluster has, sorted. A named input topic without a
// changelog topic is an error. It blocks for one metadata request.
func (r *changelogReader) partitions(ctx context.Context, inputs []string) ([]changelogPartition, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false // a named topic that is missing stays missing
	want := map[string]string{}        // changelog topic -> input topic
	for _, in := range inputs {
		name := changelogTopicName(r.group, in)
		want[name] = in
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, r.cl)
	if err != nil {
		return nil, fmt.Errorf("metadata of the changelog topics of group %s: %w", r.group, err)
	}
	prefix := r.group + "."
	var out []changelogPartition
	for _, t := range resp.Topics {
		var name string
		if t.Topic != nil {
			name = *t.Topic
		}
		input, named := want[name]
		if !named {
			if len(inputs) > 0 || !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, changelogSuffix) ||
				len(name) <= len(prefix)+len(changelogSuffix) {
				continue
			}
			input = name[len(prefix) : len(name)-len(changelogSuffix)]
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) && named {
				return nil, fmt.Errorf("input topic %s of group %s has no changelog topic %s", input, r.group, name)
			}
			return nil, fmt.Errorf("metadata of changelog topic %s: %w", name, err)
		}
		for _, p := range t.Partitions {
			out = append(out, changelogPartition{Topic: name, Input: input, Partition: p.Partition})
		}
	}
	if len(out) == 0 && len(inputs) == 0 {
		return nil, fmt.Errorf("the cluster has no changelog topics of group %s (%s*%s): is the group right, does the service write a changelog?",
			r.group, prefix, changelogSuffix)
	}
	slices.SortFunc(out, func(a, b changelogPartition) int {
		return cmpPartition(a.Input, a.Partition, b.Input, b.Partition)
	})
	return out, nil
}

func cmpPartition(ta string, pa int32, tb string, pb int32) int {
	if c := strings.Compare(ta, tb); c != 0 {
		return c
	}
	return int(pa) - int(pb)
}

// offsets returns the start and the end (high watermark) offsets of
// parts. It blocks for two ListOffsets requests.
func (r *changelogReader) offsets(ctx context.Context, parts []changelogPartition) (start, end map[changelogPartition]int64, err error) {
	list := func(ts int64, what string) (map[changelogPartition]int64, error) {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		byTopic := map[string][]kmsg.ListOffsetsRequestTopicPartition{}
		for _, p := range parts {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p.Partition
			rp.Timestamp = ts
			rp.CurrentLeaderEpoch = -1
			byTopic[p.Topic] = append(byTopic[p.Topic], rp)
		}
		for _, name := range slices.Sorted(maps.Keys(byTopic)) {
			t := kmsg.NewListOffsetsRequestTopic()
			t.Topic = name
			t.Partitions = byTopic[name]
			req.Topics = append(req.Topics, t)
		}
		resp, err := req.RequestWith(ctx, r.cl)
		if err != nil {
			return nil, fmt.Errorf("%s offsets of the changelog of group %s: %w", what, r.group, err)
		}
		inputs := map[string]string{}
		for _, p := range parts {
			inputs[p.Topic] = p.Input
		}
		out := map[changelogPartition]int64{}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, fmt.Errorf("%s offset of changelog topic %s partition %d: %w", what, t.Topic, p.Partition, err)
				}
				out[changelogPartition{Topic: t.Topic, Input: inputs[t.Topic], Partition: p.Partition}] = p.Offset
			}
		}
		for _, p := range parts {
			if _, ok := out[p]; !ok {
				return nil, fmt.Errorf("%s offset of changelog topic %s partition %d: not in the broker's answer", what, p.Topic, p.Partition)
			}
		}
		return out, nil
	}
	if start, err = list(-2, "start"); err != nil {
		return nil, nil, err
	}
	if end, err = list(-1, "end"); err != nil {
		return nil, nil, err
	}
	return start, end, nil
}

// read calls fn with every record of parts, from their start to the end
// offset they had when read began, in offset order per partition. It
// blocks until then, fn fails or ctx ends (the error then says which
// partitions were not read to the end).
func (r *changelogReader) read(ctx context.Context, parts []changelogPartition, fn func(p changelogPartition, rec changelogRecord) error) error {
	start, end, err := r.offsets(ctx, parts)
	if err != nil {
		return err
	}
	byTopic := map[string]map[int32]changelogPartition{}
	assign := map[string]map[int32]kgo.Offset{}
	left := map[changelogPartition]int64{} // partition -> end offset, until read to it
	for _, p := range parts {
		if end[p] <= start[p] {
			continue
		}
		left[p] = end[p]
		if assign[p.Topic] == nil {
			assign[p.Topic] = map[int32]kgo.Offset{}
			byTopic[p.Topic] = map[int32]changelogPartition{}
		}
		assign[p.Topic][p.Partition] = kgo.NewOffset().At(start[p])
		byTopic[p.Topic][p.Partition] = p
	}
	if len(left) == 0 {
		return nil
	}
	r.cl.AddConsumePartitions(assign)
	for len(left) > 0 {
		fetches := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return r.unfinished(ctx.Err(), left)
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			ferr = errors.Join(ferr, fmt.Errorf("read changelog topic %s partition %d: %w", t, p, err))
		})
		if ferr != nil {
			return ferr
		}
		for it := fetches.RecordIter(); !it.Done(); {
			rec := it.Next()
			p := byTopic[rec.Topic][rec.Partition]
			stop, ok := left[p]
			if !ok || rec.Offset >= stop {
				continue // written after the read began
			}
			if !rec.Attrs.IsControl() {
				if err := fn(p, changelogRecord{Offset: rec.Offset, Key: rec.Key, Value: rec.Value}); err != nil {
					return err
				}
			}
			if rec.Offset+1 >= stop {
				delete(left, p)
			}
		}
	}
	return nil
}

// unfinished wraps err with the partitions not read to their end.
func (r *changelogReader) unfinished(err error, left map[changelogPartition]int64) error {
	var names []string
	for p := range left {
		names = append(names, fmt.Sprintf("%s/%d", p.Topic, p.Partition))
	}
	slices.Sort(names)
	return fmt.Errorf("read the changelog of group %s: %w before the end of %s", r.group, err, strings.Join(names, ", "))
}

// topicPartition names an input partition.
type topicPartition struct {
	Topic     string
	Partition int32
}

// owners returns, for every input partition assigned in the group, the
// member that owns it: its group.instance.id, else its client ID @ host.
// A group that does not exist or has no members owns nothing. It blocks
// for one DescribeGroups request.
func (r *changelogReader) owners(ctx context.Context) (map[topicPartition]string, error) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{r.group}
	resp, err := req.RequestWith(ctx, r.cl)
	if err != nil {
		return nil, fmt.Errorf("describe group %s: %w", r.group, err)
	}
	out := map[topicPartition]string{}
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			if errors.Is(err, kerr.GroupIDNotFound) {
				continue
			}
			return nil, fmt.Errorf("describe group %s: %w", g.Group, err)
		}
		for _, m := range g.Members {
			if len(m.MemberAssignment) == 0 {
				continue
			}
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(m.MemberAssignment); err != nil {
				return nil, fmt.Errorf("describe group %s: assignment of member %s: %w", g.Group, m.MemberID, err)
			}
			name := memberName(&m)
			for _, t := range a.Topics {
				for _, p := range t.Partitions {
					out[topicPartition{t.Topic, p}] = name
				}
			}
		}
	}
	return out, nil
}

// memberName names a group member as an operator knows it: its
// group.instance.id when it has one (a handoff service's instance with
// franz-go), or the instance name a handoff service on kafka-go puts in
// its subscription's user data, else client ID @ host. The runtime names
// a dead letter's owner the same way (runtime/internal/changelog
// MemberName).
func memberName(m *kmsg.DescribeGroupsResponseGroupMember) string {
	if name, ok := groupmember.Instance(m); ok {
		return name
	}
	host := strings.TrimPrefix(m.ClientHost, "/")
	switch {
	case m.ClientID == "":
		return host
	case host == "":
		return m.ClientID
	}
	return m.ClientID + "@" + host
}

// brokerList is the --brokers flag's addresses, blanks dropped.
func brokerList(flag []string) []string {
	var brokers []string
	for _, b := range flag {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	return brokers
}
