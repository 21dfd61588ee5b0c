package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// grafanaVars are the dashboard's variables, replaced by values PromQL
// accepts before parsing.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$job", "rental", "$class", ".*", "${datasource}", "prom")

// labelValues matches a label_values(SELECTOR, LABEL) variable query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// TestDashboard: grafana/handoff.json is a dashboard whose panels each
// have a title, a unique id and queries, and every query (panels and
// variables) parses as PromQL and names only series a real runtime
// exports, none of those set only during the stop (a service's process
// exits right after it, so no scrape sees them: a panel of them stays
// empty).
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana/handoff.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana/handoff.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) < 10 {
		t.Fatalf("dashboard %q (uid %q) with %d panels", d.Title, d.UID, len(d.Panels))
	}
	exported := exportedSeries(t)
	check := func(where, expr string) {
		if u := problems(t, exported, grafanaVars.Replace(expr)); len(u) > 0 {
			t.Errorf("%s selects what the runtime does not export: %v", where, u)
		}
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if p.Title == "" || ids[p.ID] || len(p.Targets) == 0 {
			t.Errorf("panel %d %q: needs a title, a unique id and a query", p.ID, p.Title)
		}
		ids[p.ID] = true
		for _, tg := range p.Targets {
			check("panel "+p.Title+" query "+tg.RefID, tg.Expr)
			for _, atStop := range []string{"handoff_stop_phase_duration_seconds", "handoff_snapshot_messages"} {
				if strings.Contains(tg.Expr, atStop) {
					t.Errorf("panel %q query %s shows %s, which only the stop sets: no scrape sees it", p.Title, tg.RefID, atStop)
				}
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, v.Query)
			continue
		}
		check("variable "+v.Name, m[1])
	}
}
