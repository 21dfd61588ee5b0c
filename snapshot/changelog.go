package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// The changelog's side of the state: the writer (every write of the
// file also goes to the changelog partition of the input partition its
// record belongs to), the partitions this file owns and their
// checkpoints, the restore's and the follow's read-and-apply, the owner
// markers (ownership) and the settles that wait for a changelog write
// that failed. A nil *Changelog is the changelog off (Config's
// LocalStateOnly, or no topic): each method answers as the file alone
// would, so that a caller never asks whether the changelog is on.

// Log is the changelog's transport: the Kafka side, which the runtime
// implements over its Kafka client (the state imports no Kafka client).
type Log interface {
	// Send queues recs, in order, and returns the wait for their
	// acknowledgement; once the wait returned nil each record's Offset is
	// set. Calls are serialized by the caller.
	Send(recs []LogRecord) (wait func(ctx context.Context) error)
	// Read reads input partition p's changelog from offset from to the
	// end it finds at its start, calling fn with each fetch's records in
	// offset order, and returns the next offset to read. A from past the
	// end is an error wrapping ErrBeyondEnd.
	Read(ctx context.Context, input string, p int32, from int64, fn func([]LogRecord) error) (next int64, err error)
	// Topic names input's changelog topic, for errors and logs.
	Topic(input string) string
}

// ErrBeyondEnd is what a Log's Read wraps when from is past the end of
// the partition: the changelog topic was made again.
var ErrBeyondEnd = errors.New("snapshot: offset beyond the end of the changelog")

// LogRecord is one record of the changelog, written (Send) or read
// (Read).
type LogRecord struct {
	// Input and Partition are the input partition whose changelog
	// partition holds the record (set by Send's caller).
	Input     string
	Partition int32
	Offset    int64
	Key       []byte
	// Value is the stored record; nil for a tombstone.
	Value []byte
	// Writer is the ID of the file that wrote a record under another
	// file's key; nil when the key's file wrote it.
	Writer []byte
	// Moved marks a write of a key moved to another partition of the
	// changelog (its input topic gained partitions): a tombstone in the
	// old partition (the record lives on in the new one, so a reader
	// keeps its copy), or, with MovedIn, the put in the new one.
	Moved, MovedIn bool
}

// Partition names one input partition.
type Partition struct {
	Topic     string
	Partition int32
}

// ChangelogConfig is what [State.OpenChangelog] needs.
type ChangelogConfig struct {
	// Log is the transport; required.
	Log Log
	// Route names the input partition a message's record belongs to; ok
	// false keeps it local (a class without topics). Called inside write
	// transactions: quick, no use of the State. Required.
	Route func(m *handoff.Message) (topic string, partition int32, ok bool)
	// Count returns the partition count Route routes input topic's
	// records by now: a restore of a partition the file last read whole
	// by another count looks for records to move (MoveOut). Nil means
	// the counts never change (only the records a restore or a follow
	// applies are looked at).
	Count func(topic string) int32
	// Timeout bounds each wait for the changelog's acknowledgement.
	// Zero means 30s.
	Timeout time.Duration
	// Renames are the class renames a restore or a follow applies to the
	// records it brings back; nil means none.
	Renames map[string]string
	// HandedOver reports the delayed records handed to a pool: a
	// restored record of such an ID does not displace it. Nil means none.
	HandedOver func(DelayedKey) bool
	// Logger logs what the changelog side does; nil means discard.
	Logger *slog.Logger
}

