package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/kafkasec"
	"github.com/handoff-go/handoff/runtime"
	"github.com/handoff-go/handoff/snapshot"
)

// headerReplayedFrom is the header replay adds to every message it
// produces: the message's handoff ID.
const headerReplayedFrom = "handoff-replayed-from"

type replayFlags struct {
	state      stateFlags
	brokers    []string
	dead       bool
	batch      int
	topics     []string
	ackTimeout time.Duration
	sec        kafkasec.Options
	dialer     *kafkasec.Dialer // from sec, by parse
}

func newReplayCmd() *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay STATE --brokers HOST:PORT[,...]",
		Short: "Produce a retired instance's saved messages back to their Kafka topics",
		Long: `Replay produces the pending messages of the state file STATE (with --dead,
the dead letters too), its delayed messages and its parked messages to
the topic and partition they were read from, with their key, value and
headers plus a header handoff-replayed-from holding the message ID. Use it
for an instance that will not start again: its saved messages then reach
whichever instance consumes those topics.

A delayed message (a redelivery, a handoff-deliver-at record, a scheduled
one) keeps its due time: it is sent with a header handoff-deliver-at
holding it (replacing one it had), which the consuming runtime honours;
its attempt count is not carried over. Parked messages are sent after the
message their key waits for, in their key's order: behind a dead letter
only with --dead (after it; without --dead they stay in the file),
behind a redelivery with that redelivery's due time (plus a nanosecond
per message, so they come due after it and in order, in its batch, which
may so be longer than --batch), and right away when the file holds no
blocker.

Messages are sent in batches; a batch's records are deleted from the file
only once the broker has acknowledged them (acks=all). Ctrl-C finishes the
batch in flight, deletes what was acknowledged and stops: running replay
again sends the rest, nothing twice. (A second Ctrl-C quits at once; the
batch in flight may then be sent again by the next replay.)

With --tls-ca, --tls-cert/--tls-key or --tls the connections use TLS;
with --sasl-mechanism (plain, scram-sha-256, scram-sha-512),
--sasl-username and --sasl-password-file (else $KAFKA_SASL_PASSWORD) they
authenticate. A refused TLS handshake or authentication ends the replay
before anything is sent, naming the broker, the mechanism and the user.

Messages submitted in-process have no topic: they are skipped and left in
the file unless --topic maps their class to one.`,
		Args: stateArgs(0, 0, ""),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return runReplay(cmd, args[0], &f)
		}),
	}
	f.state.register(cmd)
	fl := cmd.Flags()
	fl.StringSliceVar(&f.brokers, "brokers", nil, "Kafka bootstrap brokers, host:port[,host:port] (required)")
	fl.BoolVar(&f.dead, "dead", false, "replay the dead letters too, after the pending messages (and the messages parked behind them, after them)")
	fl.IntVar(&f.batch, "batch", 500, "messages per batch: produced, acknowledged, then deleted from the file together")
	fl.StringArrayVar(&f.topics, "topic", nil, "CLASS=TOPIC: produce messages of CLASS that have no origin topic to TOPIC (repeatable)")
	fl.DurationVar(&f.ackTimeout, "ack-timeout", 30*time.Second, "how long one batch may wait for the broker's acknowledgement")
	fl.AddGoFlagSet(secFlags(&f.sec))
	return cmd
}

// replayItem is one record to replay.
type replayItem struct {
	bucket    string // snapshot.BucketPending, BucketDead, BucketDelayed or BucketParked
	key       uint64 // of a pending record or a dead letter
	delayed   snapshot.DelayedKey
	parked    snapshot.ParkedKey
	partition int // the origin partition, -1 for none
	msg       kafka.Message
	// blocks is, for a redelivery with messages parked behind it, the
	// class and key it blocks; follows marks those parked messages, which
	// go in the same batch as their blocker (see sendAll).
	blocks  string
	follows bool
}

