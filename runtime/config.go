package runtime

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go/sasl"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/kafkasec"
)

// Defaults applied by [New] to zero fields.
const (
	DefaultDrainTimeout     = 30 * time.Second
	DefaultHardStopGrace    = 5 * time.Second
	DefaultCommitInterval   = time.Second
	DefaultSessionTimeout   = 10 * time.Second
	DefaultRebalanceTimeout = 10 * time.Second
	DefaultLockTimeout      = time.Second
	DefaultChangelogTimeout = 10 * time.Second
	DefaultRevokeTimeout    = 5 * time.Second
	DefaultStuckAfter       = time.Minute
	DefaultFetchMaxWait     = 500 * time.Millisecond
	DefaultFetchQueue       = 1000
	DefaultWorkers          = 8
	DefaultMaxBatch         = 100
	DefaultMaxWait          = 10 * time.Millisecond
	DefaultClientID         = "handoff"
	// DefaultQueueFactor times Workers is the default QueueSize.
	DefaultQueueFactor = 8
	// DefaultHeartbeatInterval is HeartbeatInterval's default (or
	// SessionTimeout/3 when that is shorter).
	DefaultHeartbeatInterval = 500 * time.Millisecond
)

// StartOffset says where a group with no committed offset starts reading a
// partition.
type StartOffset int

const (
	// StartFirst reads a partition from its oldest record.
	StartFirst StartOffset = iota
	// StartLast reads only records produced after the group joined.
	StartLast
)

// IsolationLevel says which records of transactional producers the
// runtime reads (Kafka's isolation.level).
type IsolationLevel int

const (
	// ReadCommitted reads a transaction's records only once it
	// committed, and never those of an aborted transaction: a
	// partition is read up to its last stable offset, so an open
	// transaction holds back what was written after its first record,
	// until it ends.
	ReadCommitted IsolationLevel = iota
	// ReadUncommitted reads every record as soon as it is written, those
	// of open and aborted transactions included.
	ReadUncommitted
)

// String returns "read_committed" or "read_uncommitted", as Kafka's
// isolation.level spells them.
func (l IsolationLevel) String() string {
	switch l {
	case ReadCommitted:
		return "read_committed"
	case ReadUncommitted:
		return "read_uncommitted"
	}
	return fmt.Sprintf("IsolationLevel(%d)", int(l))
}

// StopPolicy says what a class's stop does with the Kafka messages it has
// not finished: unstarted, waiting out a retry backoff, or interrupted by
// the hard stop.
type StopPolicy int

const (
	// StopSnapshot saves them in the state file and their partitions'
	// changelog, with which later offsets are done, and does not commit
	// them: Kafka keeps them. Each partition's next owner restores them
	// and re-pushes them before its first fetch, then skips their fetched
	// copies and the offsets known done (no duplicates); an owner that
	// cannot read the saved state (an older version, a deleted changelog
	// topic, a plain consumer) reads them again from Kafka (duplicates,
	// never a loss). With Config.LocalStateOnly they are re-pushed on
	// this instance's next start instead: the state file must survive the
	// restart (a persistent volume per instance), and a key whose
	// partition moves to another instance meanwhile may run out of order
	// and twice (see docs/scaleout.md).
	StopSnapshot StopPolicy = iota
	// StopRedeliver neither saves nor settles them: the final commit stops
	// before the first of them, and whoever owns the partition next reads
	// them again from Kafka, in offset order. Messages that did not come
	// from Kafka (Submit, the state file) are still saved, and dead
	// letters, parked, deferred and redelivered messages are saved under
	// either policy: with Config.LocalStateOnly in the state file alone,
	// which must then survive the restart for them too.
	StopRedeliver
)

// String returns "snapshot" or "redeliver".
func (p StopPolicy) String() string {
	switch p {
	case StopSnapshot:
		return "snapshot"
	case StopRedeliver:
		return "redeliver"
	}
	return fmt.Sprintf("StopPolicy(%d)", int(p))
}

// Client names the Kafka client library a [Runtime] consumes with.
type Client string

const (
	// ClientKafkaGo is github.com/segmentio/kafka-go, the library the
	// project started from: eager rebalancing and dynamic membership
	// only, one fetch per partition.
	ClientKafkaGo Client = "kafka-go"
	// ClientFranzGo is github.com/twmb/franz-go (kgo), the default: static
	// membership (the group.instance.id is Config.Instance when it is
	// set), the cooperative-sticky assignor, fetches per broker and
	// partitions paused rather than fetch loops blocked. See the package
	// doc, Choosing a Kafka client.
	ClientFranzGo Client = "franz-go"
)

// GroupProtocol names the consumer group protocol a [Runtime] joins its
// group with.
type GroupProtocol string