// Changelog is the state file's changelog side; see the comment at the
// top of this file. Its methods are safe for concurrent use.
type Changelog struct {
	s       *State
	log     Log
	route   func(m *handoff.Message) (string, int32, bool)
	count   func(topic string) int32
	timeout time.Duration
	renames map[string]string
	logger  *slog.Logger

	// stopAt, when not zero, is the stop's deadline in Unix nanoseconds:
	// no changelog write waits past it.
	stopAt atomic.Int64

	mu sync.Mutex
	// owned are the partitions restored here and not revoked since;
	// ckpt their checkpoints.
	owned map[Partition]bool
	ckpt  map[Partition]*checkpoint
	// gen counts the changes of owned.
	gen atomic.Int64

	// waitMu guards waiting: the settles of messages saved to the file
	// whose changelog write failed (Await).
	waitMu  sync.Mutex
	waiting []func()

	// views are the dead letters of partitions owned elsewhere, as DeadIn
	// last read them (deadviews.go).
	views deadViews

	// rebuilt counts the partitions rebuilt after a break; claimed the
	// owner markers written.
	rebuilt, claimed atomic.Int64
}

// OpenChangelog turns the file's changelog on: every later write also
// goes to cfg.Log and returns once acknowledged (or with an error
// wrapping ErrChangelog when it committed to the file alone). It first
// sends what an earlier run saved locally but could not write, and the
// records the changelog may never have seen (a file written with the
// changelog off, or by a version before it). It blocks for those sends.
func (s *State) OpenChangelog(cfg ChangelogConfig) (*Changelog, error) {
	if cfg.Log == nil || cfg.Route == nil {
		return nil, errors.New("snapshot: changelog: Log and Route are required")
	}
	c := &Changelog{s: s, log: cfg.Log, route: cfg.Route, count: cfg.Count, timeout: cfg.Timeout, renames: cfg.Renames, logger: cfg.Logger,
		owned: map[Partition]bool{}, ckpt: map[Partition]*checkpoint{}}
	if c.count == nil {
		c.count = func(string) int32 { return 0 }
	}
	if c.timeout <= 0 {
		c.timeout = 30 * time.Second
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	_, had, err := s.fileID()
	if err != nil {
		return nil, fmt.Errorf("snapshot: changelog: %w", err)
	}
	if err := s.st.SetChangelog(store.Changelog{Route: c.routeRec, Send: c.send}); err != nil {
		return nil, fmt.Errorf("snapshot: changelog: %w", err)
	}
	s.st.SetDelayedHandedOver(cfg.HandedOver)
	n, err := s.st.ResendUnsent()
	if err != nil {
		return nil, fmt.Errorf("snapshot: changelog: resend what an earlier run could not write: %w", err)
	}
	if n > 0 {
		c.logger.Info("changes an earlier run saved locally written to the changelog", "changes", n)
	}
	n, err = s.st.SendUnlogged(!had)
	if err != nil {
		return nil, fmt.Errorf("snapshot: changelog: send the records written without it: %w", err)
	}
	if n > 0 {
		c.logger.Info("records written without the changelog sent to it", "records", n)
	}
	return c, nil
}

func (c *Changelog) routeRec(rec *Record) (string, int32, bool) { return c.route(&rec.Message) }

// send is the file's store.Changelog.Send: it queues changes and returns
// the wait for their acknowledgement, bounded by the timeout and the
// stop's deadline; acknowledged writes move their checkpoints.
func (c *Changelog) send(changes []store.Change) func() error {
	recs := make([]LogRecord, len(changes))
	for i := range changes {
		ch := &changes[i]
		recs[i] = LogRecord{Input: ch.Topic, Partition: ch.Partition, Key: ch.Key, Value: ch.Value, Writer: ch.Writer}
	}
	wait := c.log.Send(recs)
	return func() error {
		ctx, cancel := c.waitCtx()
		defer cancel()
		if err := wait(ctx); err != nil {
			return err
		}
		c.acked(recs)
		return nil
	}
}

// waitCtx bounds one wait for the changelog: the timeout, and the stop's
// deadline once Bound set it.
func (c *Changelog) waitCtx() (context.Context, context.CancelFunc) {
	d := c.timeout
	if at := c.stopAt.Load(); at != 0 {
		d = min(d, time.Until(time.Unix(0, at)))
	}
	return context.WithTimeout(context.Background(), max(d, 0))
}

// Bound makes every later changelog wait end by deadline: the stop's.
// Nothing with the changelog off.
func (c *Changelog) Bound(deadline time.Time) {
	if c != nil {
		c.stopAt.Store(deadline.UnixNano())
	}
}

// Route returns the input partition m's record belongs to; false with
// the changelog off, or for a class without topics.
func (c *Changelog) Route(m *handoff.Message) (Partition, bool) {
	if c == nil {
		return Partition{}, false
	}
	t, p, ok := c.route(m)
	return Partition{Topic: t, Partition: p}, ok
}

// RoutedTo returns the filter of the records that belong to p.
func (c *Changelog) RoutedTo(p Partition) func(*Record) bool {
	return func(rec *Record) bool {
		q, ok := c.Route(&rec.Message)
		return ok && q == p
	}
}

// StartRecovers is the filter of the records the start's recovery
// recovers: nil (all) with the changelog off; else those that belong to
// no partition (the partitions' restores recover the others).
func (c *Changelog) StartRecovers() func(*Record) bool {
	if c == nil {
		return nil
	}
	return func(rec *Record) bool {
		_, ok := c.Route(&rec.Message)
		return !ok
	}
}

// Owns reports whether rec is this instance's to use: always with the
// changelog off; else when it belongs to no partition, or to one
// restored here and not revoked since.
func (c *Changelog) Owns(rec *Record) bool {
	p, ok := c.Route(&rec.Message)
	return !ok || c.OwnsPartition(p)
}

// OwnsPartition reports whether p is restored here and not revoked
// since; true with the changelog off (every record is this instance's).
func (c *Changelog) OwnsPartition(p Partition) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owned[p]
}

