package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemo runs the whole rental demo (a few seconds): it must exit 0,
// say that nothing was lost, and show what it is there to show: its
// mid-load stop saved messages, and the restart, a new pod on an empty
// state directory, restored them from the changelog and re-pushed all of
// them: produced = handled.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes a few seconds")
	}
	t.Parallel()
	r := run(t, "demo")
	if r.code != 0 || !regexp.MustCompile(`(?m)^ +lost +0$`).MatchString(r.stdout) || !strings.Contains(r.stdout, "ok: nothing lost") {
		t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	count := func(label string) string {
		m := regexp.MustCompile(`(?m)^ +` + label + ` +(\d+)$`).FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("no %q line in\n%s", label, r.stdout)
		}
		return m[1]
	}
	saved, repushed := count("snapshotted at stop"), count("re-pushed at start")
	if saved == "0" || repushed != saved {
		t.Errorf("snapshotted at stop %s, re-pushed at start %s: want the same, above 0\n%s", saved, repushed, r.stdout)
	}
	// Run 2 is a new pod: a new instance on an empty state directory, so
	// what it re-pushed came from the changelog, not from run 1's file.
	pod := regexp.MustCompile(`(?m)^new pod: instance (\S+) on an empty state directory \((\d+) files before its start; run 1's file unused\)\n` +
		`  restored from the changelog: (\d+) records of (\d+) partitions; re-pushed (\d+)$`).FindStringSubmatch(r.stdout)
	if pod == nil {
		t.Fatalf("no line on the new pod's restore in\n%s", r.stdout)
	}
	atoi := func(s string) int { v, _ := strconv.Atoi(s); return v }
	savedN := atoi(saved)
	if pod[1] == "rental-demo-1" || pod[2] != "0" || atoi(pod[3]) < savedN || atoi(pod[4]) == 0 || pod[5] != saved ||
		count("restored from changelog") != pod[3] {
		t.Errorf("the new pod's restore (instance %s, %s files, %s records of %s partitions, re-pushed %s) does not bring back the %d saved messages\n%s",
			pod[1], pod[2], pod[3], pod[4], pod[5], savedN, r.stdout)
	}
	if produced, handled := count("produced"), count("handled"); produced != handled {
		t.Errorf("produced %s, handled %s\n%s", produced, handled, r.stdout)
	}
	// The words match the numbers: every dead letter is told apart, and
	// the outage scene suspended orders and made none.
	n := func(label string) int { v, _ := strconv.Atoi(count(label)); return v }
	if dead, parts := n("dead-lettered"), n("poison")+n("out of attempts")+n("by the outage"); dead != parts {
		t.Errorf("dead-lettered %d, but poison + out of attempts + by the outage = %d\n%s", dead, parts, r.stdout)
	}
	if n("by the outage") != 0 || !strings.Contains(r.stdout, "the outage made 0 dead letters") ||
		!regexp.MustCompile(`suspended [1-9]\d* time\(s\) for \d+\.\ds`).MatchString(r.stdout) {
		t.Errorf("the outage scene did not show a suspension with no dead letter\n%s", r.stdout)
	}
	// The two drain figures say what each is: the configured bound and
	// the phase as measured (issue 23: "drain of 20ms" beside "drain
	// time 39ms" read as a contradiction).
	if !regexp.MustCompile(`(?m)^run 1: .*(the drain, bounded by DrainTimeout \d+ms, ran out with work left|the drain finished within its DrainTimeout of \d+ms);`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^ +drain phase took +[\d.]+[µm]?s$`).MatchString(r.stdout) {
		t.Errorf("the demo does not tell the drain's bound from its measured time\n%s", r.stdout)
	}
	m := regexp.MustCompile(`(\d+) poison messages fail for good`).FindStringSubmatch(r.stdout)
	parked := regexp.MustCompile(`the other (\d+) poison message\(s\) were orders parked`).FindStringSubmatch(r.stdout)
	poison, _ := strconv.Atoi(m[1])
	other := 0
	if parked != nil {
		other, _ = strconv.Atoi(parked[1])
	}
	if poison != n("poison")+other {
		t.Errorf("%d poison messages, but %d poison dead letters and %d parked poison orders\n%s", poison, n("poison"), other, r.stdout)
	}
}