const (
	// GroupProtocolClassic is the classic protocol (JoinGroup, SyncGroup,
	// Heartbeat): the members assign the partitions, the default.
	GroupProtocolClassic GroupProtocol = "classic"
	// GroupProtocolConsumer is the consumer group protocol of KIP-848
	// (ConsumerGroupHeartbeat): the broker's group coordinator assigns
	// the partitions. [ClientFranzGo] only; it needs Kafka 4.0 or later
	// brokers with the protocol enabled.
	GroupProtocolConsumer GroupProtocol = "consumer"
)

// Config configures a [Runtime]. [New] copies it, fills the defaults and
// reports every problem at once.
type Config struct {
	// Brokers are the Kafka bootstrap addresses, host:port. Required when
	// any class has topics.
	Brokers []string

	// Group is the Kafka consumer group ID shared by every instance of the
	// service. Required when any class has topics.
	Group string

	// TLS, if set, secures every connection the runtime makes to the
	// brokers (the consumer group, the partition readers, the commits,
	// the dead-letter writer) with this configuration: RootCAs to verify
	// the brokers, Certificates for mutual TLS. An empty ServerName means
	// the host of the broker address. Nil means plaintext.
	TLS *tls.Config

	// SASL, if set, authenticates every connection with this mechanism:
	// kafka-go's PLAIN (plain.Mechanism) and SCRAM-SHA-256/512
	// (scram.Mechanism), or any other sasl.Mechanism, such as an Amazon
	// MSK IAM signer (see the package doc, Connecting to a secured
	// cluster). [kafkasec.Mechanism] builds the first three from a name.
	// Nil means no SASL.
	SASL sasl.Mechanism

	// Client is the Kafka client library the runtime consumes, commits
	// and publishes dead letters with. Empty means [ClientFranzGo]: on
	// the project's benchmark it handles more messages per second at
	// less CPU and memory per message than [ClientKafkaGo], and it
	// rebalances cooperatively and supports static membership. Set
	// [ClientKafkaGo] to keep kafka-go; both pass the same tests.
	Client Client

	// GroupProtocol is the consumer group protocol the member joins
	// with. Under [GroupProtocolClassic] the members assign the
	// partitions (cooperative-sticky on [ClientFranzGo], range or round
	// robin on [ClientKafkaGo]) in group-wide rebalances.
	// [GroupProtocolConsumer] joins with the protocol of KIP-848: the
	// broker assigns (its uniform assignor) and moves partitions one
	// member at a time through the heartbeats, so there is no group-wide
	// join for a slow member to hold up. The runtime behaves the same
	// under both: a revoked partition's running handlers are waited for
	// (RevokeTimeout) and its offsets committed before the broker hands
	// it on, commits go in the member's current epoch, and the stop
	// commits and leaves as it does under the classic protocol (a static
	// member, Instance set, keeps its partitions for its restart until
	// the broker's session timeout). The broker sets the session timeout
	// and the heartbeat interval (group.consumer.session.timeout.ms and
	// group.consumer.heartbeat.interval.ms, 45s and 5s by default):
	// SessionTimeout is not sent; RebalanceTimeout is (how long the member
	// has to give a revoked partition back). It needs [ClientFranzGo]
	// ([New] refuses it with [ClientKafkaGo], which does not have it) and
	// Kafka 4.0 or later brokers with the protocol enabled
	// (group.coordinator.rebalance.protocols includes consumer); against
	// brokers that do not serve it the start fails naming the option. Move
	// a group from one protocol to the other with all its instances
	// stopped: a group of classic members converting during a rolling
	// restart is up to the brokers (group.consumer.migration.policy) and
	// untested here. Tested against the embedded broker's (kfake's)
	// implementation of the protocol. Empty means [GroupProtocolClassic].
	GroupProtocol GroupProtocol

	// ClientID is the client ID of every request, as the brokers' logs
	// and quotas see it. Empty means "handoff".
	ClientID string

	// Instance names this instance in logs and in the state file. A state
	// file records the group and the instance that first used it; a
	// different Instance on the same file is allowed (a replica took over
	// the volume) and logged at Warn. Empty means the hostname.
	//
	// With [ClientFranzGo], an Instance that is set is also the member's
	// group.instance.id (static membership, KIP-345): a member that
	// restarts within SessionTimeout gets its own partitions back without
	// a rebalance, so its snapshot is re-pushed by the partitions' owner.
	// Set it to a name that is stable across restarts and unique in the
	// group (a StatefulSet pod's name), and SessionTimeout above a
	// restart's duration. Left empty, the member is dynamic.
	Instance string

	// ClassRenames maps an old class name to the configured class that
	// now handles its saved messages: at start, before the recovery,
	// every record of the old name in the state file (pending, dead
	// letters, delayed and parked messages, its pause) takes the new name
	// (one log line says how many), so they are re-pushed, requeued and
	// delivered as the new class's instead of becoming dead letters of an
	// unknown class. The old name must not be a configured class; the new
	// one must. Keep a mapping for as long as files written before the
	// rename may start (a rollback, a retired instance's file); once every
	// file was opened with it, it renames nothing. Nil means none.
	ClassRenames map[string]string

	// RevokeTimeout bounds how long, when a rebalance takes partitions
	// away, the generation's end waits for this instance's running
	// handlers of those partitions before its final commit. Handlers
	// still running after it finish anyway but commit nothing (their
	// partition's next owner reads them again). It must be less than
	// RebalanceTimeout. Zero means 5s.
	RevokeTimeout time.Duration

	// StuckAfter is how long a partition this instance owns may fail to
	// be fetched, or its state to be restored from the changelog before
	// its first fetch, with no success in between, before it counts as
	// stuck: the runtime is not ready while one is (Runtime.Ready),
	// handoff_partition_stuck_seconds shows it and an ERROR names it and
	// its last error, once per episode. Zero means 1m.
	StuckAfter time.Duration

	// StatePath is the bbolt state file that holds the shutdown snapshot,
	// the dead letters and the parked, delayed and redelivered messages.
	// Required. Each instance needs its own file. With the changelog (see
	// LocalStateOnly) the file may be on a disk that does not survive the
	// pod: a new file is restored, partition by partition, from the
	// changelog; only the records of a class without topics are in the
	// file alone. With LocalStateOnly the file must survive restarts (a
	// persistent volume in Kubernetes): it is the only copy of those
	// messages, and a start on a new file while the group has committed
	// offsets is logged at Warn and sets
	// handoff_state_file_new_with_commits (a lost disk, or a new
	// instance).
	StatePath string

	// LocalStateOnly keeps the state in the state file alone, as before
	// 0.3.0: no changelog topic is created, read or written. Then the
	// file must survive every restart (a persistent volume): a start on
	// a new file loses what the old one held, and is logged at Warn with
	// handoff_state_file_new_with_commits set when the group has
	// committed offsets. Zero (false): every write to the state file of
	// a class with topics is also written to its partition's changelog
	// topic, <Group>.<topic>.handoff-changelog, and each partition's next
	// owner restores that partition's state before it fetches it (see
	// the package doc, State that outlives the pod).
	LocalStateOnly bool

	// ChangelogReplication is the replication factor of the changelog
	// topics the start creates when they are missing. Zero means the
	// broker's default (default.replication.factor).
	ChangelogReplication int16

	// ChangelogTimeout bounds one write to the changelog (the broker's
	// acknowledgement from every in-sync replica included); at the stop
	// the write also ends with the stop's budget. A write that fails is a
	// failed save: the offsets behind it are not committed. Zero means
	// 10s.
	ChangelogTimeout time.Duration

	// Classes are the message classes; each gets its own pool. At least
	// one is required; names and topics must be unique.
	Classes []Class

	// DrainTimeout bounds how long pools keep working once fetching has
	// stopped. Zero means 30s. With HardStopGrace and the snapshot it must
	// fit the pod's termination grace period.
	DrainTimeout time.Duration

	// HardStopGrace is how long handlers get to return once their context
	// is cancelled at the end of the drain. A handler still running after
	// it is recorded as interrupted and its message saved. Zero means 5s.
	HardStopGrace time.Duration

	// CommitInterval is how often done offsets are committed while
	// running. Offsets are also committed at every stop, and as soon as
	// the partitions that caught up with their end (see IsolationLevel)
	// have all they fetched settled (10 such commits a second on average,
	// one per partition at once): after a burst the commit follows its
	// last message within milliseconds. Zero means 1s.
	CommitInterval time.Duration

	// SessionTimeout is the consumer group session timeout: how long the
	// broker waits for a dead instance's heartbeat before it gives its
	// partitions to others. Zero means 10s.
	SessionTimeout time.Duration

	// HeartbeatInterval is how often the member heartbeats to the
	// group's coordinator, which is how it learns of a rebalance nobody
	// announced: another member's join, or its crash. A handover is
	// announced (franz-go with the changelog on): a stopping instance
	// leaves the group at once (unless static, see Instance), and a
	// member that revokes partitions for a new one does so once its
	// commit is done, in the changelog's meta topic, and the other
	// franz-go members join the rebalance at once rather than at their
	// next heartbeat. Without the announcement (kafka-go, LocalStateOnly)
	// the partitions wait for the others' next heartbeat, up to
	// HeartbeatInterval. It costs one Heartbeat request (under 100
	// bytes) per interval per member. It must be less than
	// SessionTimeout. Under [GroupProtocolConsumer] the broker sets the
	// interval (group.consumer.heartbeat.interval.ms) and this is not
	// used. Zero means 500ms, or SessionTimeout/3 when that is shorter.
	HeartbeatInterval time.Duration

	// RebalanceTimeout is how long the broker waits for every member to
	// rejoin during a rebalance; a member that died without leaving holds
	// up everyone's rejoin for up to this long (or SessionTimeout, when
	// that ends first). Zero means 10s.
	RebalanceTimeout time.Duration

	// StartOffset is where the group starts on a partition that has no
	// committed offset. Zero means StartFirst.
	StartOffset StartOffset

	// IsolationLevel says which records of transactional producers reach
	// the handlers. [ReadCommitted] hands them a transaction's records
	// once it committed and never an aborted transaction's (a producer
	// took those back); the price is that a transaction left open holds
	// back its partition's later records until it ends (at the latest
	// its producer's transaction timeout). [ReadUncommitted] hands them
	// every record at once, aborted ones included. Either way the markers
	// that end transactions reach no handler, and the commit, the lag and
	// the commit made once a partition caught up go past them; the lag
	// counts to the partition's last stable offset under ReadCommitted,
	// to its high watermark under ReadUncommitted. Producers without
	// transactions are read the same under both. Zero means
	// ReadCommitted.
	IsolationLevel IsolationLevel

	// FetchMaxWait bounds how long a fetch request waits on the broker for
	// new records. A partition reader's end is waited for at most this
	// plus a second. Zero means 500ms.
	FetchMaxWait time.Duration

	// FetchQueue is how many records each partition's reader decodes
	// ahead of the fetch loop (as kafka-go's ReaderConfig.QueueCapacity,
	// whose own default is 100, does for its Reader). Deeper costs less
	// CPU per message (see docs/bench-journal.md). On kafka-go it costs up to
	// FetchQueue decoded records of memory per assigned partition (about
	// 30 MB with 1 KiB records on 30 partitions), besides one fetch
	// response of up to 1 MiB per partition; lower it for large records.
	// On franz-go a partition's queue also holds at most 1 MiB of keys
	// and values, and all of a member's queues together about 16 MiB (a
	// partition's share is 16 MiB over the partitions it owns, at least
	// 64 KiB), so the record bytes queued ahead stay about the same from
	// 16 partitions to hundreds. Records still in it at a stop were never
	// accepted: Kafka delivers them again. Zero means 1000.
	FetchQueue int

	// LockTimeout bounds how long the start waits for another process to
	// release the state file. Zero means 1s.
	LockTimeout time.Duration

	// Logger receives the runtime's logs: lifecycle phases and parkings
	// at Info (a key's parkings at most one line every 10s), escalations
	// at Warn, data safety at Error, each message at Debug. Nil means
	// slog.Default(), the program's default logger;
	// slog.New(slog.DiscardHandler) discards them.
	Logger *slog.Logger

	// Registerer, if set, gets the runtime's Prometheus metrics (listed in
	// the package doc, under Metrics). Nil means no metrics; the default
	// registry is never used implicitly.
	Registerer prometheus.Registerer

	// Middleware wraps the handler of every class, outside the class's
	// own Class.Middleware; the first is outermost. Each attempt of a
	// message passes through the chain once, inside the class's Timeout
	// and the hard stop's cancellation; the runtime's retry policy judges
	// what the chain returns (see [handoff.Middleware] and [OnOutcome]).
	// Nil means none.
	Middleware []handoff.Middleware

	// PublishHeadersFunc, if set, is given each dead letter about to be
	// published to its class's DeadLetterTopic and the headers the
	// runtime made for it (the handoff-* headers, then the message's
	// own), and returns the headers to publish: a tracing package injects
	// the failed attempt's trace context with it (see package
	// otelhandoff). It runs on the publisher's goroutine, one dead letter
	// at a time; it must not keep m or write into headers' array (append
	// to a copy). Nil means the headers as made.
	PublishHeadersFunc func(m *handoff.Message, headers []handoff.Header) []handoff.Header

	// staticID is the Instance the user set ("" when it defaulted to the
	// hostname): franz-go's group.instance.id (static membership).
	staticID string
}