// keyText names the item's record in errors: its bucket key, or for a
// delayed or parked record its message ID (their bucket keys hold the
// message key, which stays out of messages).
func (it *replayItem) keyText() string {
	switch it.bucket {
	case snapshot.BucketDelayed, snapshot.BucketParked:
		for _, h := range it.msg.Headers {
			if h.Key == headerReplayedFrom {
				return "id " + string(h.Value)
			}
		}
	}
	return fmt.Sprintf("key %d", it.key)
}

// replayPlan is what a replay will do.
type replayPlan struct {
	items   []replayItem
	pending int            // items from the pending bucket
	dead    int            // items from the dead bucket
	delayed int            // items from the delayed bucket
	parked  int            // items from the parked bucket
	skipped map[string]int // class -> records without a topic
	// behindDead counts the parked records left in the file because
	// their key waits for a dead letter and --dead is not given.
	behindDead int
	bad        int                        // undecodable pending records moved to quarantine
	badParked  int                        // undecodable parked records (or keys) moved to quarantine
	badDead    []snapshot.UndecodableDead // with --dead, left in the file
}

func (f *replayFlags) parse() (map[string]string, error) {
	if err := f.state.validate(); err != nil {
		return nil, err
	}
	if f.brokers = brokerList(f.brokers); len(f.brokers) == 0 {
		return nil, usagef("--brokers is required: host:port[,host:port]")
	}
	if f.batch <= 0 {
		return nil, usagef("--batch must be > 0, got %d", f.batch)
	}
	if f.ackTimeout <= 0 {
		return nil, usagef("--ack-timeout must be > 0, got %s", f.ackTimeout)
	}
	tlsConfig, mech, err := f.sec.Load()
	if err != nil {
		return nil, usagef("%v", err)
	}
	f.dialer = &kafkasec.Dialer{TLS: tlsConfig, SASL: mech, ClientID: "handoff-replay"}
	topics := map[string]string{}
	for _, t := range f.topics {
		class, topic, ok := strings.Cut(t, "=")
		if !ok || class == "" || topic == "" {
			return nil, usagef("--topic %q: want CLASS=TOPIC", t)
		}
		if prev, dup := topics[class]; dup && prev != topic {
			return nil, usagef("--topic maps class %q twice (%s, %s)", class, prev, topic)
		}
		topics[class] = topic
	}
	return topics, nil
}

func runReplay(cmd *cobra.Command, path string, f *replayFlags) error {
	topics, err := f.parse()
	if err != nil {
		return err
	}
	// Ctrl-C or SIGTERM stops after the batch in flight. After the first
	// signal the default action is back, so a second one quits at once.
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)

	return withState(path, &f.state, func(st *snapshot.State) error {
		plan, err := planReplay(st, f.dead, topics)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if plan.bad > 0 {
			fmt.Fprintf(out, "moved %d undecodable pending records to quarantine; they are not replayed\n", plan.bad)
		}
		if plan.badParked > 0 {
			fmt.Fprintf(out, "moved %d undecodable parked records to quarantine; they are not replayed\n", plan.badParked)
		}
		warnUndecodable(cmd.ErrOrStderr(), plan.badDead)
		sent, runErr := sendAll(ctx, st, f, plan, newProgress(cmd.ErrOrStderr(), len(plan.items)))
		summary := fmt.Sprintf("replayed %d of %d messages (pending %d, dead letters %d) from %s",
			sent, len(plan.items), plan.pending, plan.dead, path)
		switch {
		case plan.delayed+plan.parked > 0 && f.dead:
			summary = fmt.Sprintf("replayed %d of %d messages (pending %d, dead letters %d, delayed %d, parked %d) from %s",
				sent, len(plan.items), plan.pending, plan.dead, plan.delayed, plan.parked, path)
		case plan.delayed+plan.parked > 0:
			summary = fmt.Sprintf("replayed %d of %d messages (pending %d, delayed %d, parked %d) from %s",
				sent, len(plan.items), plan.pending, plan.delayed, plan.parked, path)
		case !f.dead:
			summary = fmt.Sprintf("replayed %d of %d pending messages from %s", sent, len(plan.items), path)
		}
		fmt.Fprintln(out, summary)
		if plan.behindDead > 0 {
			fmt.Fprintf(out, "kept %d parked messages behind the dead letters of their keys: replay with --dead sends them after those\n", plan.behindDead)
		}
		if n := sum(plan.skipped); n > 0 {
			var parts []string
			for _, c := range slices.Sorted(maps.Keys(plan.skipped)) {
				parts = append(parts, fmt.Sprintf("%s %d", oneLine(c, 40), plan.skipped[c]))
			}
			fmt.Fprintf(out, "skipped %d messages with no origin topic (class %s): they were submitted in-process; "+
				"map their class with --topic CLASS=TOPIC to replay them\n", n, strings.Join(parts, ", "))
		}
		if err := printLeft(out, st); err != nil {
			return errors.Join(runErr, err)
		}
		return runErr
	})
}

