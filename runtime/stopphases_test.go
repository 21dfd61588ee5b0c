package runtime

import (
	"slices"
	"testing"
	"time"
)

// TestStopPhasesTable: the stop's table runs the phases in the order of
// docs/design.md, each row records its duration in a Report field of its
// own, and every row has a step.
func TestStopPhasesTable(t *testing.T) {
	want := []string{"quiesce", "drain", "hard_stop", "snapshot", "commit", "leave"}
	var got []string
	var rep Report
	fields := map[*time.Duration]string{}
	for _, ph := range stopPhases {
		got = append(got, ph.name)
		if ph.step == nil {
			t.Errorf("phase %s has no step", ph.name)
		}
		d := ph.took(&rep)
		if other, ok := fields[d]; ok {
			t.Errorf("phases %s and %s record their duration in one field", other, ph.name)
		}
		fields[d] = ph.name
	}
	if !slices.Equal(got, want) {
		t.Fatalf("stop phases %v, want %v", got, want)
	}
	for p, d := range map[stopPhase]*time.Duration{phaseQuiesce: &rep.Quiesce, phaseDrain: &rep.Drain, phaseHardStop: &rep.HardStop,
		phaseSnapshot: &rep.Snapshot, phaseCommit: &rep.Commit, phaseLeave: &rep.Leave} {
		if stopPhases[p].took(&rep) != d {
			t.Errorf("phase %s records its duration in another Report field", stopPhases[p].name)
		}
	}
}
