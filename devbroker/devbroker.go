// Package devbroker runs an embedded Kafka-protocol broker in-process, for
// Kafka-level tests of a service's classes (see the example), the demo,
// `handoff broker` and local development. It wraps
// github.com/twmb/franz-go/pkg/kfake, which speaks the real Kafka wire
// protocol, so kafka-go (and kcat) talk to it as to a real cluster.
//
// Unlike bare kfake, it answers librdkafka's (kcat's) ApiVersions query
// so that librdkafka compresses with gzip, snappy and lz4 (see
// apiversions.go), and it expires a group member that stays silent past its
// session timeout, as Kafka does, even when the member's connection closed
// while its JoinGroup was parked; see [Config.DisableSessionExpiry].
//
// It also has the few client-side helpers tests and the demo share:
// producing records and reading a group's committed offsets with kafka-go.
package devbroker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Config describes the embedded broker.
type Config struct {
	// Topics are created at start, each with Partitions partitions.
	Topics []string
	// Partitions per topic. Zero means 4.
	Partitions int
	// Addr is the listen address, "127.0.0.1:9092" say. Empty means a
	// free loopback port.
	Addr string
	// DisableSessionExpiry leaves the session timeouts of classic group
	// members to kfake alone. kfake arms a member's session timer only
	// if it hands the member's JoinGroup response to the connection; when
	// the connection closed while the join was parked, it does so about
	// half the time, and otherwise never expires the member: the member
	// keeps the partitions the leader gave it and nobody consumes them
	// again. Kafka expires it after its session timeout and rebalances,
	// and so does this broker by default: it watches group requests and
	// sends a LeaveGroup for a member that stays silent past its session
	// timeout while its group is stable. It also removes a static member
	// of a consumer-protocol (KIP-848) group that left with epoch -2 and
	// did not come back within group.consumer.session.timeout.ms, which
	// kfake keeps, with its partitions, for good. Zero (false) means
	// expiry is on; turn it off only to reproduce kfake's own behaviour.
	DisableSessionExpiry bool
	// TLS, if set, makes the listener speak TLS only, with this server
	// configuration: its certificate (see [NewCA]) and, for mutual TLS,
	// ClientAuth and ClientCAs. Nil means plaintext.
	TLS *tls.Config
	// Users, if set, turns SASL on: every client must authenticate as
	// one of them, with the user's mechanism. As with Kafka's
	// sasl.enabled.mechanisms, the broker enables only the mechanisms its
	// users have; a handshake asking for another is refused with
	// UNSUPPORTED_SASL_MECHANISM. A failed authentication closes the
	// connection (kfake's way). Nil means no SASL.
	Users []User
	// Logger receives the broker's own events: a silent member expired,
	// an attempt to expire one failed. Nil means discard.
	Logger *slog.Logger
}

// Broker is a running embedded broker. Close stops it.
type Broker struct {
	c     *kfake.Cluster
	sec   *security // nil when plaintext without SASL
	addrs []string
	exp   *expiry // nil when Config.DisableSessionExpiry
}

// Start starts a single-node broker and creates cfg.Topics.
func Start(cfg Config) (*Broker, error) {
	if cfg.Partitions == 0 {
		cfg.Partitions = 4
	}
	if cfg.Partitions < 0 {
		return nil, fmt.Errorf("devbroker: Partitions must be > 0, got %d", cfg.Partitions)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(time.Second),
	}
	sec, secOpts, err := newSecurity(cfg)
	if err != nil {
		return nil, err
	}
	opts = append(opts, secOpts...)
	listen := func(network, addr string) (net.Listener, error) {
		ln, err := net.Listen(network, addr)
		if err != nil || sec == nil {
			return ln, err
		}
		return sec.listen(ln), nil
	}
	if len(cfg.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(cfg.Partitions), cfg.Topics...))
	}
	if cfg.Addr != "" {
		host, port, err := net.SplitHostPort(cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("devbroker: listen address %q: %w", cfg.Addr, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("devbroker: listen port %q: %w", port, err)
		}
		opts = append(opts, kfake.Ports(p), kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return listen(network, net.JoinHostPort(host, strconv.Itoa(p)))
		}))
	} else {
		opts = append(opts, kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return listen(network, "127.0.0.1:0")
		}))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("devbroker: start: %w", err)
	}
	b := &Broker{c: c, sec: sec, addrs: c.ListenAddrs()}
	if sec != nil {
		sec.install(c)
	}
	if err := answerLibrdkafka(c, b.wire); err != nil {
		c.Close()
		return nil, fmt.Errorf("devbroker: start: %w", err)
	}
	if !cfg.DisableSessionExpiry {
		log := cfg.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		b.exp = startExpiry(c, b.wire, log)
	}
	return b, nil
}

