package runtime

import (
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoff-go/handoff/runtime/internal/kclient"
)

// fetchErrorGap is how long a partition whose fetches failed must go
// without a failure before it counts as fetching again when no success
// said so: franz-go hands on no empty fetch, so an idle partition's
// recovery shows only as its errors stopping. Both clients retry a failed
// fetch well within it (kafka-go waits at most fetchBackoffMax, 5s).
const fetchErrorGap = 15 * time.Second

// stuckParts keeps the partitions this instance owns whose fetch, or
// whose restore from the changelog before the first fetch, fails with no
// success since: one that has failed for longer than after is stuck.
// Readiness, handoff_stuck_partitions and handoff_partition_stuck_seconds
// read it; an ERROR names each stuck partition once per episode.
type stuckParts struct {
	after time.Duration // Config.StuckAfter
	log   *slog.Logger
	// failingN is len(failing): fetched's fast path when nothing fails.
	failingN atomic.Int32

	mu sync.Mutex
	// owned counts the fetch loops of each partition (two generations of
	// an eager client may overlap for a moment): a failure of a
	// partition not owned is not kept.
	owned   map[kclient.Partition]int
	failing map[kclient.Partition]*failing
}

// failing is one partition's episode of failures.
type failing struct {
	since, last time.Time
	// what is whatFetch or whatRestore. Only a success or the
	// partition's end closes a restore episode (its retries are up to
	// restoreRetryMax apart); a fetch episode also closes after
	// fetchErrorGap without a failure.
	what   string
	err    error
	logged bool // the ERROR said it is stuck
}

func newStuckParts(after time.Duration, log *slog.Logger) *stuckParts {
	return &stuckParts{after: after, log: log, owned: map[kclient.Partition]int{}, failing: map[kclient.Partition]*failing{}}
}

// own counts a fetch loop of p beginning; disown its end.
func (s *stuckParts) own(p kclient.Partition) {
	s.mu.Lock()
	s.owned[p]++
	s.mu.Unlock()
}

// disown ends a fetch loop of p counted by own; with the last one p's
// episode, if any, ends.
func (s *stuckParts) disown(p kclient.Partition) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owned[p]--; s.owned[p] > 0 {
		return
	}
	delete(s.owned, p)
	if f := s.failing[p]; f != nil {
		s.closeLocked(p, f, "the partition left this instance")
	}
}

// What an episode is of.
const (
	whatFetch   = "fetch"
	whatRestore = "restore from the changelog"
)

// fetched is the clients' FetchFunc: err nil closes p's fetch episode,
// an error opens or extends it. A restore episode is left as it is: a
// kafka-go reader fetches ahead while the restore waits.
func (s *stuckParts) fetched(p kclient.Partition, err error) {
	if err == nil {
		if s.failingN.Load() == 0 {
			return
		}
		s.succeeded(p, whatFetch)
		return
	}
	s.failed(p, whatFetch, err)
}

// restoreFailed opens or extends p's restore episode.
func (s *stuckParts) restoreFailed(p kclient.Partition, err error) {
	s.failed(p, whatRestore, err)
}

// restored closes p's restore episode, if any.
func (s *stuckParts) restored(p kclient.Partition) { s.succeeded(p, whatRestore) }

// succeeded closes p's episode of what, if any.
func (s *stuckParts) succeeded(p kclient.Partition, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.failing[p]; f != nil && f.what == what {
		s.closeLocked(p, f, "its "+f.what+" succeeded")
	}
}

func (s *stuckParts) failed(p kclient.Partition, what string, err error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owned[p] == 0 {
		return
	}
	f := s.failing[p]
	if f != nil && f.what == whatRestore && what != whatRestore {
		return // the restore's episode goes on until the restore succeeds
	}
	if f != nil && s.lapsed(f, now) {
		s.closeLocked(p, f, "its "+f.what+" stopped failing")
		f = nil
	}
	if f == nil {
		f = &failing{since: now}
		s.failing[p] = f
		s.failingN.Store(int32(len(s.failing)))
	}
	f.last, f.what, f.err = now, what, err
	s.logLocked(p, f, now)
}

// lapsed reports whether f's episode ended by itself: a fetch episode
// with no failure for fetchErrorGap.
func (s *stuckParts) lapsed(f *failing, now time.Time) bool {
	return f.what == whatFetch && now.Sub(f.last) > fetchErrorGap
}

// logLocked logs at ERROR, once per episode, that p is stuck.
func (s *stuckParts) logLocked(p kclient.Partition, f *failing, now time.Time) {
	if f.logged || now.Sub(f.since) < s.after {
		return
	}
	f.logged = true
	s.log.Error("partition stuck: its "+f.what+" has failed for longer than StuckAfter with no success since; the instance is not ready until it succeeds",
		"partition", p.String(), "failing_for", now.Sub(f.since).Round(time.Millisecond), "stuck_after", s.after, "err", f.err)
}

func (s *stuckParts) closeLocked(p kclient.Partition, f *failing, why string) {
	delete(s.failing, p)
	s.failingN.Store(int32(len(s.failing)))
	if f.logged {
		s.log.Info("partition no longer stuck: "+why, "partition", p.String(), "stuck_for", time.Since(f.since).Round(time.Millisecond))
	}
}

// stuck calls fn with each stuck partition and how long it has failed,
// and returns how many there are. It closes the episodes that lapsed
// and logs the ones that became stuck since the last failure.
func (s *stuckParts) stuck(fn func(p kclient.Partition, d time.Duration)) int {
	if s.failingN.Load() == 0 {
		return 0
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for p, f := range s.failing {
		if s.lapsed(f, now) {
			s.closeLocked(p, f, "its "+f.what+" stopped failing")
			continue
		}
		if d := now.Sub(f.since); d >= s.after {
			s.logLocked(p, f, now)
			n++
			if fn != nil {
				fn(p, d)
			}
		}
	}
	return n
}

// any reports whether a partition is stuck.
func (s *stuckParts) any() bool { return s.stuck(nil) > 0 }

// stuckCollector exports handoff_stuck_partitions and, per stuck
// partition, handoff_partition_stuck_seconds.
type stuckCollector struct {
	s           *stuckParts
	count, secs *prometheus.Desc
}

func newStuckCollector(s *stuckParts) *stuckCollector {
	return &stuckCollector{s: s,
		count: prometheus.NewDesc("handoff_stuck_partitions",
			"Partitions this instance owns whose fetch, or restore from the changelog before the first fetch, has failed for longer than StuckAfter with no success since; the instance is not ready while there is one.", nil, nil),
		secs: prometheus.NewDesc("handoff_partition_stuck_seconds",
			"How long a stuck partition (see handoff_stuck_partitions) has failed; only stuck partitions have a series.", []string{"topic", "partition"}, nil),
	}
}

func (c *stuckCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.count; ch <- c.secs }

func (c *stuckCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.s.stuck(func(p kclient.Partition, d time.Duration) {
		ch <- prometheus.MustNewConstMetric(c.secs, prometheus.GaugeValue, d.Seconds(), p.Topic, strconv.Itoa(p.Partition))
	})
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(n))
}