// Class is one message class: a handler with its own bounded pool.
type Class struct {
	// Name identifies the class in messages, logs and the state file.
	// Required and unique.
	Name string

	// Topics are the Kafka topics whose records this class handles. A
	// topic belongs to one class. Empty means the class is fed only by
	// [Runtime.Submit].
	Topics []string

	// Handler handles one message. Exactly one of Handler and
	// BatchHandler is required.
	Handler handoff.HandlerFunc

	// BatchHandler, instead of Handler, handles up to MaxBatch messages
	// in one call (a bulk insert). Each message still has its own
	// attempts, retries, dead letter, parking and stop: a batch's result
	// decides each of its messages on its own, as documented on
	// [handoff.BatchHandlerFunc] and in the package doc under Batches.
	BatchHandler handoff.BatchHandlerFunc

	// MaxBatch bounds how many messages one BatchHandler call gets. Zero
	// means 100; negative, or set without BatchHandler, is an error.
	MaxBatch int

	// MaxWait bounds how long a partial batch waits for more messages
	// before its call starts; a full batch starts at once (as soon as one
	// of the Workers calls is free). Zero means 10ms; negative, or set
	// without BatchHandler, is an error.
	MaxWait time.Duration

	// Workers bounds how many handler calls of the class run at once
	// (for a BatchHandler, batch calls). Zero means 8; negative is an
	// error.
	Workers int

	// QueueSize bounds how many messages of the class wait for a worker.
	// A full queue makes fetching of this class's topics wait, and no
	// other class's. Zero means 8×Workers (Workers×MaxBatch for a
	// BatchHandler); negative is an error.
	QueueSize int

	// RateLimit bounds how fast the class's handlers start messages,
	// across all its workers: see [RateLimit]. The zero value means no
	// limit, at no cost per message.
	RateLimit RateLimit

	// Ordered makes messages with the same key run one at a time, in
	// offset (or submission) order; different keys still run in parallel.
	// When a message of an ordered class becomes a dead letter, or waits
	// for a delayed redelivery, later messages with its key are parked in
	// the state file behind it (their offsets committed) until it
	// succeeds or is discarded; then they run in their original order.
	Ordered bool

	// Retry is the class's failure policy: retries in place with backoff,
	// delayed redeliveries, dead letters. The zero value retries up to 3
	// attempts with 100ms..5s backoff, then makes a dead letter.
	Retry RetryPolicy

	// Suspend says when a dependency outage suspends the class as a whole
	// instead of failing its messages one by one, and how the suspended
	// class probes for the dependency's return. The zero value suspends
	// after 10 attempts of at least 3 messages failed in a row and
	// probes after 250ms
	// doubling to 5s; see [SuspendPolicy].
	Suspend SuspendPolicy

	// Timeout bounds each handler call (for a BatchHandler, each batch
	// call) through its context's deadline. A handler that times out has
	// failed recoverably. Zero means no limit.
	Timeout time.Duration

	// StopPolicy says what the stop does with the class's unfinished Kafka
	// messages: save them ([StopSnapshot]) or leave them uncommitted for
	// the partition's next owner ([StopRedeliver]). Zero means
	// StopSnapshot.
	StopPolicy StopPolicy

	// WaitForTopics makes the start wait for the class's topics that do
	// not exist yet: it asks the brokers again, with backoff from 0.5s to
	// 30s, logging which topics it waits for, and joins the group once
	// they all exist (or a stop is requested); the runtime is not ready
	// meanwhile. False means a missing topic is logged at Warn, naming
	// it, and the class runs without it (it is read only after a
	// restart once it exists) and the runtime is never ready; if none of
	// the class's topics exists, [Runtime.Run] returns a [TopicError].
	WaitForTopics bool

	// ShareGroup, if set, makes the class a share class: its Topics are
	// consumed through this Kafka share group (KIP-932, Queues for
	// Kafka; Kafka 4.2+, franz-go only) instead of the consumer group.
	// The broker hands each record to one member under a time lock,
	// whatever the partition, so a share class scales past its topics'
	// partition count. Every instance with the class joins the group.
	// The name is the group's ID, distinct from Group and from every
	// other class's ShareGroup (a common choice is Group + "." + Name).
	//
	// What carries over: the class's bounded pool and its backpressure
	// (the member polls once its last poll's records are all settled, at
	// most QueueSize + Workers records, and renews the lock of every
	// record it holds, running, queued or waiting out a backoff), retries
	// in place, dead letters (the state file and DeadLetterTopic, with
	// the broker's delivery count in the HeaderDeliveryCount header),
	// suspension, middleware, metrics, Submit and Schedule; a pause
	// releases what has not started and, once what runs is done, leaves
	// the share group until the resume (a member that stays without
	// polling would starve the partitions the group assigned it). A
	// record is accepted once it is done or saved elsewhere (a delayed
	// delivery its HeaderDeliverAt asks for), rejected once its dead
	// letter is saved, and released when it cannot finish here (the
	// stop, a failed save). A record at the group's delivery limit that
	// the stop would release is saved as a dead letter instead, since
	// the broker would archive it silently.
	//
	// What does not: per-key order (Ordered is refused), the changelog
	// (the class's dead letters and delayed records stay in the state
	// file alone, as a class without topics' do), StopPolicy (nothing is
	// snapshotted: the stop releases what did not finish), delayed
	// redeliveries (Retry.Redeliveries is refused: the broker redelivers
	// a released record at once) and the kafka-go client (refused). See
	// the package doc, Share classes.
	//
	// The start sets the group's share.auto.offset.reset to earliest
	// when StartOffset is StartFirst and the group has no value set.
	// Empty means a consumer-group class.
	ShareGroup string

	// DeadLetterTopic, if set, is a Kafka topic each dead letter of this
	// class is also published to, with headers naming its origin, attempts
	// and error (see [HeaderOriginTopic]). The state file keeps the dead
	// letter either way.
	//
	// The published record carries the original record's timestamp as its
	// own Kafka timestamp (the time of the dead letter for a message that
	// has none, such as a submitted one), however old it is; no header
	// repeats it. The topic's retention.ms therefore counts from the
	// original record's time: a dead letter older than the retention may
	// be deleted soon after it is published. A topic with
	// message.timestamp.type=LogAppendTime stamps the publish time instead.
	// Empty means no publishing.
	DeadLetterTopic string

	// DeadLetterRetention, if positive, bounds how long the class's dead
	// letters are kept: one saved (or failed again) longer ago than this
	// is dropped from the state (the file and its changelog), by the
	// instance that owns its partition only. MaxDeadLetters, if positive,
	// bounds how many are kept per instance (of the partitions it owns):
	// past it the oldest are dropped, the newest MaxDeadLetters stay.
	// The bounds are enforced at the start and every 30 seconds. A dead
	// letter dropped is first published to DeadLetterTopic when the class
	// has one, and stays until that publish succeeds (it is tried again
	// at the next turn); it is logged and counted in
	// handoff_dead_letters_dropped_total. In an ordered class, dropping a
	// dead letter releases its key's parked messages, as
	// [Runtime.Discard] does. A dead letter being requeued is not
	// dropped. Zero (both) means no bound: nothing is ever dropped.
	DeadLetterRetention time.Duration
	MaxDeadLetters      int

	// RecycleMessages lets the runtime reuse the envelopes of the class's
	// fetched messages: the *handoff.Message a handler (or a batch
	// handler, or middleware) is handed is written again with a later
	// message once this one is done, instead of a new one being made for
	// each message. It saves the allocation of the envelope and the
	// garbage collection that follows it: up to a quarter of the
	// runtime's CPU per message with a no-op handler
	// (docs/performance-2026-12-04.md).
	//
	// The envelopes of a fetch batch of at least 16 records are reused
	// together, in a slab of 63 (16 KiB) given back once all of its
	// messages are done: a message queued from a batch of fewer than 63
	// costs up to 1 KiB of slab instead of 256 bytes while it waits.
	// Smaller batches and submitted messages are not recycled.
	//
	// Set it only when nothing keeps a *Message of the class, or a
	// pointer into one, past the handler call that was handed it: not a
	// goroutine the handler starts, not middleware, not a test that
	// collects them. A copy of the struct (kept := *m) stays valid, and
	// so do the Key, Value and Headers slices and the ID string, which
	// are never reused. Only a message that is done is recycled: a dead
	// letter, a parked or deferred message and one handed back at a stop
	// are not (nor, then, the rest of its slab). False (the default): a
	// handler may keep its *Message as long as it likes.
	RecycleMessages bool

	// Middleware wraps this class's Handler, inside Config.Middleware;
	// the first is outermost. In a batch class each message passes
	// through the chain on its own, and the chain's innermost handler
	// puts the message it is given into a batch (see the package doc,
	// under Batches). Nil means none.
	Middleware []handoff.Middleware

	// shareTopics are a share class's Topics, moved here by New so that
	// the consumer group, the changelog and the topic check see a class
	// without topics.
	shareTopics []string
}

