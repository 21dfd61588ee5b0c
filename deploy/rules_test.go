package deploy

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
)

// TestAlertRules: prometheus/rules.yaml parses as Prometheus parses a
// rules file (unknown fields are errors, every expression and template
// is checked), has the alerts operators need, and every expression names
// only series a real runtime exports.
func TestAlertRules(t *testing.T) {
	groups, errs := rulefmt.ParseFile("prometheus/rules.yaml", false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	exported := exportedSeries(t)
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			alerts = append(alerts, name)
			if u := problems(t, exported, r.Expr); len(u) > 0 {
				t.Errorf("rule %s selects what the runtime does not export: %v", name, u)
			}
			if r.Alert != "" && (r.Annotations["summary"] == "" || r.Annotations["description"] == "" || r.Labels["severity"] == "") {
				t.Errorf("alert %s needs a summary, a description and a severity", name)
			}
		}
	}
	for _, want := range []string{
		"HandoffNotReady", "HandoffConsumerLagGrowing", "HandoffOldestUnsettledTooOld", "HandoffDeadLetters",
		"HandoffStateRecordsGrowing", "HandoffClassPaused", "HandoffClassSuspended", "HandoffDrainOverBudget",
		"HandoffCommitFailures", "HandoffKafkaAuthErrors", "HandoffDeadLetterPublishFailures",
		"HandoffStateFileNewWithCommits", "HandoffInstanceDown", "HandoffAbsent", "HandoffRestarting",
		"HandoffFetchErrors", "HandoffStateWriteFailures", "HandoffStateFileLost",
		"HandoffDeadLettersAging", "HandoffDeadLettersDropped",
	} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s", want)
		}
	}
}