// printLeft says what the state file still holds, if anything.
func printLeft(w io.Writer, st *snapshot.State) error {
	counts, err := st.Counts()
	if err != nil {
		return err
	}
	var parts []string
	for _, name := range []string{snapshot.BucketPending, snapshot.BucketDead, snapshot.BucketDelayed, snapshot.BucketParked, snapshot.BucketQuarantine} {
		if counts[name] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", name, counts[name]))
		}
	}
	if len(parts) == 0 {
		_, err = fmt.Fprintf(w, "%s holds no more messages\n", st.Path())
		return err
	}
	_, err = fmt.Fprintf(w, "left in %s: %s (replay sends pending messages, and dead letters with --dead; "+
		"'handoff inspect' shows the rest)\n", st.Path(), strings.Join(parts, ", "))
	return err
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// planReplay reads what to replay from st, in one transaction, and moves
// the undecodable pending records to the quarantine bucket.
//
// The order is the order of sending: pending records, dead letters (with
// dead), delayed records in due order, then parked records key by key in
// park order. A parked key's records go after its blocker, as the
// runtime finds it at start: a dead letter of the same class and key
// (sent before them, so they follow it on its partition; without dead
// they stay), else a redelivery (they get its due time plus a nanosecond
// each, so they come due after it, in order), else a dead letter
// requeued offline (a pending record, sent first); with none, at once.
func planReplay(st *snapshot.State, dead bool, topics map[string]string) (*replayPlan, error) {
	plan := &replayPlan{skipped: map[string]int{}}
	// held are the parked records behind a redelivery, by blocker.
	held := map[string][]replayItem{}
	undecodable, err := st.Walk(replayWalk(plan, dead, topics, held))
	if err != nil {
		return nil, err
	}
	if len(held) > 0 {
		plan.placeHeld(held)
	}
	bad, badDead := plan.countUndecodable(undecodable, dead)
	if badDead {
		// Their IDs, to name them as 'dead list' does.
		if _, plan.badDead, err = st.DeadRefs(""); err != nil {
			return nil, err
		}
	}
	return plan, st.Quarantine(bad...)
}