// RateLimit bounds how fast a class's handlers start messages: PerSecond
// on average, across all the class's workers, with bursts of up to Burst
// after a pause (a token bucket: golang.org/x/time/rate). Every start of
// a handler takes a token: a fetched message, a submitted one, a
// redelivered or re-pushed one, a requeued dead letter (one by one or in
// bulk), and each retry in place. In a BatchHandler class every message
// of a batch takes one, so the limit counts messages, not calls, and a
// batch holds at most Burst messages.
//
// What blocks: a worker with a message ready waits for its token before
// it takes the message, holding its worker; the message stays queued
// meanwhile, so the class's queue fills and the fetching of this class's
// topics waits (its backpressure, see QueueSize), and no other class's.
// A Submit or Requeue to the class waits for room as with any full
// queue. The wait is not handler time: Timeout, the handler-time metrics
// and the drain estimate's mean do not count it (the estimate's rate is
// at most PerSecond). The drain goes on at the limit; at the hard stop a
// message still waiting for its token is saved as unstarted, as any
// message still queued.
type RateLimit struct {
	// PerSecond is how many messages may start a second, on average.
	// Zero means no limit; negative, NaN or infinite is an error.
	PerSecond float64

	// Burst is how many messages may start at once after a pause. Zero
	// means 1 (a steady pace), or MaxBatch for a BatchHandler class (so a
	// full batch can start); negative, or set without PerSecond, is an
	// error.
	Burst int
}

