package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestDemo runs the whole rental demo (a few seconds): it must exit 0,
// say that nothing was lost, and show what it is there to show: its
// mid-load stop saved messages, and the restart re-pushed all of them.
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
}
