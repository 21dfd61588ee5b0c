package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/pool"
)

// paceLog records when each handler call of a class began.
type paceLog struct {
	mu sync.Mutex
	at []time.Time
}

func (p *paceLog) note() {
	p.mu.Lock()
	p.at = append(p.at, time.Now())
	p.mu.Unlock()
}

func (p *paceLog) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.at)
}

// rate returns the starts a second from the first start to the last,
// the burst's starts left out (they need no wait), and the span.
func (p *paceLog) rate(burst int) (float64, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	span := p.at[len(p.at)-1].Sub(p.at[0])
	return float64(len(p.at)-burst) / span.Seconds(), span
}

// checkLimit fails the test when more calls started by any time t than
// the limit allows since the first start, with 10% slack and one call
// more: (burst + perSecond×(t-first))×1.1 + 1. The one call is the
// first start's own lateness: the times are the handlers' starts, not
// the tokens', and a first start that a loaded machine delays by a few
// milliseconds brings the next on-time start closer to it than the
// limit's interval (it failed so once in a full -race run: 2 starts
// 14ms apart at 50/s). A limit not kept at all still fails at once.
func (p *paceLog) checkLimit(t *testing.T, perSecond float64, burst int) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, at := range p.at {
		since := at.Sub(p.at[0]).Seconds()
		if most := (float64(burst)+perSecond*since)*1.1 + 1; float64(i+1) > most {
			t.Fatalf("%d calls started within %.3fs of the first; a limit of %v/s with burst %d allows %.1f (10%% slack and one start)",
				i+1, since, perSecond, burst, most)
		}
	}
}

// TestClassRateLimit: a class limited to 50 messages a second, 4
// workers, handles 50 a second (measured over 3 seconds) while an
// unlimited class beside it, fed the same way, runs at its full speed.
// The limited class never starts more than its burst plus 50/s (10%
// slack); the unlimited one is not held to it (well over twice the
// limit). The rates are logged.
func TestClassRateLimit(t *testing.T) {
	t.Parallel()
	const perSecond, limitedN, freeN = 50, 150, 2000
	b := setup(t, 2, "limited", "free")
	var limited, free paceLog
	cfg := b.config(nil, nil)
	for i := range cfg.Classes {
		c := &cfg.Classes[i]
		switch c.Name {
		case "limited":
			c.RateLimit = RateLimit{PerSecond: perSecond}
			c.Handler = func(ctx context.Context, m *handoff.Message) error { limited.note(); b.record(m); return nil }
		case "free":
			c.Handler = func(ctx context.Context, m *handoff.Message) error { free.note(); b.record(m); return nil }
		}
	}
	b.produceTopic("limited", limitedN)
	b.produceTopic("free", freeN)
	rt, wait := startNew(t, cfg)
	waitFor(t, "every message handled", func() bool { return limited.len() == limitedN && free.len() == freeN })
	rep := shutdownAndWait(t, rt, wait)

	got, span := limited.rate(1)
	freeRate, freeSpan := free.rate(0)
	t.Logf("limited: %d messages in %s, %.1f/s (limit %d/s); free: %d in %s, %.0f/s", limitedN, span.Round(time.Millisecond), got,
		perSecond, freeN, freeSpan.Round(time.Millisecond), freeRate)
	limited.checkLimit(t, perSecond, 1)
	if got < 0.75*perSecond {
		t.Errorf("the limited class ran at %.1f/s, far below its %d/s", got, perSecond)
	}
	if freeRate < 2*perSecond {
		t.Errorf("the unlimited class ran at %.1f/s: held to the other class's limit of %d/s", freeRate, perSecond)
	}
	if unique, total := b.counts(); unique != limitedN+freeN || total != unique || rep.Succeeded != uint64(total) {
		t.Errorf("handled %d messages %d times (report: %d succeeded), want each of %d once", unique, total, rep.Succeeded, limitedN+freeN)
	}
}