// withDefaults fills Burst and reports the limit's problems with bad,
// naming class.
func (l *RateLimit) withDefaults(class string, maxBatch int, bad func(string, ...any)) {
	if l.PerSecond < 0 || math.IsNaN(l.PerSecond) || math.IsInf(l.PerSecond, 0) {
		bad("class %q: RateLimit.PerSecond must be a finite number >= 0 (zero means no limit), got %v", class, l.PerSecond)
	}
	switch {
	case l.Burst < 0:
		bad("class %q: RateLimit.Burst must not be negative, got %d", class, l.Burst)
	case l.Burst > 0 && l.PerSecond == 0:
		bad("class %q: RateLimit.Burst (%d) needs RateLimit.PerSecond", class, l.Burst)
	case l.Burst == 0 && l.PerSecond > 0:
		l.Burst = max(1, maxBatch)
	}
}

// withDefaults returns a copy of cfg with zero fields filled, and every
// problem found.
func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...))
	}
	if cfg.StatePath == "" {
		bad("StatePath is required")
	}
	if len(cfg.Classes) == 0 {
		bad("at least one class is required")
	}
	cfg.defaultNumbers(bad)
	cfg.checkClient(bad)
	// A static member is named by an Instance the user chose: two
	// processes on one host must not share the hostname's.
	cfg.staticID = cfg.Instance
	if cfg.Instance == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "unknown"
		}
		cfg.Instance = host
	}
	if cfg.StartOffset != StartFirst && cfg.StartOffset != StartLast {
		bad("unknown StartOffset %d", cfg.StartOffset)
	}
	if cfg.IsolationLevel != ReadCommitted && cfg.IsolationLevel != ReadUncommitted {
		bad("unknown IsolationLevel %s (want %s or %s)", cfg.IsolationLevel, ReadCommitted, ReadUncommitted)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}

	cfg.Middleware = append([]handoff.Middleware(nil), cfg.Middleware...)
	checkMiddleware(cfg.Middleware, "", bad)
	anyTopic := cfg.checkClasses(bad)
	cfg.checkShare(bad) // share.go
	cfg.checkRenames(bad)
	if anyTopic {
		if len(cfg.Brokers) == 0 {
			bad("Brokers is required when classes have topics")
		}
		for _, b := range cfg.Brokers {
			if b == "" {
				bad("Brokers has an empty address")
			}
		}
		if cfg.Group == "" {
			bad("Group is required when classes have topics")
		}
	}
	cfg.checkSecurity(bad)
	if cfg.ClientID == "" {
		cfg.ClientID = DefaultClientID
	}
	cfg.Brokers = append([]string(nil), cfg.Brokers...)
	return cfg, errors.Join(errs...)
}

