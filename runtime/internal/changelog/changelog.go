package changelog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultTimeout is what a zero [Config.Timeout] means.
const DefaultTimeout = 10 * time.Second

// maxBuffered is how many records the producer queues before Send waits
// for room: kgo's default is 10,000.
const maxBuffered = 1 << 18

// Config configures a [Client].
type Config struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string

	// ClientID is the client id both kgo clients send. Zero means kgo's
	// default (kgo).
	ClientID string

	// Group is the consumer group whose state the changelog holds: it
	// prefixes every topic name. Required.
	Group string

	// ConsumerProtocol says the group's members join with the consumer
	// group protocol (KIP-848): Owner asks ConsumerGroupDescribe, not
	// DescribeGroups.
	ConsumerProtocol bool

	// DialFunc opens the connections to the brokers, with TLS and SASL
	// when the runtime's configuration has them. Nil means plain TCP.
	DialFunc func(ctx context.Context, network, host string) (net.Conn, error)

	// Replication is the replication factor of the topics Ensure
	// creates. Zero means the broker's default
	// (default.replication.factor).
	Replication int16

	// Timeout bounds one Send's wait for its acknowledgements (and
	// WriteMeta's). Zero means DefaultTimeout (10s).
	Timeout time.Duration

	// Log gets kgo's warnings and errors (its info and debug lines at
	// Debug). Nil means none.
	Log *slog.Logger
}

// Client writes and reads the changelog topics of one group. Its methods
// are safe for concurrent use, except that Send calls must not overlap
// (see [Client.Send]). Zero is not usable: make one with [New].
type Client struct {
	cfg  Config
	prod *kgo.Client // Send and WriteMeta
	cl   *kgo.Client // metadata, creation, offsets, fetches: no group
	// watch makes WatchMeta's fetches: a broker answers the requests of
	// one connection in order, so a fetch waiting for the meta topic's
	// next record would hold up a restore's fetches behind it.
	watch *kgo.Client

	// life ends at Close: records still queued then fail.
	life context.Context
	end  context.CancelFunc

	mu      sync.Mutex
	leaders map[string]*topicMeta // by changelog topic, dropped on a leader error
	asking  map[string]*metaCall  // the metadata request in flight for a topic

	// namesMu guards names, the changelog topic of each input topic
	// Topic was asked for: every record Send queues needs its name.
	namesMu sync.Mutex
	names   map[string]string
}

// New checks cfg and makes the Client's two kgo clients. It does no I/O:
// the first connection is made by the first call that needs one.
func New(cfg Config) (*Client, error) {
	var errs []error
	if len(cfg.Brokers) == 0 {
		errs = append(errs, errors.New("changelog: no brokers"))
	}
	if cfg.Group == "" {
		errs = append(errs, errors.New("changelog: no group"))
	}
	if cfg.Replication < 0 {
		errs = append(errs, fmt.Errorf("changelog: replication must not be negative, got %d", cfg.Replication))
	}
	if cfg.Timeout < 0 {
		errs = append(errs, fmt.Errorf("changelog: timeout must not be negative, got %s", cfg.Timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.Log = cfg.Log.With("client", "changelog")
	base := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.DisableClientMetrics(),
		kgo.WithLogger(kgoLogger{cfg.Log}),
	}
	if cfg.ClientID != "" {
		base = append(base, kgo.ClientID(cfg.ClientID))
	}
	if cfg.DialFunc != nil {
		base = append(base, kgo.Dialer(cfg.DialFunc))
	}
	prod, err := kgo.NewClient(append(base,
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent: kgo's default
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		// A record not acknowledged in this time fails rather than stays
		// queued through an outage; the wait has failed by then anyway.
		// kgo allows no less than 1s.
		kgo.RecordDeliveryTimeout(max(cfg.Timeout, time.Second)),
		// A stop's snapshot queues all its records at once, under the
		// state file's lock: room for a big one, so that Send seldom
		// waits for acknowledgements to queue the rest.
		kgo.MaxBufferedRecords(maxBuffered),
	)...)
	if err != nil {
		return nil, fmt.Errorf("changelog: producer: %w", err)
	}
	cl, err := kgo.NewClient(base...)
	if err != nil {
		prod.Close()
		return nil, fmt.Errorf("changelog: reader: %w", err)
	}
	watch, err := kgo.NewClient(base...) // connects at its first fetch
	if err != nil {
		prod.Close()
		cl.Close()
		return nil, fmt.Errorf("changelog: meta watcher: %w", err)
	}
	c := &Client{cfg: cfg, prod: prod, cl: cl, watch: watch, leaders: map[string]*topicMeta{}, asking: map[string]*metaCall{}, names: map[string]string{}}
	c.life, c.end = context.WithCancel(context.Background())
	return c, nil
}

// Close fails the records still queued (their waits return an error),
// ends the reads in progress and closes the connections. It does not
// wait for any broker. Calling it twice is a no-op.
func (c *Client) Close() {
	c.end()
	c.prod.Close()
	c.cl.Close()
	c.watch.Close()
}

// Topic returns the changelog topic of input topic t:
// <group>.<t>.handoff-changelog. It allocates only the first time it
// is asked for t.
func (c *Client) Topic(t string) string {
	c.namesMu.Lock()
	defer c.namesMu.Unlock()
	name, ok := c.names[t]
	if !ok {
		name = c.cfg.Group + "." + t + ".handoff-changelog"
		c.names[t] = name
	}
	return name
}

// MetaTopic returns the topic of the classes' pauses:
// <group>.handoff-meta.
func (c *Client) MetaTopic() string { return c.cfg.Group + ".handoff-meta" }

// kgoLogger hands kgo's log lines to slog: warnings and errors as they
// are, info and debug at Debug.
type kgoLogger struct{ log *slog.Logger }

func (l kgoLogger) Level() kgo.LogLevel {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelWarn
}

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	switch level {
	case kgo.LogLevelError:
		l.log.Error("franz-go: "+msg, keyvals...)
	case kgo.LogLevelWarn:
		l.log.Warn("franz-go: "+msg, keyvals...)
	default:
		l.log.Debug("franz-go: "+msg, keyvals...)
	}
}