// replayWalk returns the walk of a state file that adds its records to
// plan in the order planReplay describes: dead letters only with dead,
// each record to the topic topics names. The parked records behind a
// redelivery go to held, by blocker, instead of plan.items.
func replayWalk(plan *replayPlan, dead bool, topics map[string]string, held map[string][]replayItem) snapshot.Walk {
	add := func(bucket string, key uint64, r *snapshot.Record) bool {
		return plan.add(bucket, key, r, topics, time.Time{}) != nil
	}
	// blockers maps class and key of the dead letters and redeliveries
	// to what blocks the key.
	type blocker struct {
		dead bool
		due  time.Time
	}
	blockers := map[string]blocker{}
	return snapshot.Walk{
		Pending: func(e *snapshot.Entry) {
			if add(snapshot.BucketPending, e.Key, &e.Record) {
				plan.pending++
			}
		},
		Dead: func(e *snapshot.Entry) {
			m := &e.Record.Message
			blockers[blockerOf(m.Class, m.Key)] = blocker{dead: true}
			if dead && add(snapshot.BucketDead, e.Key, &e.Record) {
				plan.dead++
			}
		},
		Delayed: func(e *snapshot.DelayedEntry) {
			r := &e.Record
			if k := blockerOf(r.Message.Class, r.Message.Key); r.Reason == reasonRedelivery {
				if _, ok := blockers[k]; !ok {
					blockers[k] = blocker{due: e.Due}
				}
			}
			if it := plan.add(snapshot.BucketDelayed, 0, r, topics, e.Due); it != nil {
				it.delayed = e.Key
				if r.Reason == reasonRedelivery {
					it.blocks = blockerOf(r.Message.Class, r.Message.Key)
				}
				plan.delayed++
			}
		},
		Parked: func(pk snapshot.ParkedCount, recs []snapshot.ParkedEntry) {
			b := blockers[blockerOf(pk.Class, pk.Key)]
			if b.dead && !dead {
				plan.behindDead += len(recs)
				return
			}
			for i := range recs {
				var due time.Time
				if !b.due.IsZero() {
					due = b.due.Add(time.Duration(i+1) * time.Nanosecond)
				}
				it := plan.add(snapshot.BucketParked, 0, &recs[i].Record, topics, due)
				if it == nil {
					continue
				}
				it.parked = recs[i].Key
				plan.parked++
				if !due.IsZero() {
					// Moved behind its blocker below.
					held[blockerOf(pk.Class, pk.Key)] = append(held[blockerOf(pk.Class, pk.Key)], *it)
					plan.items = plan.items[:len(plan.items)-1]
				}
			}
		},
	}
}