// defaultNumbers fills the zero durations and counts with their
// defaults and reports with bad the negative ones.
func (cfg *Config) defaultNumbers(bad func(format string, args ...any)) {
	durations := []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"DrainTimeout", &cfg.DrainTimeout, DefaultDrainTimeout},
		{"HardStopGrace", &cfg.HardStopGrace, DefaultHardStopGrace},
		{"CommitInterval", &cfg.CommitInterval, DefaultCommitInterval},
		{"SessionTimeout", &cfg.SessionTimeout, DefaultSessionTimeout},
		{"RebalanceTimeout", &cfg.RebalanceTimeout, DefaultRebalanceTimeout},
		{"FetchMaxWait", &cfg.FetchMaxWait, DefaultFetchMaxWait},
		{"LockTimeout", &cfg.LockTimeout, DefaultLockTimeout},
		{"RevokeTimeout", &cfg.RevokeTimeout, DefaultRevokeTimeout},
		{"ChangelogTimeout", &cfg.ChangelogTimeout, DefaultChangelogTimeout},
		{"StuckAfter", &cfg.StuckAfter, DefaultStuckAfter},
	}
	for _, d := range durations {
		switch {
		case *d.v < 0:
			bad("%s must not be negative, got %s", d.name, *d.v)
		case *d.v == 0:
			*d.v = d.def
		}
	}
	switch {
	case cfg.HeartbeatInterval < 0:
		bad("HeartbeatInterval must not be negative, got %s", cfg.HeartbeatInterval)
	case cfg.HeartbeatInterval == 0:
		cfg.HeartbeatInterval = min(DefaultHeartbeatInterval, cfg.SessionTimeout/3)
	case cfg.HeartbeatInterval >= cfg.SessionTimeout:
		bad("HeartbeatInterval (%s) must be less than SessionTimeout (%s)", cfg.HeartbeatInterval, cfg.SessionTimeout)
	}
	if cfg.ChangelogReplication < 0 {
		bad("ChangelogReplication must not be negative, got %d", cfg.ChangelogReplication)
	}
	if cfg.FetchQueue < 0 {
		bad("FetchQueue must not be negative, got %d", cfg.FetchQueue)
	} else if cfg.FetchQueue == 0 {
		cfg.FetchQueue = DefaultFetchQueue
	}
}

