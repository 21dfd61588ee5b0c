package deploy

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// alertCase is one evaluation of an alert, as a `promtool test rules`
// alert_rule_test: series in promqltest's load notation (one sample a
// minute from time 0), the alert evaluated every minute up to at, and
// whether it is then firing.
type alertCase struct {
	name   string
	series string
	at     time.Duration
	firing bool
}

// TestAlertsFire: every alert of prometheus/rules.yaml fires on the
// series of the failure it is for, once its `for` has passed, and stays
// quiet on those of a healthy service (or of a failure too short to
// matter). Each alert has at least one case of each.
func TestAlertsFire(t *testing.T) {
	const (
		healthy = `handoff_build_info{job="rental", instance="a", version="0.3.0", go_version="go1.26", client="franz-go"} 1+0x60
up{job="rental", instance="a"} 1+0x60
`
	)
	cases := map[string][]alertCase{
		"HandoffInstanceDown": {
			{"the process exited 10 minutes ago", `up{job="rental", instance="a"} 1+0x20 0+0x40
handoff_build_info{job="rental", instance="a", version="0.3.0", go_version="go1.26", client="franz-go"} 1+0x20`, 31 * time.Minute, true},
			{"a scrape failed once", `up{job="rental", instance="a"} 1+0x20 0 1+0x40
handoff_build_info{job="rental", instance="a", version="0.3.0", go_version="go1.26", client="franz-go"} 1+0x60`, 30 * time.Minute, false},
			{"another job's target is down", `up{job="node", instance="n"} 0+0x60
` + healthy, 30 * time.Minute, false},
			{"running", healthy, 30 * time.Minute, false},
		},
		"HandoffAbsent": {
			{"nothing exports", `up{job="rental", instance="a"} 0+0x60`, 30 * time.Minute, true},
			{"running", healthy, 30 * time.Minute, false},
		},
		"HandoffRestarting": {
			{"three restarts", `handoff_start_time_seconds{job="rental", instance="a"} 0+0x5 300+0x5 600+0x5 900+0x20`, 25 * time.Minute, true},
			{"one restart (a deploy)", `handoff_start_time_seconds{job="rental", instance="a"} 0+0x10 600+0x30`, 25 * time.Minute, false},
		},
		"HandoffNotReady": {
			{"not ready for 10 minutes", `handoff_ready{job="rental", instance="a"} 1+0x10 0+0x30`, 20 * time.Minute, true},
			{"not ready for 2 minutes (a rebalance)", `handoff_ready{job="rental", instance="a"} 1+0x10 0+0x2 1+0x30`, 13 * time.Minute, false},
		},
		"HandoffConsumerLagGrowing": {
			{"lag grows for 40 minutes", `handoff_consumer_lag_messages{job="rental", instance="a", topic="orders", partition="0"} 0+100x60`, 40 * time.Minute, true},
			{"lag high but falling", `handoff_consumer_lag_messages{job="rental", instance="a", topic="orders", partition="0"} 10000-100x60`, 40 * time.Minute, false},
			{"lag grows but small", `handoff_consumer_lag_messages{job="rental", instance="a", topic="orders", partition="0"} 0+10x60`, 40 * time.Minute, false},
		},
		"HandoffOldestUnsettledTooOld": {
			{"a message held for 10 minutes", `handoff_oldest_unsettled_age_seconds{job="rental", instance="a", class="orders"} 0+60x30
handoff_drain_timeout_seconds{job="rental", instance="a"} 30+0x30`, 15 * time.Minute, true},
			{"messages settle", `handoff_oldest_unsettled_age_seconds{job="rental", instance="a", class="orders"} 1+0x30
handoff_drain_timeout_seconds{job="rental", instance="a"} 30+0x30`, 15 * time.Minute, false},
		},
		"HandoffDeadLetters": {
			{"two dead letters", `handoff_messages_total{job="rental", instance="a", class="orders", outcome="dead_lettered"} 0+0x10 2+0x10`, 12 * time.Minute, true},
			{"none", `handoff_messages_total{job="rental", instance="a", class="orders", outcome="dead_lettered"} 0+0x20`, 12 * time.Minute, false},
		},
		"HandoffStateRecordsGrowing": {
			{"dead letters pile up for 3 hours", `handoff_state_records{job="rental", instance="a", bucket="dead"} 0+1x240`, 200 * time.Minute, true},
			{"steady", `handoff_state_records{job="rental", instance="a", bucket="dead"} 5+0x240`, 200 * time.Minute, false},
		},
		"HandoffClassPaused": {
			{"paused for 2 hours", `handoff_class_paused{job="rental", instance="a", class="orders"} 1+0x150`, 120 * time.Minute, true},
			{"paused for 10 minutes", `handoff_class_paused{job="rental", instance="a", class="orders"} 1+0x10 0+0x60`, 30 * time.Minute, false},
		},
		"HandoffClassSuspended": {
			{"suspended for 10 minutes", `handoff_class_suspended{job="rental", instance="a", class="orders"} 0+0x5 1+0x20`, 15 * time.Minute, true},
			{"suspended for a minute", `handoff_class_suspended{job="rental", instance="a", class="orders"} 0+0x5 1 0+0x20`, 15 * time.Minute, false},
		},
		"HandoffDrainOverBudget": {
			{"over budget for 20 minutes", `handoff_drain_over_budget{job="rental", instance="a", class="orders"} 1+0x30`, 20 * time.Minute, true},
			{"within budget", `handoff_drain_over_budget{job="rental", instance="a", class="orders"} 0+0x30`, 20 * time.Minute, false},
		},
		"HandoffCommitFailures": {
			{"ten failed commits", `handoff_commit_failures_total{job="rental", instance="a"} 0+0x5 0+2x10`, 12 * time.Minute, true},
			{"one failed commit", `handoff_commit_failures_total{job="rental", instance="a"} 0+0x5 1+0x10`, 12 * time.Minute, false},
		},
		"HandoffFetchErrors": {
			{"errors that do not stop", `handoff_fetch_errors_total{job="rental", instance="a", topic="orders"} 0+60x60`, 30 * time.Minute, true},
			{"a burst at a leader move", `handoff_fetch_errors_total{job="rental", instance="a", topic="orders"} 0+0x5 50+0x60`, 30 * time.Minute, false},
		},
		"HandoffPartitionStuck": {
			{"stuck for 5 minutes", `handoff_stuck_partitions{job="rental", instance="a"} 0+0x3 1+0x10`, 8 * time.Minute, true},
			{"stuck for a minute", `handoff_stuck_partitions{job="rental", instance="a"} 0+0x3 1 0+0x10`, 8 * time.Minute, false},
		},
		"HandoffStateWriteFailures": {
			{"a full disk", `handoff_state_write_failures_total{job="rental", instance="a", target="file"} 0+0x5 3+0x10`, 8 * time.Minute, true},
			{"none", `handoff_state_write_failures_total{job="rental", instance="a", target="file"} 0+0x20`, 8 * time.Minute, false},
		},
		"HandoffStateFileLost": {
			{"the file deleted", `handoff_state_file_lost_total{job="rental", instance="a"} 0+0x5 1+0x10`, 7 * time.Minute, true},
			{"never", `handoff_state_file_lost_total{job="rental", instance="a"} 0+0x20`, 7 * time.Minute, false},
		},
		"HandoffKafkaAuthErrors": {
			{"rotated credentials", `handoff_kafka_auth_errors_total{job="rental", instance="a", step="sasl"} 0+0x5 4+0x10`, 7 * time.Minute, true},
			{"none", `handoff_kafka_auth_errors_total{job="rental", instance="a", step="sasl"} 0+0x20`, 7 * time.Minute, false},
		},
		"HandoffDeadLetterPublishFailures": {
			{"a failed publish", `handoff_dead_letter_publish_failures_total{job="rental", instance="a", class="orders"} 0+0x5 1+0x10`, 8 * time.Minute, true},
			{"none", `handoff_dead_letter_publish_failures_total{job="rental", instance="a", class="orders"} 0+0x20`, 8 * time.Minute, false},
		},
		"HandoffDeadLettersAging": {
			{"a dead letter a day old", `handoff_dead_letter_oldest_age_seconds{job="rental", instance="a", class="orders"} 86000+60x40`, 35 * time.Minute, true},
			{"dead letters an hour old", `handoff_dead_letter_oldest_age_seconds{job="rental", instance="a", class="orders"} 3600+60x40`, 35 * time.Minute, false},
			{"none", `handoff_dead_letter_oldest_age_seconds{job="rental", instance="a", class="orders"} 0+0x40`, 35 * time.Minute, false},
		},
		"HandoffDeadLettersDropped": {
			{"dropped for their age", `handoff_dead_letters_dropped_total{job="rental", instance="a", class="orders", reason="age"} 0+0x5 3+0x10`, 8 * time.Minute, true},
			{"none", `handoff_dead_letters_dropped_total{job="rental", instance="a", class="orders", reason="age"} 0+0x20`, 8 * time.Minute, false},
		},
		"HandoffStateFileNewWithCommits": {
			{"a lost disk", `handoff_state_file_new_with_commits{job="rental", instance="a"} 1+0x10`, 5 * time.Minute, true},
			{"a surviving file", `handoff_state_file_new_with_commits{job="rental", instance="a"} 0+0x10`, 5 * time.Minute, false},
		},
	}
	groups, errs := rulefmt.ParseFile("prometheus/rules.yaml", false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			cs := cases[r.Alert]
			if !slices.ContainsFunc(cs, func(c alertCase) bool { return c.firing }) || !slices.ContainsFunc(cs, func(c alertCase) bool { return !c.firing }) {
				t.Errorf("alert %s needs a case where it fires and one where it does not", r.Alert)
			}
			delete(cases, r.Alert)
			for _, c := range cs {
				t.Run(r.Alert+"/"+c.name, func(t *testing.T) {
					if got := firingAt(t, r, c.series, c.at); got != c.firing {
						t.Errorf("firing at %s = %v, want %v", c.at, got, c.firing)
					}
				})
			}
		}
	}
	for name := range cases {
		t.Errorf("cases for %s, which rules.yaml does not have", name)
	}
}