// Owned returns the partitions restored here and not revoked since, in
// no order; none with the changelog off.
func (c *Changelog) Owned() []Partition {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := make([]Partition, 0, len(c.owned))
	for p := range c.owned {
		ps = append(ps, p)
	}
	return ps
}

// Generation counts the changes of what this instance owns (a restore,
// a revocation); 0 with the changelog off.
func (c *Changelog) Generation() int64 {
	if c == nil {
		return 0
	}
	return c.gen.Load()
}

// own marks p owned, restored up to changelog offset next.
func (c *Changelog) own(p Partition, next int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen.Add(1)
	c.owned[p] = true
	c.ckpt[p] = &checkpoint{next: next}
}

// Disown marks p not owned (revoked, or its restore failed) and, when
// keep, first writes its checkpoint to the file. Nothing with the
// changelog off.
func (c *Changelog) Disown(p Partition, keep bool) {
	if c == nil {
		return
	}
	if keep {
		c.keepCheckpoints([]Partition{p})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen.Add(1)
	delete(c.owned, p)
	delete(c.ckpt, p)
}

// checkpoint is what the file holds of one owned partition's changelog:
// everything before next is applied to it. The partition's restore sets
// next to the changelog's end; this instance's own writes, once
// acknowledged, move it on while they follow one another without a gap
// (a write of another instance in between stops it there: the next
// restore or follow reads from it).
type checkpoint struct {
	next int64
	// ahead are acknowledged writes past a gap, first offset to end:
	// they join next once the writes before them are acknowledged. Past
	// maxAhead entries the checkpoint stops moving (stuck) until a
	// follow's read covers it.
	ahead map[int64]int64
	stuck bool
}

// maxAhead bounds a checkpoint's acknowledged writes past a gap.
const maxAhead = 1024

// acked moves the checkpoints of the partitions recs were written to.
func (c *Changelog) acked(recs []LogRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range recs {
		o := &recs[i]
		cp := c.ckpt[Partition{Topic: o.Input, Partition: o.Partition}]
		if cp == nil || cp.stuck || o.Offset < cp.next {
			continue
		}
		if o.Offset > cp.next {
			if len(cp.ahead) >= maxAhead {
				cp.ahead, cp.stuck = nil, true
				continue
			}
			if cp.ahead == nil {
				cp.ahead = map[int64]int64{}
			}
			cp.ahead[o.Offset] = o.Offset + 1
			continue
		}
		cp.next = o.Offset + 1
		cp.join()
	}
}

// cover moves p's checkpoint over what a follow read from it, up to
// next: the other instances' writes there are applied now, and this
// instance's own were in the file before they were sent. So a
// checkpoint that an unacknowledged write left behind, or that stopped
// moving (stuck), moves on.
func (c *Changelog) cover(p Partition, next int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := c.ckpt[p]
	if cp == nil {
		return
	}
	if cp.stuck {
		cp.stuck, cp.ahead = false, nil
	}
	cp.next = max(cp.next, next)
	cp.join()
}

// join moves the checkpoint over the applied offsets past it that it
// has reached.
func (cp *checkpoint) join() {
	for moved := true; moved; {
		moved = false
		for start, end := range cp.ahead {
			if start <= cp.next {
				delete(cp.ahead, start)
				cp.next = max(cp.next, end)
				moved = true
			}
		}
	}
}

// checkpointOf returns where owned partition p's checkpoint is; false
// when p is not owned here (or the changelog is off).
func (c *Changelog) checkpointOf(p Partition) (int64, bool) {
	if c == nil {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := c.ckpt[p]
	if cp == nil || !c.owned[p] {
		return 0, false
	}
	return cp.next, true
}

// keepCheckpoints writes the checkpoints of ps (every owned partition's
// when ps is nil) to the file. A checkpoint not written costs the next
// restore a longer read, nothing else.
func (c *Changelog) keepCheckpoints(ps []Partition) {
	c.mu.Lock()
	var keep []Checkpoint
	for p, cp := range c.ckpt {
		if ps == nil || slices.Contains(ps, p) {
			keep = append(keep, Checkpoint{Topic: p.Topic, Partition: p.Partition, Next: cp.next})
		}
	}
	c.mu.Unlock()
	if len(keep) == 0 {
		return
	}
	if err := c.s.KeepCheckpoints(keep); err != nil {
		c.logger.Warn("changelog checkpoints not kept; the next restore reads more of the changelog", "err", err)
	}
}

// Await keeps settle, the settling of a message whose save committed to
// the file but not to the changelog, until the changelog has the write:
// Resend runs it then. With the changelog off it runs settle at once.
func (c *Changelog) Await(settle func()) {
	if c == nil {
		settle()
		return
	}
	c.waitMu.Lock()
	c.waiting = append(c.waiting, settle)
	c.waitMu.Unlock()
}

// Resend writes to the changelog what the file holds unsent (the writes
// whose changelog write failed) and, once it succeeded, settles the
// messages waiting for it (Await). It returns how many messages it
// settled (on a failure: how many still wait), how many changes it
// sent, and the failure, after which nothing is settled. Nothing with
// the changelog off.
func (c *Changelog) Resend() (settled, sent int, err error) {
	if c == nil {
		return 0, 0, nil
	}
	c.waitMu.Lock()
	waiting := c.waiting
	c.waiting = nil
	c.waitMu.Unlock()
	n, err := c.s.st.ResendUnsent()
	if err != nil {
		c.waitMu.Lock()
		c.waiting = append(waiting, c.waiting...)
		n := len(c.waiting)
		c.waitMu.Unlock()
		return n, 0, err
	}
	for _, settle := range waiting {
		settle()
	}
	return len(waiting), n, nil
}

// KeepCheckpoints writes every owned partition's checkpoint to the file:
// at the stop. Nothing with the changelog off.
func (c *Changelog) KeepCheckpoints() {
	if c != nil {
		c.keepCheckpoints(nil)
	}
}

// Counts returns how many partitions a restore rebuilt after a break,
// and how many owner markers this file wrote.
func (c *Changelog) Counts() (rebuilt, claimed int64) {
	if c == nil {
		return 0, 0
	}
	return c.rebuilt.Load(), c.claimed.Load()
}
