package runtime

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoff-go/handoff/snapshot"
)

// metrics are the runtime's Prometheus metrics, registered on
// Config.Registerer and listed in the package doc. A nil *metrics (no
// Registerer) records nothing.
type metrics struct {
	handler     *prometheus.HistogramVec
	handlerObs  [][numCallEnds]prometheus.Observer // per class, in r.classes.order
	handlerErrs []prometheus.Counter               // per class
	publishFail []prometheus.Counter               // per class
	batch       *prometheus.HistogramVec
	batchObs    []prometheus.Observer // per class, in r.classes.order; nil for non-batch classes
	drainEst    *prometheus.GaugeVec
	overBudget  *prometheus.GaugeVec
	phase       *prometheus.GaugeVec
	snapshotMsg prometheus.Gauge
	lag         *prometheus.GaugeVec
	rebalances  prometheus.Counter
	commitFails prometheus.Counter
	fetchErrs   *prometheus.CounterVec
	newFile     prometheus.Gauge
}

// callEnd is how a handler call ended, the outcome label of
// handoff_handler_duration_seconds.
type callEnd int

const (
	callSucceeded callEnd = iota
	callFailed            // returned an error
	callTimedOut          // returned after the class's Timeout
	callPanicked
	numCallEnds
)

var callEndNames = [numCallEnds]string{"succeeded", "failed", "timed_out", "panicked"}

// callEndOf is how a handler call under ctx ended that panicked, or
// returned err.
func callEndOf(ctx context.Context, panicked bool, err error) callEnd {
	switch {
	case panicked:
		return callPanicked
	case err == nil:
		return callSucceeded
	case errors.Is(context.Cause(ctx), ErrHandlerTimeout):
		return callTimedOut
	default:
		return callFailed
	}
}

func newMetrics(reg prometheus.Registerer, r *Runtime) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := newMetricVecs()
	handlerErrs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "handoff_handler_errors_total", Help: "Handler calls that returned an error or panicked, per class.",
	}, []string{"class"})
	publishFail := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "handoff_dead_letter_publish_failures_total", Help: "Dead letters whose write to the class's DeadLetterTopic failed (the state file keeps them).",
	}, []string{"class"})
	cs := m.runtimeCollectors(r, handlerErrs, publishFail)
	for _, c := range r.classes.order {
		cs = append(cs, m.classCollectors(r, c, handlerErrs, publishFail)...)
	}
	// Every series that can be known now exists from the start, at 0, so
	// that rate() and alerts see the first increase.
	for _, c := range r.classes.order {
		m.drainEst.WithLabelValues(c.cfg.Name)
		m.overBudget.WithLabelValues(c.cfg.Name)
	}
	for _, t := range r.classes.topics {
		m.fetchErrs.WithLabelValues(t)
	}
	var errs []error
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// newMetricVecs returns the metrics with their vectors made.
func newMetricVecs() *metrics {
	return &metrics{
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "handoff_handler_duration_seconds", Help: "Time handler calls take, per class and outcome (succeeded, failed, timed_out, panicked): one call in 8 of a message class (its count is about an eighth of the calls; handoff_messages_total and handoff_handler_errors_total count them all), every batch call of a batch class.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"class", "outcome"}),
		batch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "handoff_batch_messages", Help: "Messages per call of a batch class's handler.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}, []string{"class"}),
		drainEst: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "handoff_drain_estimate_seconds", Help: "How long the class's queued and running work would take to drain, running handlers counted by the time they have run so far.",
		}, []string{"class"}),
		overBudget: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "handoff_drain_over_budget", Help: "1 when the class's drain estimate exceeds DrainTimeout: a stop now would snapshot part of its queue.",
		}, []string{"class"}),
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "handoff_stop_phase_duration_seconds", Help: "Duration of each phase of the last stop.",
		}, []string{"phase"}),
		snapshotMsg: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "handoff_snapshot_messages", Help: "Messages saved to the state file by the last stop.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "handoff_consumer_lag_messages", Help: "Messages between the partition's end (last stable offset; high watermark with ReadUncommitted) and the group's committed offset, for the partitions this instance holds; sampled every CommitInterval.",
		}, []string{"topic", "partition"}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handoff_rebalances_total", Help: "Consumer group generations of this instance that ended in a rebalance.",
		}),
		commitFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handoff_commit_failures_total", Help: "Offset commits that failed (each is retried at the next one).",
		}),
		fetchErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_fetch_errors_total", Help: "Failed fetches, per topic (each is retried with backoff).",
		}, []string{"topic"}),
		newFile: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "handoff_state_file_new_with_commits",
			Help: "1 when this run started on a new (empty) state file while the group already had committed offsets for the configured topics: was a disk lost?",
		}),
	}
}

