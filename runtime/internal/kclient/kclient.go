// Package kclient is the runtime's seam to Kafka: the consumer group
// (join and leave, assignment and revocation, fetch, fenced commit), the
// produce side of dead letters, and the metadata the start's topic check,
// its new-state-file check and the lag sampler ask for, behind one
// interface with one file per client (kafkago.go, franzgo.go).
//
// It speaks in its own small types (partitions, records, offsets) and
// knows nothing of the runtime's classes, items or trackers: the runtime
// hands it a [BeginFunc], and each session of the membership comes back
// to the runtime as a [Keeper], which owns the session's partitions, fetch
// loops and commits.
package kclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/handoff-go/handoff"
)

// The client names, as the runtime's Config.Client spells them.
const (
	KafkaGo = "kafka-go"
	FranzGo = "franz-go"
)

// Bounds shared with the runtime's stop budget.
const (
	// CommitTimeout bounds one commit (and the fresh-connection retries
	// of kafka-go's), the final commit and one lag sample.
	CommitTimeout = 2 * time.Second
	// LeaveTimeout is the least the leave of the group is given.
	LeaveTimeout = time.Second
	// FetchMaxBytes bounds one partition's fetch: Kafka's own
	// max.partition.fetch.bytes default. A first batch larger than it is
	// still returned whole (Fetch v3 on), so large records make progress.
	FetchMaxBytes = 1 << 20
	// PublishTimeout bounds one write of dead letters to their topics.
	PublishTimeout = 5 * time.Second
)

// Partition names one partition of a topic.
type Partition struct {
	Topic     string
	Partition int
}

// String returns "topic/partition", as the logs name a partition.
func (p Partition) String() string { return p.Topic + "/" + strconv.Itoa(p.Partition) }

// Assigned is a partition the group assigned and the offset its reading
// starts at (-1: the client resumes it from the group's committed offset).
type Assigned struct {
	Partition
	Offset int64
}

// Record is one fetched record, its bytes its own (copied out of the
// client's fetch buffer or owned by the client's record).
type Record struct {
	Offset int64
	// End is the end of the partition as this client reads it, in the
	// fetch response the record came with: its last stable offset with
	// ReadCommitted, its high watermark without. A record at End - 1 is
	// the last one there is to read for now.
	End int64
	// Marker says the record is a transaction's marker (a control
	// record), not a message: it has no time, key, value or headers, and
	// is read only so that the reading and the commit can go past its
	// offset.
	Marker bool
	// Time is the record's timestamp in UTC; zero for a record without
	// one.
	Time       time.Time
	Key, Value []byte // nil and empty kept apart
	Headers    []handoff.Header
}

// OutRecord is a record to produce (a dead letter).
type OutRecord struct {
	Topic      string
	Key, Value []byte
	Headers    []handoff.Header
	Time       time.Time // zero: the produce time
}

// Range is a partition's first offset and its end as the client reads
// it: the last stable offset with ReadCommitted, the high watermark
// without.
type Range struct {
	First, Last int64
}

// Source is where one partition's fetch loop takes its records from.
// Records come in offset order.
type Source interface {
	// Next returns the partition's next record, blocking until there is
	// one; false once ctx ended or the partition was taken away.
	Next(ctx context.Context) (Record, bool)
	// Ready reports how many records Next has at once, without
	// blocking. Called only by the goroutine that calls Next.
	Ready() int
	// Close ends the source once the fetch loop is done with it. It does
	// not block: what is still closing is joined by [Client.Close].
	Close()
}

// Session is one stretch of the membership whose commits the broker
// fences together. An eager session is one group generation (kafka-go):
// all its partitions are assigned when it begins ([Session.Assigned]) and
// all are revoked when it ends. A cooperative one lasts for the client's
// life (franz-go): its generation moves on at each rebalance and its
// partitions come and go through [Keeper.Assign] and [Keeper.Revoke].
type Session interface {
	// Eager reports whether the session is one generation.
	Eager() bool
	// Generation is the group generation at the session's start; -1 for
	// a cooperative session, whose generations come with Assign.
	Generation() int32
	// Assigned returns an eager session's partitions; nil for a
	// cooperative one.
	Assigned() []Assigned
	// Commit commits offsets (the next offset to read, by topic and
	// partition), fenced by the membership: a member that lost its
	// generation is refused. It blocks for at most about CommitTimeout.
	// Only the session's keeper calls it.
	Commit(offsets map[string]map[int]int64) error
	// Source opens the record source of partition a; its fetching ends
	// with ctx.
	Source(ctx context.Context, a Assigned) Source
}

// Keeper is the runtime's side of one session: it owns the session's
// partitions, their fetch loops and their commits. The client calls its
// methods from its own goroutines.
type Keeper interface {
	// Keep commits the session's partitions and applies Assign and
	// Revoke until end ends, then, for an eager session, revokes what it
	// holds; it returns once done. The client runs it on a goroutine of
	// its own and does not end the session before it returned.
	Keep(end context.Context)
	// Assign adds partitions ps to a cooperative session, in group
	// generation gen. It blocks until the keeper applied it, or ended.
	Assign(gen int32, ps []Assigned)
	// Revoke removes partitions ps from a cooperative session; lost says
	// the membership is gone, so nothing is committed. It blocks until
	// the keeper applied it, or ended.
	Revoke(ps []Partition, lost bool)
	// Quiesce waits for the session's fetch loops to end, once the ctx
	// the session began with ended.
	Quiesce()
}

