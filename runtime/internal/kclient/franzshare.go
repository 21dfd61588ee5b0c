package kclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
)

// DefaultDeliveryLimit is Kafka's group.share.delivery.count.limit
// default: the deliveries of a share-group record before the broker
// archives it.
const DefaultDeliveryLimit = 5

// ShareConfig is what a share-group member ([Share]) is built from.
// Every field is set by the runtime.
type ShareConfig struct {
	Brokers  []string
	ClientID string
	// Group is the share group's ID.
	Group  string
	Topics []string
	// MaxRecords bounds the records one share fetch acquires
	// (ShareMaxRecords, strict: the broker splits batches to keep it).
	MaxRecords int32
	// StartFirst sets the group's share.auto.offset.reset to earliest
	// when the group has none set (see [Share.Prepare]).
	StartFirst bool
	DialFunc   func(ctx context.Context, network, addr string) (net.Conn, error)
	Log        *slog.Logger
	// WarnFunc logs a failure that repeats at Warn with backoff, as
	// Config.WarnFunc.
	WarnFunc func(log *slog.Logger, key, msg string, args ...any)
	// AckErrFunc is told of each partition whose acknowledgements (or
	// renewals) the broker refused or the client could not deliver. It
	// runs on the client's callback goroutine and must not block.
	AckErrFunc func(topic string, partition int32, err error)
}

// ShareRecord is one record a share-group member acquired: its bytes its
// own, the broker's delivery count and the acquisition lock's deadline
// as the client computed it when the fetch was decoded.
type ShareRecord struct {
	Topic         string
	Partition     int
	Offset        int64
	Time          time.Time
	Key, Value    []byte
	Headers       []handoff.Header
	DeliveryCount int
	Deadline      time.Time
	rec           *kgo.Record
}

// AckStatus is how a share record is acknowledged.
type AckStatus int8

// The acknowledgements of a share record (KIP-932).
const (
	AckAccept  = AckStatus(kgo.AckAccept)  // done: the broker forgets it
	AckRelease = AckStatus(kgo.AckRelease) // handed back: delivered again, to any member
	AckReject  = AckStatus(kgo.AckReject)  // unprocessable: archived, never delivered again
	AckRenew   = AckStatus(kgo.AckRenew)   // the lock extended by its duration (Kafka 4.2+)
)

// Share is a share-group member on franz-go: one poll at a time, records
// acknowledged one by one. Poll is called by one goroutine; Ack and
// Flush are safe for concurrent use.
type Share struct {
	cfg ShareConfig
	cl  *kgo.Client
	log *slog.Logger
}

// NewShare returns the member of cfg.Group for cfg.Topics. It makes no
// connection yet; the group is joined at the first Poll.
func NewShare(cfg ShareConfig) (*Share, error) {
	s := &Share{cfg: cfg, log: cfg.Log.With("client", FranzGo, "share_group", cfg.Group)}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.DisableClientMetrics(),
		kgo.ShareGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.ShareMaxRecords(cfg.MaxRecords),
		kgo.ShareMaxRecordsStrict(),
		kgo.ShareAckCallback(func(_ *kgo.Client, res kgo.ShareAckResults) {
			for _, r := range res {
				if r.Err != nil && cfg.AckErrFunc != nil {
					cfg.AckErrFunc(r.Topic, r.Partition, r.Err)
				}
			}
		}),
		kgo.WithLogger(&franzLogger{log: s.log, cfg: &Config{WarnFunc: cfg.WarnFunc}, ctx: context.Background()}),
	}
	if cfg.DialFunc != nil {
		opts = append(opts, kgo.Dialer(cfg.DialFunc))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("franz-go share group %s: %w", cfg.Group, err)
	}
	s.cl = cl
	return s, nil
}

