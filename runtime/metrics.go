package runtime

import (
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
	handlerObs  []prometheus.Observer // per class, in r.order
	batch       *prometheus.HistogramVec
	batchObs    []prometheus.Observer // per class, in r.order; nil for non-batch classes
	drainEst    *prometheus.GaugeVec
	overBudget  *prometheus.GaugeVec
	phase       *prometheus.GaugeVec
	snapshotMsg prometheus.Gauge
	commitLag   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, r *Runtime) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "handoff_handler_duration_seconds", Help: "Time handlers take, per class.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"class"}),
		batch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "handoff_batch_messages", Help: "Messages per call of a batch class's handler.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}, []string{"class"}),
		drainEst: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "handoff_drain_estimate_seconds", Help: "How long the class's queued and running work would take to drain at its recent handling rate.",
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
		commitLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "handoff_commit_lag", Help: "High watermark minus committed offset per partition, as of the last commit.",
		}, []string{"topic", "partition"}),
	}
	cs := []prometheus.Collector{m.handler, m.batch, m.drainEst, m.overBudget, m.phase, m.snapshotMsg, m.commitLag,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "handoff_ready", Help: "1 while the runtime is running and not stopping."},
			func() float64 { return b2f(r.Ready()) }),
		newStateCollector(r),
	}
	for i, step := range connSteps {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "handoff_kafka_auth_errors_total", Help: "Connections to the brokers whose TLS handshake or SASL authentication failed, by step.",
			ConstLabels: prometheus.Labels{"step": step},
		}, func() float64 { return float64(r.conn.authErrs[i].Load()) }))
	}
	for _, c := range r.order {
		labels := prometheus.Labels{"class": c.cfg.Name}
		for o := range numOutcomes {
			cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "handoff_messages_total", Help: "Messages by class and outcome.",
				ConstLabels: prometheus.Labels{"class": c.cfg.Name, "outcome": outcomeNames[o]},
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
		)
		cs = append(cs, c.holdCollectors(labels)...)
		m.handlerObs = append(m.handlerObs, m.handler.WithLabelValues(c.cfg.Name))
		var bo prometheus.Observer
		if c.cfg.BatchHandler != nil {
			bo = m.batch.WithLabelValues(c.cfg.Name)
		}
		m.batchObs = append(m.batchObs, bo)
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

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// stateCollector exports the record counts of the state file's buckets
// as handoff_state_records_{pending,dead,parked,delayed}. Tx.Counts
// walks the buckets, so a scrape calls it once for all four.
type stateCollector struct {
	r     *Runtime
	descs map[string]*prometheus.Desc // bucket -> metric
}

func newStateCollector(r *Runtime) *stateCollector {
	c := &stateCollector{r: r, descs: map[string]*prometheus.Desc{}}
	for bucket, help := range map[string]string{
		snapshot.BucketPending: "Records in the state file's pending bucket.",
		snapshot.BucketDead:    "Dead letters in the state file.",
		snapshot.BucketParked:  "Parked messages in the state file.",
		snapshot.BucketDelayed: "Delayed messages in the state file.",
	} {
		c.descs[bucket] = prometheus.NewDesc("handoff_state_records_"+bucket, help, nil, nil)
	}
	return c
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect reports nothing while the state file is not open.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.r.openStore()
	if err != nil {
		return
	}
	var counts map[string]int
	err = st.View(func(tx *snapshot.Tx) (err error) { counts, err = tx.Counts(); return err })
	if err != nil {
		return
	}
	for bucket, d := range c.descs {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(counts[bucket]))
	}
}

func (m *metrics) observeHandler(i int, d time.Duration) {
	if m != nil {
		m.handlerObs[i].Observe(d.Seconds())
	}
}

func (m *metrics) observeBatch(i, n int) {
	if m != nil && m.batchObs[i] != nil {
		m.batchObs[i].Observe(float64(n))
	}
}

func (m *metrics) setBudget(cs ClassStats) {
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
		m.commitLag.WithLabelValues(topic, strconv.Itoa(partition)).Set(float64(lag))
	}
}