// BeginFunc is called when a session begins, with the ctx that bounds
// its fetching (it ends at the stop's quiesce, or with an eager session).
// It returns the session's keeper. It does not block.
type BeginFunc func(ctx context.Context, s Session) Keeper

// Client is one Kafka client: the consumer-group member, the metadata
// requests of the topic check and the lag sampler, built with [New].
// Its methods are safe for concurrent use.
type Client interface {
	// Join starts the membership of the group for topics and returns:
	// the client's goroutines fetch until ctx ends (the stop's quiesce)
	// and report each session to begin. A client joins once.
	Join(ctx context.Context, topics []string, begin BeginFunc) error
	// Wait blocks until the goroutines Join started have ended (ctx
	// ended) and every session's fetch loops are quiesced. Without Join it
	// returns at once.
	Wait()
	// Missing returns which of topics the brokers do not know. It blocks
	// until they answer or ctx ends.
	Missing(ctx context.Context, topics []string) (map[string]bool, error)
	// Offsets returns the first offset and the end (see Range) of each of
	// ps that the brokers answered for. It blocks until they answer or
	// ctx ends.
	Offsets(ctx context.Context, ps []Partition) (map[Partition]Range, error)
	// Committed returns the group's committed offset (the next to read)
	// of each of ps that has one, as the group's coordinator answers: the
	// lag sampler's base for a partition this member has not committed
	// yet (a franz-go member resumes from it without telling). It blocks
	// until the coordinator answers or ctx ends.
	Committed(ctx context.Context, ps []Partition) (map[Partition]int64, error)
	// Partitions returns the partitions of each of topics the brokers
	// know (a topic they do not know has none), never creating a topic.
	// It blocks until they answer or ctx ends.
	Partitions(ctx context.Context, topics []string) ([]Partition, error)
	// Close ends the membership, if any, by deadline (at least
	// LeaveTimeout), and the client's connections. A static member keeps
	// its membership: the broker waits SessionTimeout for its restart.
	// Close logs what did not finish in time; it never blocks much past
	// deadline.
	Close(deadline time.Time)
}

// Writer produces records (dead letters): the seam's produce side.
type Writer interface {
	// Write sends recs in one write and returns each one's error (nil:
	// the broker acknowledged it from all in-sync replicas), within ctx.
	Write(ctx context.Context, recs []OutRecord) []error
	// Close ends the writer once no write is in flight.
	Close() error
}

// Config is what a client is built from. Every field is set by the
// runtime; zero values are not defaulted here.
type Config struct {
	// Client is KafkaGo or FranzGo.
	Client   string
	Brokers  []string
	ClientID string
	Group    string
	// Instance is the static member ID (group.instance.id) of a franz-go
	// member; empty means a dynamic member. A kafka-go member (always
	// dynamic) puts it in its subscription's user data
	// (InstanceUserData), where DescribeGroups shows it.
	Instance string
	// Consumer joins with the consumer group protocol of KIP-848 (the
	// broker assigns the partitions); false: the classic protocol.
	// FranzGo only: New refuses it for KafkaGo.
	Consumer                                       bool
	SessionTimeout, RebalanceTimeout, FetchMaxWait time.Duration
	// HeartbeatInterval is how often the member heartbeats under the
	// classic protocol (under the consumer protocol the broker's
	// interval rules); zero means SessionTimeout/3.
	HeartbeatInterval time.Duration
	// FetchQueue is how many records a partition's source holds ahead of
	// its fetch loop.
	FetchQueue int
	// StartLast says a partition with no committed offset starts at its
	// end; false: at its start.
	StartLast bool
	// ReadCommitted reads transactional records only once their
	// transaction committed, never those of an aborted one, and a
	// partition only up to its last stable offset (where its oldest open
	// transaction begins); false reads every record up to the high
	// watermark. Either way the markers that end transactions come as
	// Records with Marker set.
	ReadCommitted bool
	// DialFunc, when set (TLS or SASL configured), makes every connection of
	// the client; nil lets the client dial by itself.
	DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)
	// Log is the runtime's logger.
	Log *slog.Logger
	// WarnFunc logs a failure that repeats (a broker unreachable) at Warn
	// with backoff; key tells lines apart.
	WarnFunc func(log *slog.Logger, key, msg string, args ...any)
	// FetchErrorFunc counts a failed fetch of topic.
	FetchErrorFunc func(topic string)
	// FetchFunc is told how a fetch of partition p went: err nil for a
	// fetch that succeeded (kafka-go: every one, empty or not; franz-go,
	// which hands on no empty fetch: one that brought records), the
	// error of one that failed. It does not block.
	FetchFunc func(p Partition, err error)
	// Handovers, when set, is told of this member's handovers (FranzGo
	// only: a kafka-go member's sessions are eager, and it has no way to
	// join at once).
	Handovers Handovers
}

