package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// Commits: the keeper goroutine of each generation commits what its
// trackers (tracker.go) have settled, on an interval and as soon as the
// flow stops; the stop's final commit goes through it too.

// keep commits every CommitInterval, and sooner once the flow stops:
// when a partition has caught up with its high watermark and everything
// fetched from the caught-up partitions is settled, it commits at once
// (within the commitBudget: 10 such commits a second), so after a burst
// the commit follows the last message within milliseconds rather than up
// to a CommitInterval later. Until then it looks again after 1 ms, then
// 2, 4, … up to maxIdlePoll. It also applies franz-go's assignments and
// revocations (changes), so only the keeper commits and changes the set
// of partitions.
//
// When end ends (kafka-go ended the generation at a rebalance or a lost
// session; franz-go's client closed) it stops the fetch loops, gives back
// what they fetched and is not started, commits what is settled and
// returns: kafka-go waits for it to move on. A late result of the
// generation then only marks trackers nobody commits any more. After the
// stop's final commit it only waits for end.
func (g *generation) keep(end context.Context) {
	defer close(g.ended)
	interval := g.r.cfg.CommitInterval
	t := time.NewTicker(interval)
	defer t.Stop()
	alive := g.r.alive.start(fmt.Sprintf("committer of generation %d", g.id.Load()), interval)
	defer alive.end()
	soon := time.NewTimer(0)
	soon.Stop()
	defer soon.Stop()
	var wait time.Duration // until soon looks again; 0 while not armed
	budget := newCommitBudget(len(g.trackers()), minCommitGap(interval), time.Now())
	commit := func(when string) {
		if g.final.Load() { // the stop's final commit is on its way
			return
		}
		if err := g.commit(); err != nil {
			g.r.metrics.commitFailed()
			g.r.logs.warn(g.r.log, "commit failed", "commit failed; retrying at the next interval", "generation", g.id.Load(), "when", when, "err", err)
		}
	}
	for {
		select {
		case <-t.C:
			alive.beat()
			commit("interval")
		case <-g.caughtUp:
			if wait == 0 {
				wait = time.Millisecond
				soon.Reset(wait)
			}
		case <-soon.C:
			switch idle, some := g.idle(); {
			case idle:
				if later := budget.take(time.Now()); later > 0 {
					soon.Reset(later)
					break
				}
				commit("caught up")
				wait = 0
			case !some: // traffic resumed: the ticker commits
				wait = 0
			default:
				wait = min(2*wait, maxIdlePoll, interval)
				soon.Reset(wait)
			}
		case ch := <-g.changes:
			g.apply(ch)
			budget = newCommitBudget(len(g.trackers()), minCommitGap(interval), time.Now())
		case reply := <-g.finalReq:
			err := g.commit()
			if err != nil {
				g.r.metrics.commitFailed()
			}
			reply <- err
			// Held open until the group closes; what the membership
			// does meanwhile (a leave's revocation) changes nothing.
			for {
				select {
				case <-end.Done():
					return
				case ch := <-g.changes:
					close(ch.done)
				}
			}
		case <-end.Done():
			if g.client == ClientFranzGo {
				// The client is closed, at the stop's leave: fetching
				// ended at the quiesce and nothing can be committed any
				// more.
				return
			}
			given := g.r.revoked.Load()
			g.remove(nil, false)
			g.r.metrics.rebalanced()
			g.r.log.Info("group generation ended", "generation", g.id.Load(), "given_back", g.r.revoked.Load()-given)
			return
		}
	}
}

// apply makes an assignment or a revocation of franz-go's and answers it.
func (g *generation) apply(ch change) {
	defer close(ch.done)
	if g.final.Load() {
		// The stop's final commit is on its way or done: what the
		// membership does now (a close's revocation) changes nothing.
		return
	}
	if len(ch.remove) > 0 {
		g.remove(ch.remove, ch.lost)
		g.r.metrics.rebalanced()
	}
	g.add(ch.add)
}

// request hands ch to the keeper and waits until it is applied, or until
// the keeper has ended (then there is nothing left to change).
func (g *generation) request(ch change) {
	ch.done = make(chan struct{})
	select {
	case g.changes <- ch:
	case <-g.ended:
		return
	}
	select {
	case <-ch.done:
	case <-g.ended:
	}
}

// maxIdlePoll is the longest the keeper waits before it looks again
// whether caught-up partitions have all they fetched settled: what a
// commit may lag behind the end of a burst, beyond the commit itself.
const maxIdlePoll = 16 * time.Millisecond

// minCommitGap is the mean time between commits made because the flow
// stopped, over time: it bounds them to 10 a second under a trickle of
// messages that each catch a partition up.
func minCommitGap(interval time.Duration) time.Duration {
	return min(interval, 100*time.Millisecond)
}

// commitBudget is a token bucket for the commits made because the flow
// stopped: one token per gap, up to one per partition, so the partitions
// of a burst that end one after the other are each committed at once,
// while a steady trickle gets one commit per gap.
type commitBudget struct {
	tokens, max float64
	gap         time.Duration
	at          time.Time // of the last refill
}

func newCommitBudget(partitions int, gap time.Duration, now time.Time) *commitBudget {
	n := float64(max(partitions, 1))
	return &commitBudget{tokens: n, max: n, gap: gap, at: now}
}

// take spends a token and returns 0, or returns how long until one is
// there.
func (b *commitBudget) take(now time.Time) time.Duration {
	b.tokens = min(b.max, b.tokens+float64(now.Sub(b.at))/float64(b.gap))
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(b.gap))
}