// wire opens the broker's own connection to itself.
func (b *Broker) wire(ctx context.Context, clientID string) (*wireConn, error) {
	if b.sec != nil {
		return b.sec.wire(ctx, clientID)
	}
	return dialWire(ctx, b.addrs[0], clientID)
}

// Addrs returns the broker's listen addresses, host:port.
func (b *Broker) Addrs() []string { return append([]string(nil), b.addrs...) }

// Addr returns the first listen address.
func (b *Broker) Addr() string { return b.addrs[0] }

// Close stops the broker, after the session expiry. It is safe to call more
// than once.
func (b *Broker) Close() {
	if b.exp != nil {
		b.exp.close()
	}
	b.c.Close()
}

// Cluster exposes the underlying kfake cluster for fault injection. Stop
// the broker with [Broker.Close], not the cluster's Close: the session
// expiry reads the cluster's groups and would wait for a closed cluster
// forever.
func (b *Broker) Cluster() *kfake.Cluster { return b.c }

// NewWriter returns a kafka-go writer for the broker that waits for the
// broker's acknowledgement and balances by key hash (so records with one
// key land in one partition, as with real producers). Close it.
func NewWriter(addrs []string) *kafka.Writer {
	return NewWriterWith(&kafka.Transport{}, addrs)
}

// NewWriterWith is [NewWriter] with transport tr: its TLS and SASL reach a
// secured broker.
func NewWriterWith(tr *kafka.Transport, addrs []string) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(addrs...),
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchSize:    1000,
		BatchTimeout: 5 * time.Millisecond,
		Transport:    tr,
	}
}

// CloseWriter closes w and its transport's idle connections, so that no
// goroutine outlives it.
func CloseWriter(w *kafka.Writer) error {
	err := w.Close()
	if t, ok := w.Transport.(*kafka.Transport); ok {
		t.CloseIdleConnections()
	}
	return err
}

// Offsets reads consumer groups' committed offsets through one kafka-go
// client, so that a caller polling them reuses its connection. Close it.
type Offsets struct {
	tr     *kafka.Transport
	client *kafka.Client
}

// NewOffsets returns an Offsets for the broker at addrs.
func NewOffsets(addrs []string) *Offsets { return NewOffsetsWith(&kafka.Transport{}, addrs) }

// NewOffsetsWith is [NewOffsets] with transport tr: its TLS and SASL reach
// a secured broker.
func NewOffsetsWith(tr *kafka.Transport, addrs []string) *Offsets {
	return &Offsets{tr: tr, client: &kafka.Client{Addr: kafka.TCP(addrs...), Transport: tr, Timeout: 10 * time.Second}}
}

// Close closes the client's idle connections.
func (o *Offsets) Close() { o.tr.CloseIdleConnections() }

// Committed returns the group's committed offsets (the next offset to
// read) for the partitions of topics (topic -> partition count); a
// partition with no commit is absent.
func (o *Offsets) Committed(ctx context.Context, group string, topics map[string]int) (map[string]map[int]int64, error) {
	req := &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{}}
	for topic, n := range topics {
		for p := range n {
			req.Topics[topic] = append(req.Topics[topic], p)
		}
	}
	resp, err := o.client.OffsetFetch(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("devbroker: fetch offsets of group %q: %w", group, err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("devbroker: fetch offsets of group %q: %w", group, resp.Error)
	}
	out := map[string]map[int]int64{}
	var errs []error
	for topic, parts := range resp.Topics {
		for _, p := range parts {
			if p.Error != nil {
				errs = append(errs, fmt.Errorf("%s/%d: %w", topic, p.Partition, p.Error))
				continue
			}
			if p.CommittedOffset < 0 {
				continue
			}
			if out[topic] == nil {
				out[topic] = map[int]int64{}
			}
			out[topic][p.Partition] = p.CommittedOffset
		}
	}
	return out, errors.Join(errs...)
}

// Committed is [Offsets.Committed] with a client of its own.
func Committed(ctx context.Context, addrs []string, group string, topics map[string]int) (map[string]map[int]int64, error) {
	o := NewOffsets(addrs)
	defer o.Close()
	return o.Committed(ctx, group, topics)
}

// Sum adds up committed offsets: for topics that started empty, the number
// of committed messages.
func Sum(offsets map[string]map[int]int64) int64 {
	var sum int64
	for _, ps := range offsets {
		for _, o := range ps {
			sum += o
		}
	}
	return sum
}
