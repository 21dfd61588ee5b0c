package runtime

import (
	goruntime "runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoff-go/handoff"
)

// newBuildInfo returns the gauge handoff_build_info, always 1, whose
// labels say what runs: the module's [handoff.Version], the Go version it
// was built with and the Kafka client it consumes with. A dashboard joins
// on it to show which versions a group runs during a rolling deploy.
func newBuildInfo(client Client) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "handoff_build_info",
		Help: "Always 1; its labels are the handoff version, the Go version and the Kafka client of this instance.",
		ConstLabels: prometheus.Labels{
			"version":    handoff.Version,
			"go_version": goruntime.Version(),
			"client":     string(client),
		},
	})
	g.Set(1)
	return g
}
