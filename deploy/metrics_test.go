package deploy

import (
	"context"
	"fmt"
	"maps"
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

// descText parses a Desc's String, the only place client_golang shows
// its name and labels: Desc{fqName: "NAME", help: ..., constLabels:
// {k="v",...}, variableLabels: {k,...}}.
var (
	descName     = regexp.MustCompile(`fqName: "([^"]+)"`)
	descConst    = regexp.MustCompile(`constLabels: \{([^}]*)\}`)
	descConstKV  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	descVariable = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

// family is what a series name of the runtime carries: each label, with
// the values seen for a constant label (nil for a variable one: any).
type family map[string]map[string]bool

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"job", "instance", "namespace", "pod"}

// exportedSeries returns the series names the runtime exports, with
// their labels, from the registry of a real runtime with a Kafka class
// and a batch class: every family registered, and for histograms their
// _bucket (with le), _sum and _count.
func exportedSeries(t *testing.T) map[string]family {
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
	names := map[string]family{}
	for _, d := range reg.descs {
		text := d.String()
		m := descName.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no fqName in %s", text)
		}
		f := names[m[1]]
		if f == nil {
			f = family{}
			names[m[1]] = f
		}
		if c := descConst.FindStringSubmatch(text); c != nil {
			for _, kv := range descConstKV.FindAllStringSubmatch(c[1], -1) {
				if f[kv[1]] == nil {
					f[kv[1]] = map[string]bool{}
				}
				f[kv[1]][kv[2]] = true
			}
		}
		if v := descVariable.FindStringSubmatch(text); v != nil && v[1] != "" {
			for _, l := range strings.Split(v[1], ",") {
				f[l] = nil
			}
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			f := family{}
			for k, v := range names[mf.GetName()] {
				f[k] = v
			}
			if suffix == "_bucket" {
				f["le"] = nil
			}
			names[mf.GetName()+suffix] = f
		}
	}
	// up is Prometheus' own series of every target it scrapes: 1 after
	// a good scrape, 0 after a failed one (the process is down).
	names["up"] = family{}
	if len(names) < 20 || names["handoff_messages_total"] == nil || names["handoff_build_info"] == nil {
		t.Fatalf("the runtime's registry gave %d names: %v", len(names), slices.Sorted(maps.Keys(names)))
	}
	return names
}

// promql parses PromQL as Prometheus does.
var promql = parser.NewParser(parser.Options{})

// problems returns what expr selects that the runtime does not export:
// unknown series names, label names a series does not have (besides the
// scrape's target labels), and values of a constant label (class,
// outcome, step...) that the runtime never exports.
func problems(t *testing.T, exported map[string]family, expr string) []string {
	t.Helper()
	e, err := promql.ParseExpr(expr)
	if err != nil {
		t.Errorf("parse %q: %v", expr, err)
		return nil
	}
	var out []string
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
		f, ok := exported[name]
		if !ok {
			out = append(out, "series "+name)
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName || slices.Contains(targetLabels, m.Name) {
				continue
			}
			values, has := f[m.Name]
			switch {
			case !has:
				out = append(out, fmt.Sprintf("label %s of %s", m.Name, name))
			case values != nil && (m.Type == labels.MatchEqual || m.Type == labels.MatchRegexp) &&
				!slices.ContainsFunc(slices.Collect(maps.Keys(values)), m.Matches):
				out = append(out, fmt.Sprintf("%s of %s (values: %v)", m, name, slices.Sorted(maps.Keys(values))))
			}
		}
		return nil
	})
	return out
}

// TestProblemsCatches: the check the rules and dashboard tests rely on
// finds a name the runtime does not export, a histogram suffix on a
// family that is not a histogram, a label a family does not have and an
// outcome the runtime never counts; it passes what the runtime exports.
func TestProblemsCatches(t *testing.T) {
	exported := exportedSeries(t)
	for expr, want := range map[string]string{
		`rate(handoff_nope_total[5m]) > 0`:                                             "series handoff_nope_total",
		`handoff_ready_bucket`:                                                         "series handoff_ready_bucket",
		`handoff_pool_queued{topic="orders"}`:                                          "label topic of handoff_pool_queued",
		`increase(handoff_messages_total{outcome="dead_letter"}[5m])`:                  `outcome="dead_letter" of handoff_messages_total`,
		`sum(rate(handoff_handler_duration_seconds_bucket{job="x", le="+Inf"}[5m]))`:   "",
		`handoff_messages_total{outcome=~"dead_lettered|parked", class="orders"}`:      "",
		`handoff_state_records{bucket="dead"} > ignoring(class) handoff_ready{pod=""}`: "",
	} {
		got := strings.Join(problems(t, exported, expr), "; ")
		if !strings.HasPrefix(got, want) || (want == "" && got != "") {
			t.Errorf("%s: problems %q, want %q", expr, got, want)
		}
	}
}