// produceTopic writes n records to topic, keys spread over 13 values.
func (b *bundle) produceTopic(topic string, n int) int {
	b.t.Helper()
	w := b.writer()
	defer devbroker.CloseWriter(w)
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Topic: topic, Key: fmt.Appendf(nil, "key-%d", i%13), Value: fmt.Appendf(nil, "%s-%d", topic, i)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		b.t.Fatal(err)
	}
	return n
}

// TestClassRateLimitStop: a stop during a rate-limited backlog ends at
// once, its workers waiting for tokens: the drain goes on at the limit
// until DrainTimeout, and the hard stop saves the messages still
// waiting for their tokens as unstarted (none interrupted, as none
// started). Nothing is lost: a second run, unlimited, handles the rest,
// each message once, and the group commits every offset; the second run,
// limited to 50/s, keeps to it from its start, the saved messages it
// re-pushes first included.
func TestClassRateLimitStop(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "slow")
	produced := b.produceTopic("slow", 150)
	var run1, run2 atomic.Int64
	var pace2 paceLog
	second := atomic.Bool{}
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		b.record(m)
		if second.Load() {
			pace2.note()
			run2.Add(1)
		} else {
			run1.Add(1)
		}
		return nil
	}, func(c *Class) {
		c.RateLimit = RateLimit{PerSecond: 10}
		c.QueueSize = 64
	})
	cfg.DrainTimeout = 200 * time.Millisecond
	cfg.HardStopGrace = 2 * time.Second
	rt, wait := startNew(t, cfg)
	c := rt.classes.byName["slow"]
	waitFor(t, "10 handled and a backlog of 40 queued", func() bool { return run1.Load() >= 10 && c.pool.Stats().Queued >= 40 })
	rep1, took := timedStop(t, rt, wait)
	t.Logf("run 1: handled %d, unstarted %d, interrupted %d, saved %d; stop took %s (drain %s, hard stop %s)",
		run1.Load(), rep1.Unstarted, rep1.Interrupted, rep1.Snapshotted, took.Round(time.Millisecond),
		rep1.Drain.Round(time.Millisecond), rep1.HardStop.Round(time.Millisecond))
	if rep1.Interrupted != 0 || rep1.Unstarted < 30 || rep1.Snapshotted != rep1.Unstarted {
		t.Errorf("run 1: %d interrupted, %d unstarted, %d saved; want the backlog (30 or more) saved as unstarted, none interrupted",
			rep1.Interrupted, rep1.Unstarted, rep1.Snapshotted)
	}
	// The backlog would take 3s or more at 10/s: the drain ends at its
	// DrainTimeout, the hard stop at once.
	if rep1.Drain > time.Second || rep1.HardStop > 500*time.Millisecond {
		t.Errorf("the drain took %s (DrainTimeout %s), the hard stop %s: the wait for tokens held them",
			rep1.Drain, cfg.DrainTimeout, rep1.HardStop)
	}
	if int64(rep1.Succeeded) != run1.Load() {
		t.Errorf("run 1: %d succeeded, the handler saw %d", rep1.Succeeded, run1.Load())
	}
	b.checkSavedUncommitted(t, rep1.Snapshotted)

	second.Store(true)
	cfg.Classes[0].RateLimit = RateLimit{PerSecond: 50}
	rt2, wait2 := startNew(t, cfg)
	waitFor(t, "the rest handled and committed", func() bool {
		u, _ := b.counts()
		return u == produced && b.committed() == int64(produced)
	})
	rep2 := shutdownAndWait(t, rt2, wait2)
	unique, total := b.counts()
	committed := b.committed()
	rate2, span2 := pace2.rate(1)
	t.Logf("produced %d; run 1: handled %d, saved %d; run 2: re-pushed %d, handled %d in %s, %.1f/s (limit 50/s); committed %d",
		produced, run1.Load(), rep1.Snapshotted, rep2.Repushed, run2.Load(), span2.Round(time.Millisecond), rate2, committed)
	pace2.checkLimit(t, 50, 1)
	if unique != produced || total != produced {
		t.Errorf("handled %d messages %d times, want each of %d once", unique, total, produced)
	}
	if rep2.Repushed != rep1.Snapshotted {
		t.Errorf("run 2 re-pushed %d, run 1 saved %d", rep2.Repushed, rep1.Snapshotted)
	}
	if committed != int64(produced) {
		t.Errorf("committed %d, produced %d", committed, produced)
	}
}