// Prepare asks the brokers, before the first Poll, which of the topics
// they do not know, sets the group's share.auto.offset.reset to earliest
// when ShareConfig.StartFirst is set and the group has no value of its
// own (an operator's setting is kept), and returns the group's delivery
// limit: the group's share.delivery.count.limit, else the broker's
// group.share.delivery.count.limit, else [DefaultDeliveryLimit]. It
// blocks until the brokers answer or ctx ends.
func (s *Share) Prepare(ctx context.Context) (missing []string, limit int, err error) {
	meta := kmsg.NewPtrMetadataRequest()
	for _, t := range s.cfg.Topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		meta.Topics = append(meta.Topics, rt)
	}
	mresp, err := meta.RequestWith(ctx, s.cl)
	if err != nil {
		return nil, 0, fmt.Errorf("metadata of %v: %w", s.cfg.Topics, err)
	}
	for _, t := range mresp.Topics {
		if t.Topic == nil {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil || len(t.Partitions) == 0 {
			if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
				return nil, 0, fmt.Errorf("topic %s: %w", *t.Topic, err)
			}
			missing = append(missing, *t.Topic)
		}
	}

	groupCfg, err := s.describe(ctx, kmsg.ConfigResourceTypeGroupConfig, s.cfg.Group)
	if err != nil {
		return missing, 0, fmt.Errorf("share group %s: describe its configs: %w", s.cfg.Group, err)
	}
	if s.cfg.StartFirst && !groupCfg["share.auto.offset.reset"].set {
		alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
		res.ResourceName = s.cfg.Group
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name = "share.auto.offset.reset"
		c.Op = kmsg.IncrementalAlterConfigOpSet
		c.Value = kmsg.StringPtr("earliest")
		res.Configs = append(res.Configs, c)
		alter.Resources = append(alter.Resources, res)
		aresp, err := alter.RequestWith(ctx, s.cl)
		if err == nil && len(aresp.Resources) > 0 {
			err = kerr.ErrorForCode(aresp.Resources[0].ErrorCode)
		}
		if err != nil {
			return missing, 0, fmt.Errorf("share group %s: set share.auto.offset.reset=earliest (needs ALTER_CONFIGS on the group): %w", s.cfg.Group, err)
		}
	}
	limit = DefaultDeliveryLimit
	if v := groupCfg["share.delivery.count.limit"]; v.set {
		if n, err := strconv.Atoi(v.value); err == nil && n > 0 {
			return missing, n, nil
		}
	}
	if len(mresp.Brokers) == 0 {
		return missing, limit, nil
	}
	brokerCfg, err := s.describe(ctx, kmsg.ConfigResourceTypeBroker, strconv.Itoa(int(mresp.Brokers[0].NodeID)))
	if err == nil {
		if n, err := strconv.Atoi(brokerCfg["group.share.delivery.count.limit"].value); err == nil && n > 0 {
			limit = n
		}
	}
	return missing, limit, nil
}

// configValue is one config a DescribeConfigs answered: set says it is
// the resource's own (not a default).
type configValue struct {
	value string
	set   bool
}

// describe returns the configs of a resource (a broker's name is its
// node ID).
func (s *Share) describe(ctx context.Context, typ kmsg.ConfigResourceType, name string) (map[string]configValue, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName = typ, name
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		return nil, err
	}
	out := map[string]configValue{}
	for _, res := range resp.Resources {
		if err := kerr.ErrorForCode(res.ErrorCode); err != nil {
			return nil, err
		}
		for _, c := range res.Configs {
			v := ""
			if c.Value != nil {
				v = *c.Value
			}
			out[c.Name] = configValue{value: v, set: c.Value != nil && c.Source != kmsg.ConfigSourceDefaultConfig}
		}
	}
	return out, nil
}

// Poll joins the group at its first call, then acquires the next
// records: every record the client has fetched (one share fetch per
// broker, each of at most ShareConfig.MaxRecords), waiting until there
// are some or ctx ends. Each Poll auto-accepts the records of the last
// one that were not acknowledged: call it only once they all are. The
// error is that of a fetch that failed (the records of the others are
// returned with it), or ctx's.
func (s *Share) Poll(ctx context.Context) ([]*ShareRecord, error) {
	fs := s.cl.PollRecords(ctx, -1)
	var errs []error
	fs.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrClientClosed) {
			errs = append(errs, err)
			return
		}
		errs = append(errs, fmt.Errorf("share fetch %s/%d: %w", t, p, err))
	})
	var out []*ShareRecord
	fs.EachRecord(func(r *kgo.Record) {
		sr := &ShareRecord{Topic: r.Topic, Partition: int(r.Partition), Offset: r.Offset, Time: recordTime(r.Timestamp),
			Key: r.Key, Value: r.Value, DeliveryCount: int(r.DeliveryCount()), Deadline: r.AcquisitionDeadline(), rec: r}
		if len(r.Headers) > 0 {
			sr.Headers = make([]handoff.Header, len(r.Headers))
			for i, h := range r.Headers {
				sr.Headers[i] = handoff.Header{Key: h.Key, Value: h.Value}
			}
		}
		out = append(out, sr)
	})
	return out, errors.Join(errs...)
}

// Ack acknowledges r. A terminal status (accept, release, reject) is
// final: a later one is ignored; a renew is ignored while a renew of r is
// in flight or once r has a terminal status. Acks are sent within a
// second, or at Flush. It does not block.
func (s *Share) Ack(r *ShareRecord, status AckStatus) { r.rec.Ack(kgo.AckStatus(status)) }

// Flush sends the acknowledgements not sent yet and waits for the
// brokers' answers, or until ctx ends.
func (s *Share) Flush(ctx context.Context) error { return s.cl.FlushAcks(ctx) }

// Close leaves the group (records of the last poll still unacknowledged
// are released, acknowledgements not sent yet are sent) within ctx, then
// closes the client. A client closed without leaving (ctx ended) leaves
// its records to the broker's lock timeout and its membership to the
// share session timeout.
func (s *Share) Close(ctx context.Context) error {
	err := s.cl.LeaveGroupContext(ctx)
	s.cl.Close()
	return err
}