// placeHeld puts the parked items held behind a redelivery (by the
// blocker key the redelivery's item blocks) right after it in
// plan.items, in the same batch: a replay interrupted between the two
// would send them, when run again, with no blocker left in the file, so
// at once. Those whose blocker is not sent (it has no topic) go last, by
// blocker key. It empties held.
func (plan *replayPlan) placeHeld(held map[string][]replayItem) {
	items := make([]replayItem, 0, len(plan.items)+plan.parked)
	for _, it := range plan.items {
		items = append(items, it)
		if fs, ok := held[it.blocks]; ok && it.blocks != "" {
			for i := range fs {
				fs[i].follows = true
			}
			items = append(items, fs...)
			delete(held, it.blocks)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(held)) {
		items = append(items, held[k]...)
	}
	plan.items = items
}

// countUndecodable counts the undecodable records in plan and returns
// the pending and parked ones, which go to the quarantine as the service
// moves them, and whether there is an undecodable dead letter to report
// (only with dead: the replay that sends the dead letters reports them).
// A delayed one stays, as the service leaves them.
func (plan *replayPlan) countUndecodable(undecodable []*snapshot.DecodeError, dead bool) (bad []*snapshot.DecodeError, badDead bool) {
	for _, de := range undecodable {
		switch de.Bucket {
		case snapshot.BucketPending:
			plan.bad++
			bad = append(bad, de)
		case snapshot.BucketParked:
			plan.badParked++
			bad = append(bad, de)
		case snapshot.BucketDead:
			badDead = dead
		}
	}
	return bad, badDead
}

// add appends record r of bucket (key: its key in the pending or dead
// bucket) to the plan and returns its item, or nil when it has no topic
// (counted as skipped). A non-zero due is sent in a handoff-deliver-at
// header, replacing one the message had.
func (plan *replayPlan) add(bucket string, key uint64, r *snapshot.Record, topics map[string]string, due time.Time) *replayItem {
	m := &r.Message
	topic := m.Origin.Topic
	partition := -1
	if topic != "" {
		partition = m.Origin.Partition
	} else if topic = topics[m.Class]; topic == "" {
		plan.skipped[m.Class]++
		return nil
	}
	headers := make([]kafka.Header, 0, len(m.Headers)+2)
	for _, h := range m.Headers {
		if !due.IsZero() && h.Key == runtime.HeaderDeliverAt {
			continue
		}
		headers = append(headers, kafka.Header{Key: h.Key, Value: h.Value})
	}
	if !due.IsZero() {
		headers = append(headers, kafka.Header{Key: runtime.HeaderDeliverAt, Value: []byte(due.UTC().Format(time.RFC3339Nano))})
	}
	headers = append(headers, kafka.Header{Key: headerReplayedFrom, Value: []byte(m.ID)})
	plan.items = append(plan.items, replayItem{
		bucket:    bucket,
		key:       key,
		partition: partition,
		// Time: the original record's timestamp; zero (the produce
		// time) for a submitted message or a format-1 record.
		msg: kafka.Message{Topic: topic, Key: m.Key, Value: m.Value, Headers: headers, Time: m.Timestamp},
	})
	return &plan.items[len(plan.items)-1]
}

// errInterrupted is returned by replay when it was stopped before the end.
var errInterrupted = errors.New("replay interrupted")

// sendAll produces plan's items in batches and deletes each batch's
// acknowledged records from st before the next batch starts. It returns
// how many were sent and deleted.
//
// A batch is never abandoned half-way: it is produced under a context
// that ctx's cancellation does not reach (bounded by --ack-timeout), and
// ctx is checked between batches only. So when ctx is cancelled, every
// record is either acknowledged and deleted, or was never handed to the
// producer.
func sendAll(ctx context.Context, st *snapshot.State, f *replayFlags, plan *replayPlan, prog progress) (int, error) {
	defer prog.finish()
	if len(plan.items) == 0 {
		return 0, nil
	}
	tr := &kafka.Transport{ClientID: f.dialer.ClientID}
	defer tr.CloseIdleConnections()
	if f.dialer.TLS != nil || f.dialer.SASL != nil {
		tr.Dial = f.dialer.DialContext
		// What retrying cannot fix (a refused TLS handshake or SASL
		// authentication, which only these dials meet) ends the replay
		// before anything is sent.
		if err := f.dialer.Check(ctx, f.brokers); err != nil {
			if _, ok := errors.AsType[*kafkasec.ConnectError](err); ok {
				return 0, err
			}
		}
	}
	w := &kafka.Writer{
		Addr:         kafka.TCP(f.brokers...),
		Balancer:     &originBalancer{},
		RequiredAcks: kafka.RequireAll,
		BatchSize:    f.batch,
		BatchTimeout: time.Millisecond,
		Transport:    tr,
	}
	sent := 0
	var err error
	for start, end := 0, 0; start < len(plan.items) && err == nil; start = end {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %d of %d messages replayed and deleted from %s; run the same command again to replay the rest",
				errInterrupted, sent, len(plan.items), st.Path())
			break
		}
		end = batchEnd(plan.items, start, f.batch)
		batch := plan.items[start:end]
		var n int
		n, err = sendBatch(ctx, st, w, batch, f.ackTimeout)
		sent += n
		prog.add(n)
	}
	if cerr := w.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close producer: %w", cerr)
	}
	return sent, err
}

// batchEnd returns where the batch of items starting at start ends:
// after size items, and after the parked messages that follow the last
// one's redelivery (so a batch may be longer than size).
func batchEnd(items []replayItem, start, size int) int {
	end := min(start+size, len(items))
	for end < len(items) && items[end].follows {
		end++
	}
	return end
}

