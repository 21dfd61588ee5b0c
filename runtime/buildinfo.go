package runtime

import (
	goruntime "runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoff-go/handoff"
)

// buildInfo exports what runs and how it stops, as constant gauges:
//
//   - handoff_build_info{version,go_version,client}, always 1: the
//     module's [handoff.Version], the Go version it was built with and
//     the Kafka client it consumes with (a dashboard shows which versions
//     a group runs during a rolling deploy);
//   - handoff_drain_timeout_seconds: Config.DrainTimeout, so that alert
//     rules compare ages with the drain budget the instance really has.
type buildInfo struct {
	info, drain prometheus.Metric
}

func newBuildInfo(cfg Config) *buildInfo {
	info := prometheus.NewDesc("handoff_build_info",
		"Always 1; its labels are the handoff version, the Go version and the Kafka client of this instance.",
		nil, prometheus.Labels{"version": handoff.Version, "go_version": goruntime.Version(), "client": string(cfg.Client)})
	drain := prometheus.NewDesc("handoff_drain_timeout_seconds",
		"The configured DrainTimeout: how long a stop lets the pools drain.", nil, nil)
	return &buildInfo{
		info:  prometheus.MustNewConstMetric(info, prometheus.GaugeValue, 1),
		drain: prometheus.MustNewConstMetric(drain, prometheus.GaugeValue, cfg.DrainTimeout.Seconds()),
	}
}

func (b *buildInfo) Describe(ch chan<- *prometheus.Desc) {
	ch <- b.info.Desc()
	ch <- b.drain.Desc()
}

func (b *buildInfo) Collect(ch chan<- prometheus.Metric) {
	ch <- b.info
	ch <- b.drain
}
