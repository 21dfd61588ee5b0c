package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/kclient"
)

// Commits: the keeper goroutine of each generation commits what its
// trackers (tracker.go) have settled, on an interval and as soon as the
// flow stops; the stop's final commit goes through it too.

// Keep commits every CommitInterval, and sooner once the flow stops:
// when a partition has caught up with its end (its last stable offset,
// or high watermark with ReadUncommitted; a transaction's marker counts
// as its record) and everything
// fetched from the caught-up partitions is settled, it commits at once
// (paced by a commitPacer: 10 such commits a second), so after a burst
// the commit follows the last message within milliseconds rather than up
// to a CommitInterval later. Until then it looks again after 1 ms, then
// 2, 4, … up to maxIdlePoll. It also applies a cooperative session's
// assignments and revocations (changes), so only the keeper commits and
// changes the set of partitions.
//
// When end ends (kafka-go ended the generation at a rebalance or a lost
// session; franz-go's client closed) an eager session's keeper stops the
// fetch loops, gives back what they fetched and is not started, commits
// what is settled and returns: kafka-go waits for it to move on. A late
// result of the generation then only marks trackers nobody commits any
// more. A cooperative session's keeper returns at once: its client is
// closed, at the stop's leave, fetching ended at the quiesce and nothing
// can be committed any more. After the stop's final commit it only waits
// for end.
func (g *generation) Keep(end context.Context) {
	defer close(g.ended)
	interval := g.cfg.commitInterval
	t := time.NewTicker(interval)
	defer t.Stop()
	alive := g.cfg.alive.start(fmt.Sprintf("committer of generation %d", g.id.Load()), interval)
	defer alive.end()
	soon := time.NewTimer(0)
	soon.Stop()
	defer soon.Stop()
	var wait time.Duration // until soon looks again; 0 while not armed
	pacer := newCommitPacer(len(g.trackers()), minCommitGap(interval), time.Now())
	commit := func(when string) {
		if g.final.Load() { // the stop's final commit is on its way
			return
		}
		if err := g.commit(); err != nil {
			g.cfg.metrics.commitFailed()
			g.cfg.logs.warn(g.cfg.log, "commit failed", "commit failed; retrying at the next interval", "generation", g.id.Load(), "when", when, "err", err)
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
				if later := pacer.take(time.Now()); later > 0 {
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
			pacer = newCommitPacer(len(g.trackers()), minCommitGap(interval), time.Now())
		case reply := <-g.finalReq:
			err := g.commit()
			if err != nil {
				g.cfg.metrics.commitFailed()
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
			if !g.session.Eager() {
				return
			}
			given := g.k.revoked.Load()
			g.remove(nil, false)
			g.cfg.metrics.rebalanced()
			g.cfg.log.Info("group generation ended", "generation", g.id.Load(), "given_back", g.k.revoked.Load()-given)
			return
		}
	}
}

// apply makes an assignment or a revocation of a cooperative session and
// answers it.
func (g *generation) apply(ch change) {
	defer close(ch.done)
	if g.final.Load() {
		// The stop's final commit is on its way or done: what the
		// membership does now (a close's revocation) changes nothing.
		return
	}
	if len(ch.remove) > 0 {
		g.remove(ch.remove, ch.lost)
		g.cfg.metrics.rebalanced()
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

// commitPacer paces the commits made because the flow stopped, a token
// bucket: one token per gap, up to one per partition, so the partitions
// of a burst that end one after the other are each committed at once,
// while a steady trickle gets one commit per gap.
type commitPacer struct {
	tokens, max float64
	gap         time.Duration
	at          time.Time // of the last refill
}

func newCommitPacer(partitions int, gap time.Duration, now time.Time) *commitPacer {
	n := float64(max(partitions, 1))
	return &commitPacer{tokens: n, max: n, gap: gap, at: now}
}

// take spends a token and returns 0, or returns how long until one is
// there.
func (b *commitPacer) take(now time.Time) time.Duration {
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

// commit commits every partition whose commit point moved, through the
// session (fenced by the membership).
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
	if err := g.session.Commit(offsets); err != nil {
		return fmt.Errorf("runtime: commit offsets of %d partitions in generation %d: %w", len(moved), g.id.Load(), err)
	}
	for i, tr := range moved {
		tr.committedTo(points[i])
	}
	return nil
}

// finalCommit commits through the current generation, bounded by
// commitTimeout.
func (k *consumer) finalCommit() error {
	g := k.gen.Load()
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
		if kclient.Fenced(err) {
			// The group ended the generation during the stop (a
			// rebalance it overlapped): as when the session's end
			// came first.
			return fmt.Errorf("%w: %w", errGenerationEnded, err)
		}
		return err
	case <-timer.C:
		return fmt.Errorf("runtime: final commit did not finish in %s", commitTimeout)
	}
}