// runtimeCollectors returns the collectors of the runtime as a whole,
// m's vectors among them.
func (m *metrics) runtimeCollectors(r *Runtime, handlerErrs, publishFail *prometheus.CounterVec) []prometheus.Collector {
	cs := []prometheus.Collector{m.handler, m.batch, handlerErrs, publishFail, m.drainEst, m.overBudget, m.phase, m.snapshotMsg,
		m.lag, m.rebalances, m.commitFails, m.fetchErrs, m.newFile,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_ready", Help: "1 while the runtime is ready: recovered, joined, every topic present, not stopping."},
			func() float64 { return b2f(r.Ready()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_start_time_seconds", Help: "When the runtime was made, in Unix seconds: the counters count since then."},
			func() float64 { return float64(r.life.epoch.UnixNano()) / 1e9 }),
		newStateCollector(r.state),
		newStuckCollector(r.ready.stuck),
		newBuildInfo(r.cfg),
	}
	for i, step := range connSteps {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "handoff_kafka_auth_errors_total", Help: "Connections to the brokers whose TLS handshake or SASL authentication failed, by step.",
			ConstLabels: prometheus.Labels{"step": step},
		}, func() float64 { return float64(r.kafka.cfg.conn.authErrs[i].Load()) }))
	}
	cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "handoff_state_file_lost_total", Help: "Times the state file was found deleted or replaced while running; a deleted one is written back from the open file at once (see the log).",
	}, func() float64 { return float64(r.state.lost.Load()) }))
	for i, target := range writeTargetNames {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "handoff_state_write_failures_total", Help: "Writes of the state that failed, by target: the state file (a full or lost disk), or its changelog topic after the file committed. The message behind a failed write stays uncommitted or runs again after a restart; the log says which.",
			ConstLabels: prometheus.Labels{"target": target},
		}, func() float64 { return float64(r.state.writeFails[i].Load()) }))
	}
	for a, action := range []string{"requeue", "discard"} {
		for o := range numOpOutcomes {
			cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "handoff_dead_letter_ops_total", Help: "Dead letters this instance acted on for the group's dead-letter operations (bulk requeue or discard, and single ones asked through another instance), by action and outcome: done, failed (the requeue or discard failed), skipped (no longer a dead letter, or failed again since the operation was asked).",
				ConstLabels: prometheus.Labels{"action": action, "outcome": opOutcomeNames[o]},
			}, func() float64 { return float64(r.ops.acted[a][o].Load()) }))
		}
	}
	return cs
}

// classCollectors returns class c's collectors and makes its series of
// m's vectors.
func (m *metrics) classCollectors(r *Runtime, c *class, handlerErrs, publishFail *prometheus.CounterVec) []prometheus.Collector {
	var cs []prometheus.Collector
	labels := prometheus.Labels{"class": c.cfg.Name}
	for o := range numEvents {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "handoff_messages_total", Help: "Messages by class and outcome.",
			ConstLabels: prometheus.Labels{"class": c.cfg.Name, "outcome": eventNames[o]},
		}, func() float64 { return float64(c.count(o)) }))
	}
	p := c.pool
	cs = append(cs,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_pool_queued", Help: "Messages waiting for a worker.", ConstLabels: labels},
			func() float64 { return float64(p.Stats().Queued) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_pool_waiting", Help: "Messages waiting out a retry backoff.", ConstLabels: labels},
			func() float64 { return float64(p.Stats().Waiting) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_pool_running", Help: "Handlers running.", ConstLabels: labels},
			func() float64 { return float64(p.Stats().Running) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_pool_workers", Help: "The class's worker bound.", ConstLabels: labels},
			func() float64 { return float64(c.cfg.Workers) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_oldest_unsettled_age_seconds",
			Help:        "Age of the class's oldest Kafka message fetched and neither done nor saved (what holds its partition's commit back); 0 when none.",
			ConstLabels: labels},
			func() float64 { return r.kafka.oldestUnsettled(c).Seconds() }),
	)
	cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_dead_letter_oldest_age_seconds",
		Help:        "Age of the class's oldest dead letter of the partitions this instance owns (since it was saved or last failed), sampled every 30s; 0 when none.",
		ConstLabels: labels},
		func() float64 { return r.retain.oldestAge(c, time.Now()).Seconds() }))
	for i, reason := range []string{dropAge, dropCount} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "handoff_dead_letters_dropped_total",
			Help:        "Dead letters the class's retention dropped from the state (published to its DeadLetterTopic first when it has one), by reason: age (DeadLetterRetention) or count (MaxDeadLetters).",
			ConstLabels: prometheus.Labels{"class": c.cfg.Name, "reason": reason}},
			func() float64 { return float64(r.retain.dropped[c.index][i].Load()) }))
	}
	cs = append(cs, c.hold.Collectors(labels)...)
	var obs [numCallEnds]prometheus.Observer
	for o := range numCallEnds {
		obs[o] = m.handler.WithLabelValues(c.cfg.Name, callEndNames[o])
	}
	m.handlerObs = append(m.handlerObs, obs)
	m.handlerErrs = append(m.handlerErrs, handlerErrs.WithLabelValues(c.cfg.Name))
	m.publishFail = append(m.publishFail, publishFail.WithLabelValues(c.cfg.Name))
	var bo prometheus.Observer
	if c.cfg.BatchHandler != nil {
		bo = m.batch.WithLabelValues(c.cfg.Name)
	}
	m.batchObs = append(m.batchObs, bo)
	return cs
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// stateCollector exports the record counts of the state file's buckets
// as handoff_state_records{bucket}. Tx.Counts walks the buckets, so a
// scrape calls it once for all of them.
type stateCollector struct {
	state *stateFile
	desc  *prometheus.Desc
}