// checkClient fills the Kafka client and group protocol defaults and
// reports with bad a choice they do not support.
func (cfg *Config) checkClient(bad func(format string, args ...any)) {
	if cfg.RevokeTimeout >= cfg.RebalanceTimeout {
		bad("RevokeTimeout (%s) must be less than RebalanceTimeout (%s)", cfg.RevokeTimeout, cfg.RebalanceTimeout)
	}
	switch cfg.Client {
	case "":
		cfg.Client = ClientFranzGo
	case ClientKafkaGo, ClientFranzGo:
	default:
		bad("unknown Client %q (want %q or %q)", cfg.Client, ClientKafkaGo, ClientFranzGo)
	}
	switch cfg.GroupProtocol {
	case "":
		cfg.GroupProtocol = GroupProtocolClassic
	case GroupProtocolClassic:
	case GroupProtocolConsumer:
		if cfg.Client == ClientKafkaGo {
			bad("GroupProtocol %q needs Client %q: %s joins with the classic protocol only", cfg.GroupProtocol, ClientFranzGo, ClientKafkaGo)
		}
	default:
		bad("unknown GroupProtocol %q (want %q or %q)", cfg.GroupProtocol, GroupProtocolClassic, GroupProtocolConsumer)
	}
}

// checkSecurity reports with bad what can be told wrong about TLS and
// SASL without connecting: a client certificate without its key, PLAIN
// or kafka-go's SCRAM with an empty user name, PLAIN with an empty
// password.
func (cfg *Config) checkSecurity(bad func(string, ...any)) {
	if cfg.TLS != nil {
		for i, c := range cfg.TLS.Certificates {
			if len(c.Certificate) == 0 {
				bad("TLS.Certificates[%d] has no certificate", i)
			}
			if c.PrivateKey == nil {
				bad("TLS.Certificates[%d] has no private key (a client certificate needs its key)", i)
			}
		}
	}
	if cfg.SASL != nil {
		if err := kafkasec.CheckMechanism(cfg.SASL); err != nil {
			bad("%v", err)
		}
	}
}

