package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoExampleDeps: the operator CLI depends on no example (issue 21):
// the demo it runs lives in internal/rental, which examples/rental uses
// too.
func TestNoExampleDeps(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, "github.com/handoff-go/handoff/examples/") {
			t.Errorf("cmd/handoff depends on %s", strings.TrimSpace(line))
		}
	}
}
