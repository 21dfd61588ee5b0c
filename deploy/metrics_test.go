package deploy

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime"
)

// describing is a Registerer that also keeps the descriptions of what is
// registered on it, so that families with no series yet (a vector with
// no children, a counter of auth errors that never happened) are known.
type describing struct {
	*prometheus.Registry
	descs []*prometheus.Desc
}

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		d.descs = append(d.descs, desc)
	}
	return d.Registry.Register(c)
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

// fqName matches the name in a Desc's String, the only place
// client_golang shows it.
var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// exportedSeries returns the series names the runtime exports, from the
// registry of a real runtime with a Kafka class and a batch class: every
// family registered, and for histograms their _bucket, _sum and _count.
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	reg := &describing{Registry: prometheus.NewRegistry()}
	h := func(context.Context, *handoff.Message) error { return nil }
	_, err := runtime.New(runtime.Config{
		Brokers: []string{"127.0.0.1:1"}, Group: "deploy-test", StatePath: t.TempDir() + "/s.db", Registerer: reg,
		Classes: []runtime.Class{
			{Name: "orders", Topics: []string{"orders"}, Handler: h, Ordered: true},
			{Name: "heartbeats", Topics: []string{"heartbeats"}, BatchHandler: func(context.Context, []*handoff.Message) error { return nil }},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, d := range reg.descs {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no fqName in %s", d)
		}
		names[m[1]] = true
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+suffix] = true
			}
		}
	}
	if len(names) < 20 || !names["handoff_messages_total"] || !names["handoff_build_info"] {
		t.Fatalf("the runtime's registry gave %d names: %v", len(names), slices.Sorted(mapKeys(names)))
	}
	return names
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// promql parses PromQL as Prometheus does.
var promql = parser.NewParser(parser.Options{})

// metricNames returns the metric names expr selects, and an error for a
// selector with no name.
func metricNames(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			bad = fmt.Errorf("selector %s names no metric", vs)
		}
		names = append(names, name)
		return nil
	})
	return names, bad
}

// unknownNames returns the names expr selects that the runtime does not
// export.
func unknownNames(t *testing.T, exported map[string]bool, expr string) []string {
	t.Helper()
	names, err := metricNames(expr)
	if err != nil {
		t.Errorf("parse %q: %v", expr, err)
		return nil
	}
	var unknown []string
	for _, n := range names {
		if !exported[n] {
			unknown = append(unknown, n)
		}
	}
	return unknown
}

// TestUnknownNamesCatches: the check the rules and dashboard tests rely
// on finds a name the runtime does not export, and a histogram suffix on
// a family that is not a histogram.
func TestUnknownNamesCatches(t *testing.T) {
	exported := exportedSeries(t)
	for expr, want := range map[string]string{
		`rate(handoff_nope_total[5m]) > 0`:                               "handoff_nope_total",
		`handoff_ready_bucket`:                                           "handoff_ready_bucket",
		`sum(rate(handoff_handler_duration_seconds_bucket[5m])) by (le)`: "",
	} {
		got := strings.Join(unknownNames(t, exported, expr), ",")
		if got != want {
			t.Errorf("%s: unknown %q, want %q", expr, got, want)
		}
	}
}