// Handovers is told that this member gave partitions away and stays in
// the group (a cooperative revocation, once its keeper applied it), or
// left the group: its member ID and the generation it gave them away in.
// The other members join the rebalance that follows at their next
// heartbeat; told of it through a [Rejoiner] they join at once.
type Handovers interface {
	// HandedOver runs on the client's goroutine, in the revocation
	// callback (which holds up the member's polls and its rejoin) or in
	// the leave: it should not block.
	HandedOver(member string, gen int32)
}

// Rejoiner is a [Client] that can join the group's next rebalance at
// once rather than at its next heartbeat (FranzGo).
type Rejoiner interface {
	// Rejoin is told that member gave partitions away in generation gen
	// (what another member's [Handovers] was told). Unless member is
	// this one, this member is already past gen, or it already joined
	// the rebalance after gen or is joining one now (a second join would
	// start a rebalance of its own), it joins the rebalance now (under the consumer protocol:
	// heartbeats now, which brings the broker's new assignment). It
	// reports whether it did. It does not block; before Join it does
	// nothing.
	Rejoin(member string, gen int32) bool
}

// New returns the client cfg.Client names. It makes no connection yet;
// [Client.Close] ends what it made.
func New(cfg Config) (Client, error) {
	switch cfg.Client {
	case KafkaGo:
		if cfg.Consumer {
			return nil, fmt.Errorf("kclient: the consumer group protocol (KIP-848) needs client %s: %s joins with the classic protocol only", FranzGo, KafkaGo)
		}
		return newKafkaGo(cfg), nil
	case FranzGo:
		return newFranzGo(cfg)
	}
	return nil, fmt.Errorf("kclient: unknown client %q", cfg.Client)
}

// NewWriter returns the dead-letter writer of the client cfg.Client
// names, dialling through dial. Both place a keyed record on the same
// partition: FNV-1a of the key, as kafka-go's Hash balancer.
func NewWriter(cfg Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (Writer, error) {
	switch cfg.Client {
	case KafkaGo:
		return newKafkaGoWriter(cfg, dial), nil
	case FranzGo:
		return newFranzWriter(cfg, dial)
	}
	return nil, fmt.Errorf("kclient: unknown client %q", cfg.Client)
}

// leaveWait is how long the leave waits for the client to leave the
// group: what is left until deadline, at least LeaveTimeout, at most
// RebalanceTimeout + LeaveTimeout + FetchMaxWait (a join in flight ends
// within the group's RebalanceTimeout: the broker answers it then at the
// latest; a huge DrainTimeout whose drain a second signal skipped must
// not leave the stop waiting here for it).
func (c *Config) leaveWait(deadline time.Time) time.Duration {
	return max(LeaveTimeout, min(time.Until(deadline), c.RebalanceTimeout+LeaveTimeout+c.FetchMaxWait))
}

// heartbeat is the member's heartbeat interval: HeartbeatInterval, or
// SessionTimeout/3 when it is zero.
func (c *Config) heartbeat() time.Duration {
	if c.HeartbeatInterval > 0 {
		return c.HeartbeatInterval
	}
	return c.SessionTimeout / 3
}

// topicAnswer is what the brokers said of one topic asked about.
type topicAnswer struct {
	name       string
	err        error
	partitions int
}

// missingOf returns which of topics the answers do not show with
// partitions; an answer's error other than unknown (the client's
// UNKNOWN_TOPIC_OR_PARTITION) fails it.
func missingOf(topics []string, answers []topicAnswer, unknown error) (map[string]bool, error) {
	missing := map[string]bool{}
	for _, t := range topics {
		missing[t] = true
	}
	for _, a := range answers {
		switch {
		case a.err == nil && a.partitions > 0:
			delete(missing, a.name)
		case a.err != nil && !errors.Is(a.err, unknown):
			return nil, fmt.Errorf("topic %s: %w", a.name, a.err)
		}
	}
	return missing, nil
}

// recordTime returns a record's timestamp in UTC, or the zero time for
// the -1 of a record without one.
func recordTime(t time.Time) time.Time {
	if t.UnixMilli() < 0 {
		return time.Time{}
	}
	return t.UTC()
}

// Fenced reports whether err, a commit's error, says the group fenced
// the member: its generation ended (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID),
// under the consumer group protocol its member epoch is not the group's
// (STALE_MEMBER_EPOCH: the commit was sent again in each epoch the member
// held meanwhile) or it is no member (UNKNOWN_MEMBER_ID), or another
// member took its static instance ID (FENCED_INSTANCE_ID), in either
// client's words. What it did not commit is the partitions' new owners'
// to read again.
func Fenced(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.FencedInstanceID) ||
		errors.Is(err, kerr.StaleMemberEpoch) {
		return true
	}
	return errors.Is(err, kafka.IllegalGeneration) || errors.Is(err, kafka.UnknownMemberId) || errors.Is(err, kafka.FencedInstanceID)
}