// checkClasses copies the classes, fills their defaults and reports their
// problems with bad; it returns whether any class has a topic.
func (cfg *Config) checkClasses(bad func(string, ...any)) (anyTopic bool) {
	classes := make([]Class, len(cfg.Classes))
	copy(classes, cfg.Classes)
	cfg.Classes = classes
	names := map[string]bool{}
	topics := map[string]string{}
	for i := range cfg.Classes {
		c := &cfg.Classes[i]
		if c.Name == "" {
			bad("class %d has no Name", i)
		} else if names[c.Name] {
			bad("class %q is defined twice", c.Name)
		}
		names[c.Name] = true
		c.withDefaults(len(cfg.Brokers) > 0, bad)
		c.Middleware = append([]handoff.Middleware(nil), c.Middleware...)
		checkMiddleware(c.Middleware, fmt.Sprintf("class %q: ", c.Name), bad)
		c.Topics = append([]string(nil), c.Topics...)
		for _, t := range c.Topics {
			if t == "" {
				bad("class %q has an empty topic name", c.Name)
				continue
			}
			if other, ok := topics[t]; ok {
				bad("topic %q belongs to both class %q and class %q", t, other, c.Name)
				continue
			}
			topics[t] = c.Name
			anyTopic = true
		}
	}
	return anyTopic
}

// withDefaults fills the class's zero fields and reports its problems
// with bad.
func (c *Class) withDefaults(haveBrokers bool, bad func(string, ...any)) {
	switch {
	case c.Handler == nil && c.BatchHandler == nil:
		bad("class %q has no Handler", c.Name)
	case c.Handler != nil && c.BatchHandler != nil:
		bad("class %q has both Handler and BatchHandler", c.Name)
	}
	c.batchDefaults(bad)
	if c.Workers < 0 {
		bad("class %q: Workers must be > 0, got %d", c.Name, c.Workers)
	} else if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.QueueSize < 0 {
		bad("class %q: QueueSize must be > 0, got %d", c.Name, c.QueueSize)
	} else if c.QueueSize == 0 && c.BatchHandler != nil {
		c.QueueSize = c.Workers * c.MaxBatch
	} else if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueFactor * c.Workers
	}
	c.RateLimit.withDefaults(c.Name, c.MaxBatch, bad)
	c.Retry.validate(c.Name, bad)
	c.Retry.withDefaults()
	c.Suspend.validate(c.Name, bad)
	c.Suspend.withDefaults()
	if c.StopPolicy != StopSnapshot && c.StopPolicy != StopRedeliver {
		bad("class %q: unknown StopPolicy %d", c.Name, c.StopPolicy)
	}
	if c.Timeout < 0 {
		bad("class %q: Timeout must not be negative, got %s", c.Name, c.Timeout)
	}
	if c.DeadLetterRetention < 0 {
		bad("class %q: DeadLetterRetention must not be negative, got %s", c.Name, c.DeadLetterRetention)
	}
	if c.MaxDeadLetters < 0 {
		bad("class %q: MaxDeadLetters must not be negative, got %d", c.Name, c.MaxDeadLetters)
	}
	if c.DeadLetterTopic != "" && !haveBrokers {
		bad("class %q: DeadLetterTopic needs Brokers", c.Name)
	}
}