// firingAt loads series, evaluates r every minute from time 0 to at (as
// Prometheus does with an evaluation_interval of 1m), and reports
// whether r has a firing alert at at.
func firingAt(t *testing.T, r rulefmt.Rule, series string, at time.Duration) bool {
	t.Helper()
	expr, err := promql.ParseExpr(r.Expr)
	if err != nil {
		t.Fatal(err)
	}
	storage := promqltest.LoadedStorage(t, "load 1m\n"+indent(series))
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 1e6)
	query := rules.EngineQueryFunc(engine, storage)
	rule := rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
		labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, slog.New(slog.DiscardHandler))
	for ts := time.Duration(0); ts <= at; ts += time.Minute {
		if _, err := rule.Eval(context.Background(), 0, time.Unix(0, 0).Add(ts), query, nil, 0); err != nil {
			t.Fatalf("evaluating %s at %s: %v", r.Alert, ts, err)
		}
	}
	for _, a := range rule.ActiveAlerts() {
		if a.State == rules.StateFiring {
			return true
		}
	}
	return false
}

// indent indents each line of s for a load command.
func indent(s string) string {
	var b strings.Builder
	for line := range strings.Lines(strings.TrimSpace(s)) {
		b.WriteString("  " + strings.TrimSpace(line) + "\n")
	}
	return b.String()
}