// TestClassRateLimitRequeue: dead letters requeued all at once run at
// their class's limit, as any start of its handler does: 20 requeued
// at 10/s take about 2s, each handled once.
func TestClassRateLimitRequeue(t *testing.T) {
	t.Parallel()
	const perSecond = 10
	b := setup(t, 1, "jobs")
	produced := b.produceTopic("jobs", 20)
	var failing atomic.Bool
	failing.Store(true)
	var requeued paceLog
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		if failing.Load() {
			return handoff.Permanent(errors.New("dependency down"))
		}
		requeued.note()
		b.record(m)
		return nil
	}, func(c *Class) {
		c.RateLimit = RateLimit{PerSecond: perSecond}
		c.Retry = RetryPolicy{MaxAttempts: 1}
		c.Suspend = SuspendPolicy{After: -1}
	})
	rt, wait := startNew(t, cfg)
	var dead []DeadLetter
	waitFor(t, "every message a dead letter", func() bool {
		var err error
		dead, _, err = rt.DeadLetters("jobs", "", 100)
		return err == nil && len(dead) == produced
	})
	failing.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, dl := range dead {
		if err := rt.Requeue(ctx, dl.Key); err != nil {
			t.Fatalf("Requeue(%s): %v", dl.Key, err)
		}
	}
	waitFor(t, "the requeued handled", func() bool { return requeued.len() == produced })
	waitFor(t, "no dead letter left", func() bool {
		left, _, err := rt.DeadLetters("jobs", "", 100)
		return err == nil && len(left) == 0
	})
	rep := shutdownAndWait(t, rt, wait)
	got, span := requeued.rate(1)
	t.Logf("requeued %d dead letters: handled in %s, %.1f/s (limit %d/s); dead-lettered %d, requeued %d",
		produced, span.Round(time.Millisecond), got, perSecond, rep.DeadLettered, rep.Requeued)
	requeued.checkLimit(t, perSecond, 1)
	if got < 0.75*perSecond {
		t.Errorf("the requeued ran at %.1f/s, far below the limit of %d/s", got, perSecond)
	}
	if unique, total := b.counts(); unique != produced || total != produced {
		t.Errorf("handled %d requeued messages %d times, want each of %d once", unique, total, produced)
	}
	if c := b.committed(); c != int64(produced) {
		t.Errorf("committed %d, produced %d", c, produced)
	}
}

// TestClassRateLimitConfig: New rejects a bad RateLimit, naming the
// class, and fills the burst.
func TestClassRateLimitConfig(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *handoff.Message) error { return nil }
	bh := func(context.Context, []*handoff.Message) error { return nil }
	for _, tc := range []struct {
		limit RateLimit
		want  string
	}{
		{RateLimit{PerSecond: -1}, `class "orders": RateLimit.PerSecond must be a finite number >= 0 (zero means no limit), got -1`},
		{RateLimit{PerSecond: math.Inf(1)}, `class "orders": RateLimit.PerSecond must be a finite number >= 0 (zero means no limit), got +Inf`},
		{RateLimit{PerSecond: 5, Burst: -1}, `class "orders": RateLimit.Burst must not be negative, got -1`},
		{RateLimit{Burst: 3}, `class "orders": RateLimit.Burst (3) needs RateLimit.PerSecond`},
	} {
		_, err := newRuntime(Config{StatePath: t.TempDir() + "/s.db", Classes: []Class{{Name: "orders", Handler: h, RateLimit: tc.limit}}})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RateLimit %+v: New error %v, want %q", tc.limit, err, tc.want)
		}
	}
	cfg, err := Config{StatePath: "s.db", Classes: []Class{
		{Name: "one", Handler: h, RateLimit: RateLimit{PerSecond: 5}},
		{Name: "batch", BatchHandler: bh, MaxBatch: 20, RateLimit: RateLimit{PerSecond: 5}},
		{Name: "free", Handler: h},
	}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []RateLimit{{PerSecond: 5, Burst: 1}, {PerSecond: 5, Burst: 20}, {}} {
		if got := cfg.Classes[i].RateLimit; got != want {
			t.Errorf("class %q: RateLimit %+v, want %+v", cfg.Classes[i].Name, got, want)
		}
	}
}

