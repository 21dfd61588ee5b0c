package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestDemo runs the whole rental demo (a few seconds): it must exit 0 and
// say that nothing was lost.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes a few seconds")
	}
	t.Parallel()
	r := run(t, "demo")
	if r.code != 0 || !regexp.MustCompile(`(?m)^ +lost +0$`).MatchString(r.stdout) || !strings.Contains(r.stdout, "ok: nothing lost") {
		t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