// idle reports whether some partition is caught up with its high
// watermark (some) and whether, in addition, every caught-up partition
// has all it fetched settled (idle): the moment to commit without waiting
// for the interval.
func (g *generation) idle() (idle, some bool) {
	idle = true
	for _, tr := range g.trackers() {
		if !tr.caughtUp.Load() {
			continue
		}
		some = true
		if !tr.allSettled() {
			idle = false
		}
	}
	return idle && some, some
}

// commit commits every partition whose commit point moved.
func (g *generation) commit() error {
	offsets := map[string]map[int]int64{}
	var moved []*tracker
	var points []int64
	for _, tr := range g.trackers() {
		cp, ok := tr.commitPoint()
		if !ok {
			continue
		}
		if offsets[tr.topic] == nil {
			offsets[tr.topic] = map[int]int64{}
		}
		offsets[tr.topic][tr.partition] = cp
		moved = append(moved, tr)
		points = append(points, cp)
	}
	if len(moved) == 0 {
		return nil
	}
	if err := g.commitOffsets(offsets); err != nil {
		return fmt.Errorf("runtime: commit offsets of %d partitions in generation %d: %w", len(moved), g.id.Load(), err)
	}
	for i, tr := range moved {
		tr.committedTo(points[i])
	}
	return nil
}

// kafkaGoCommits commits a kafka-go generation's offsets: through the
// generation's connection and, once that has failed, on fresh
// connections. kafka-go commits through one connection per generation and
// never reconnects it: after a connection reset every later commit of the
// generation would fail, its end's commit too, and the next generation
// would read again everything since the last commit that got through. A
// fresh commit carries the generation's ID and member ID, so the broker
// fences it exactly as it fences the generation. Only the keeper calls
// commit.
type kafkaGoCommits struct {
	r  *Runtime
	kg *kafka.Generation
	// connLost is set once a commit through the generation's connection
	// failed.
	connLost bool
}

func (k *kafkaGoCommits) commit(offsets map[string]map[int]int64) error {
	if !k.connLost {
		err := k.kg.CommitOffsets(offsets)
		if err == nil {
			return nil
		}
		k.connLost = true
		k.r.log.Warn("commit through the generation's connection failed; committing on fresh connections for the rest of the generation",
			"generation", k.kg.ID, "err", err)
	}
	return k.r.commitFresh(k.kg, offsets)
}

// commitFresh commits offsets for generation kg through the runtime's own
// client, which finds the group's coordinator and connects anew as needed.
// A connection failure is retried on a new connection (3 tries, within
// commitTimeout); an answer of the broker (a fenced generation, say) is
// final.
func (r *Runtime) commitFresh(kg *kafka.Generation, offsets map[string]map[int]int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	req := &kafka.OffsetCommitRequest{
		Addr: r.commits.Addr, GroupID: kg.GroupID, GenerationID: int(kg.ID), MemberID: kg.MemberID,
		Topics: make(map[string][]kafka.OffsetCommit, len(offsets)),
	}
	for topic, parts := range offsets {
		for p, off := range parts {
			req.Topics[topic] = append(req.Topics[topic], kafka.OffsetCommit{Partition: p, Offset: off})
		}
	}
	var err error
	for try := 0; try < 3 && ctx.Err() == nil; try++ {
		var resp *kafka.OffsetCommitResponse
		if resp, err = r.commits.OffsetCommit(ctx, req); err == nil {
			return partitionErrors(resp)
		}
		if _, answered := errors.AsType[kafka.Error](err); answered {
			break
		}
	}
	return fmt.Errorf("fresh connection: %w", err)
}

// partitionErrors joins the per-partition errors of a commit's response.
func partitionErrors(resp *kafka.OffsetCommitResponse) error {
	var errs []error
	for topic, parts := range resp.Topics {
		for _, p := range parts {
			if p.Error != nil {
				errs = append(errs, fmt.Errorf("fresh connection: %s/%d: %w", topic, p.Partition, p.Error))
			}
		}
	}
	return errors.Join(errs...)
}

// newCommitClient returns the client of commitFresh, with a transport of
// its own (closed by closeCommitClient).
func (r *Runtime) newCommitClient() *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(r.cfg.Brokers...), Timeout: commitTimeout, Transport: r.transport(nil)}
}

func (r *Runtime) closeCommitClient() {
	if r.commits != nil {
		r.commits.Transport.(*kafka.Transport).CloseIdleConnections()
	}
}

// newFetchClient returns the client the partition readers share, with a
// transport of its own (closed by closeFetchClient once they ended): its
// connections are pooled, one per fetch in flight.
func (r *Runtime) newFetchClient() *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(r.cfg.Brokers...), Transport: r.transport(nil)}
}

func (r *Runtime) closeFetchClient() {
	if r.fetches != nil {
		r.fetches.Transport.(*kafka.Transport).CloseIdleConnections()
	}
}

// finalCommit commits through the current generation, bounded by
// commitTimeout.
func (r *Runtime) finalCommit() error {
	g := r.gen.Load()
	if g == nil {
		return nil
	}
	timer := time.NewTimer(commitTimeout)
	defer timer.Stop()
	reply := make(chan error, 1)
	g.final.Store(true)
	select {
	case g.finalReq <- reply:
	case <-g.ended:
		return errGenerationEnded
	case <-timer.C:
		return fmt.Errorf("runtime: final commit: keeper busy for %s", commitTimeout)
	}
	select {
	case err := <-reply:
		return err
	case <-timer.C:
		return fmt.Errorf("runtime: final commit did not finish in %s", commitTimeout)
	}
}