// TestClassRateLimitBatch: a batch class's limit counts messages, not
// calls, whether its pool makes the batches (each message starts with
// its call) or its middleware puts each message into the batcher (each
// starts in its middleware, its call up to MaxWait later): 300 messages at 100/s with bursts of 10 take
// about 3s, and no call holds more than the burst when the pool makes
// the batches.
func TestClassRateLimitBatch(t *testing.T) {
	t.Parallel()
	for _, mw := range []bool{false, true} {
		name := "pool batches"
		if mw {
			name = "middleware"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const perSecond, burst, n = 100, 10, 300
			b := setup(t, 2, "beats")
			b.produceTopic("beats", n)
			var msgs paceLog
			var biggest atomic.Int64
			cfg := b.config(nil, func(c *Class) {
				c.Handler = nil
				c.BatchHandler = func(ctx context.Context, ms []*handoff.Message) error {
					for _, m := range ms {
						if !mw {
							msgs.note()
						}
						b.record(m)
					}
					for {
						old := biggest.Load()
						if int64(len(ms)) <= old || biggest.CompareAndSwap(old, int64(len(ms))) {
							break
						}
					}
					return nil
				}
				c.MaxBatch, c.MaxWait, c.Workers, c.QueueSize = 50, 20*time.Millisecond, 2, 100
				c.RateLimit = RateLimit{PerSecond: perSecond, Burst: burst}
				if mw {
					// A message starts in its middleware, before it joins a
					// batch: the batch's call comes up to MaxWait later.
					c.Middleware = []handoff.Middleware{func(next handoff.HandlerFunc) handoff.HandlerFunc {
						return func(ctx context.Context, m *handoff.Message) error { msgs.note(); return next(ctx, m) }
					}}
				}
			})
			rt, wait := startNew(t, cfg)
			waitFor(t, "every message handled", func() bool { u, _ := b.counts(); return u == n })
			shutdownAndWait(t, rt, wait)
			got, span := msgs.rate(burst)
			t.Logf("%d messages in %s, %.1f/s (limit %d/s, burst %d); largest call %d", n, span.Round(time.Millisecond), got,
				perSecond, burst, biggest.Load())
			msgs.checkLimit(t, perSecond, burst)
			if got < 0.75*perSecond {
				t.Errorf("%.1f/s, far below the limit of %d/s", got, perSecond)
			}
			if !mw && biggest.Load() > burst {
				t.Errorf("a call of %d messages; the burst is %d", biggest.Load(), burst)
			}
			if unique, total := b.counts(); unique != n || total != n {
				t.Errorf("handled %d messages %d times, want each of %d once", unique, total, n)
			}
		})
	}
}

// TestDrainEstimateRateLimit: the drain estimate of a limited class
// drains at most at its limit: 4 workers of 10ms handlers would drain
// 400 a second, a limit of 20/s makes 100 queued take 5s.
func TestDrainEstimateRateLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limit    float64
		rate     float64
		est      float64
		overBy3s bool
	}{{0, 400, 0.25, false}, {20, 20, 5, true}} {
		c := &class{cfg: Class{Workers: 4, RateLimit: RateLimit{PerSecond: tc.limit}}}
		c.svc.observe(10 * time.Millisecond)
		est, rate, over := c.drainEstimate(pool.Stats{Queued: 100}, 0, 0, 3*time.Second)
		if math.Abs(rate-tc.rate) > 1e-6 || math.Abs(est-tc.est) > 1e-6 || over != tc.overBy3s {
			t.Errorf("limit %v/s: estimate %.3fs at %.1f/s (over %v), want %.3fs at %.1f/s (over %v)",
				tc.limit, est, rate, over, tc.est, tc.rate, tc.overBy3s)
		}
	}
}