// sendBatch produces batch and deletes the records the broker
// acknowledged. It returns how many that was.
func sendBatch(ctx context.Context, st *snapshot.State, w *kafka.Writer, batch []replayItem, ackTimeout time.Duration) (int, error) {
	msgs := make([]kafka.Message, len(batch))
	for i := range batch {
		msgs[i] = batch[i].msg
		msgs[i].WriterData = &batch[i]
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	werr := w.WriteMessages(wctx, msgs...)

	// Which messages were acknowledged: all of them, those without an
	// error in a WriteErrors, or (any other error: the call failed before
	// producing, or timed out not knowing) none.
	acked := make([]bool, len(batch))
	var perMsg kafka.WriteErrors
	switch {
	case werr == nil:
		for i := range acked {
			acked[i] = true
		}
	case errors.As(werr, &perMsg) && len(perMsg) == len(batch):
		for i, e := range perMsg {
			acked[i] = e == nil
		}
	}
	var del []snapshot.Source
	n := 0
	for i, ok := range acked {
		if !ok {
			continue
		}
		n++
		switch batch[i].bucket {
		case snapshot.BucketDead:
			del = append(del, snapshot.Source{From: snapshot.FromDead, Key: batch[i].key})
		case snapshot.BucketDelayed:
			del = append(del, snapshot.Source{From: snapshot.FromDelayed, Delayed: batch[i].delayed})
		case snapshot.BucketParked:
			del = append(del, snapshot.Source{From: snapshot.FromParked, Parked: batch[i].parked})
		default:
			del = append(del, snapshot.Source{From: snapshot.FromPending, Key: batch[i].key})
		}
	}
	// One transaction for every bucket.
	if derr := st.Delete(del...); derr != nil {
		return 0, fmt.Errorf("%d messages were delivered but their records could not be deleted from %s "+
			"(replaying again would send them twice): %w", n, st.Path(), derr)
	}
	if werr != nil {
		return n, batchError(werr, batch, acked, ackTimeout)
	}
	return n, nil
}

// batchError describes a failed batch: the first failure with the record
// it concerns, and what is known about the rest.
func batchError(werr error, batch []replayItem, acked []bool, ackTimeout time.Duration) error {
	var perMsg kafka.WriteErrors
	if errors.As(werr, &perMsg) && len(perMsg) == len(batch) {
		failed := 0
		first := -1
		for i, e := range perMsg {
			if e != nil {
				failed++
				if first < 0 {
					first = i
				}
			}
		}
		it := batch[first]
		return fmt.Errorf("produce %d of %d messages of the batch failed (the others were delivered and deleted); "+
			"first: %s %s to topic %s: %w", failed, len(batch), it.bucket, it.keyText(), it.msg.Topic, perMsg[first])
	}
	var tooLarge kafka.MessageTooLargeError
	if errors.As(werr, &tooLarge) {
		if it, ok := tooLarge.Message.WriterData.(*replayItem); ok {
			return fmt.Errorf("%s %s is larger than the producer's batch limit; nothing of its batch was sent: %w",
				it.bucket, it.keyText(), werr)
		}
	}
	if errors.Is(werr, context.DeadlineExceeded) {
		return fmt.Errorf("batch of %d messages not acknowledged within --ack-timeout %s; they stay in the file, "+
			"and replaying again may send those the broker did receive twice: %w", len(batch), ackTimeout, werr)
	}
	return fmt.Errorf("produce batch of %d messages (first: %s %s to topic %s); nothing of it was deleted: %w",
		len(batch), batch[0].bucket, batch[0].keyText(), batch[0].msg.Topic, werr)
}

// originBalancer sends a message to the partition it was read from (its
// WriterData is its *replayItem) when the topic still has it, else by key
// hash as kafka.Hash does.
type originBalancer struct {
	fallback kafka.Hash
}

func (b *originBalancer) Balance(msg kafka.Message, partitions ...int) int {
	if it, ok := msg.WriterData.(*replayItem); ok && it.partition >= 0 && slices.Contains(partitions, it.partition) {
		return it.partition
	}
	return b.fallback.Balance(msg, partitions...)
}
