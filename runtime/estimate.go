package runtime

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff/pool"
	"github.com/handoff-go/handoff/runtime/internal/service"
)

// serviceTime keeps an exponentially weighted mean of a class's handler
// time. With W workers busy, a class handles W / mean messages per second,
// so queued work Q drains in about Q × mean / W: that is the drain
// estimate, compared with DrainTimeout. The mean, not the observed
// completion rate, is used because an idle or half-busy class completes
// fewer messages than it could.
type serviceTime struct {
	mean atomic.Uint64 // float64 bits, seconds
	// samples counts the observations up to learnSamples: until then
	// every call is timed (learning), so that the estimate knows the
	// handler time after a few calls rather than a few times
	// sampleEvery calls (or, with bad luck, not at all).
	samples atomic.Uint32
}

// learnSamples is how many calls of a class are timed before sampling
// begins.
const learnSamples = 16

// learning reports whether the estimate has seen fewer than learnSamples
// calls: then every call is timed.
func (s *serviceTime) learning() bool { return s.samples.Load() < learnSamples }

// sampleEvery is how often, on average, a handler call is timed: for the
// drain estimate and, with metrics, handoff_handler_duration_seconds.
const sampleEvery = 8

// sample reports whether the call for it should be timed: one call in
// sampleEvery. A fetched message was picked by its fetch loop, which
// counts its records (so gaps in the offsets, such as transaction
// markers, bias nothing); others are drawn from the runtime's per-thread
// random source. Neither costs the workers a contended write, as a
// shared counter would. Every call of a picked message is timed, retries
// included.
func sample(it *item) bool {
	if it.src == fromKafka {
		return it.timed
	}
	return rand.Uint32()%sampleEvery == 0
}

// observe folds one handler time into the mean (weight 1/16 per sample).
func (s *serviceTime) observe(d time.Duration) {
	if s.learning() {
		s.samples.Add(1)
	}
	for {
		old := s.mean.Load()
		m := math.Float64frombits(old)
		x := d.Seconds()
		if old == 0 {
			m = x
		} else {
			m += (x - m) / 16
		}
		if s.mean.CompareAndSwap(old, math.Float64bits(m)) {
			return
		}
	}
}

// meanTime returns the class's mean handler time in seconds, counting
// the handlers running now by the time they have run so far: the larger
// of the returned handlers' mean and the running ones' mean elapsed time.
// A hung class thus shows its hang instead of the mean of the few
// handlers that did return. Zero when nothing is known.
func (c *class) meanTime(running int, runningFor time.Duration) float64 {
	m := math.Float64frombits(c.svc.mean.Load())
	if running > 0 {
		m = max(m, runningFor.Seconds()/float64(running))
	}
	return max(m, 0)
}

// drainEstimate returns how long the class's queued and running work
// would take to drain, in seconds, and whether that exceeds DrainTimeout.
// With Workers busy, queued+running messages drain in (queued+running) ×
// mean / Workers (mean from meanTime). A handler that has run for t so
// far is taken to need at least t more, so the estimate is never less
// than the longest running handler's time: a hang is over budget within
// one DrainTimeout, whatever the other handlers do. A class with a
// RateLimit drains at most at its PerSecond. An ordered class
// whose work sits on few keys drains slower than this: it assumes every
// worker can be busy.
func (c *class) drainEstimate(ps pool.Stats, runningFor, longest, drainTimeout time.Duration) (est, rate float64, over bool) {
	mean := c.meanTime(ps.Running, runningFor)
	if mean <= 0 {
		return 0, 0, false
	}
	rate = float64(c.cfg.Workers) / mean
	if l := c.cfg.RateLimit.PerSecond; l > 0 {
		rate = min(rate, l) // the limit's wait is not handler time
	}
	if n := ps.Queued + ps.Running; n > 0 {
		est = max(float64(n)/rate, longest.Seconds())
	}
	return est, rate, est > drainTimeout.Seconds()
}

// drainWatch checks every class's drain estimate once a second: it sets
// the estimate's gauges and warns, at most every 30s per class, when a
// stop now could not drain it.
type drainWatch struct {
	service.Base                     // run, from Start to Stop
	stats        func() []ClassStats // every class's, estimate included
	metrics      *metrics
	log          *slog.Logger
	drainTimeout time.Duration
	alive        *liveness // the watcher beats on every turn
}

// newDrainWatch returns the runtime's drain watcher.
func (r *Runtime) newDrainWatch() *drainWatch {
	return &drainWatch{stats: r.Stats, metrics: r.metrics, log: r.log, drainTimeout: r.cfg.DrainTimeout, alive: &r.alive}
}

// Start runs the watcher (run) until Stop; see service.Service.
func (w *drainWatch) Start(ctx context.Context) error { return w.StartLoop(ctx, w.run) }

// run checks until ctx ends.
func (w *drainWatch) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	alive := w.alive.start("drain budget watcher", time.Second)
	defer alive.end()
	var last []time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		alive.beat()
		for i, cs := range w.stats() {
			if i == len(last) {
				last = append(last, time.Time{})
			}
			w.metrics.setDrainEstimate(cs)
			if cs.OverBudget && time.Since(last[i]) >= 30*time.Second {
				last[i] = time.Now()
				w.log.Warn("queued work would not drain within DrainTimeout; a stop now would snapshot part of it",
					"class", cs.Name, "queued", cs.Queued, "running", cs.Running, "rate", math.Round(cs.Rate),
					"estimate", time.Duration(cs.DrainEstimate*float64(time.Second)).Round(time.Millisecond),
					"drain_timeout", w.drainTimeout)
			}
		}
	}
}