// stateBuckets are the bucket label values of handoff_state_records.
var stateBuckets = []string{snapshot.BucketPending, snapshot.BucketDead, snapshot.BucketParked, snapshot.BucketDelayed}

func newStateCollector(state *stateFile) *stateCollector {
	return &stateCollector{state: state, desc: prometheus.NewDesc("handoff_state_records",
		"Records in the state file, per bucket (pending, dead, parked, delayed).", []string{"bucket"}, nil)}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect reports nothing while the state file is not open.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	if _, err := c.state.get(); err != nil {
		return
	}
	counts, err := c.state.counts()
	if err != nil {
		return
	}
	for _, bucket := range stateBuckets {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[bucket]), bucket)
	}
}

func (m *metrics) observeHandler(i int, o callEnd, d time.Duration) {
	if m != nil {
		m.handlerObs[i][o].Observe(d.Seconds())
		if o != callSucceeded {
			m.handlerErrs[i].Inc()
		}
	}
}

// handlerFailed counts a failed call of class i that was not timed.
func (m *metrics) handlerFailed(i int) {
	if m != nil {
		m.handlerErrs[i].Inc()
	}
}

func (m *metrics) publishFailed(i int) {
	if m != nil {
		m.publishFail[i].Inc()
	}
}

func (m *metrics) rebalanced() {
	if m != nil {
		m.rebalances.Inc()
	}
}

func (m *metrics) stateFileNewWithCommits(yes bool) {
	if m != nil {
		m.newFile.Set(b2f(yes))
	}
}

func (m *metrics) commitFailed() {
	if m != nil {
		m.commitFails.Inc()
	}
}

func (m *metrics) fetchError(topic string) {
	if m != nil {
		m.fetchErrs.WithLabelValues(topic).Inc()
	}
}

func (m *metrics) observeBatch(i, n int) {
	if m != nil && m.batchObs[i] != nil {
		m.batchObs[i].Observe(float64(n))
	}
}

func (m *metrics) setDrainEstimate(cs ClassStats) {
	if m != nil {
		m.drainEst.WithLabelValues(cs.Name).Set(cs.DrainEstimate)
		m.overBudget.WithLabelValues(cs.Name).Set(b2f(cs.OverBudget))
	}
}

func (m *metrics) setPhase(phase string, d time.Duration) {
	if m != nil {
		m.phase.WithLabelValues(phase).Set(d.Seconds())
	}
}

func (m *metrics) setSnapshot(n int) {
	if m != nil {
		m.snapshotMsg.Set(float64(n))
	}
}

func (m *metrics) setLag(topic string, partition int, lag int64) {
	if m != nil {
		m.lag.WithLabelValues(topic, strconv.Itoa(partition)).Set(float64(lag))
	}
}

// dropLag removes the lag series of a partition this instance no longer
// holds.
func (m *metrics) dropLag(topic string, partition int) {
	if m != nil {
		m.lag.DeleteLabelValues(topic, strconv.Itoa(partition))
	}
}
