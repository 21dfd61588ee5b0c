package testio

import (
	"slices"
	"testing"
	"time"
)

// TestSecondRun: the second run gets the first's arguments, with what is
// left of the timeout and its own output files.
func TestSecondRun(t *testing.T) {
	args := []string{"-test.v=true", "-test.run=TestX", "-test.timeout=10m0s", "-test.count=3",
		"-test.coverprofile=/tmp/c.out", "-test.cpuprofile=cpu.out", "-test.paniconexit0", "-test.trace="}
	got := secondRun(args, 4*time.Minute)
	want := []string{"-test.v=true", "-test.run=TestX", "-test.timeout=6m0s", "-test.count=3",
		"-test.coverprofile=/tmp/c.out.franz-go", "-test.cpuprofile=cpu.out.franz-go", "-test.paniconexit0", "-test.trace="}
	if !slices.Equal(got, want) {
		t.Errorf("secondRun(%q)\n= %q\nwant %q", args, got, want)
	}
	// A first run that took all the time leaves the second a second, not
	// a negative (no) timeout; a disabled timeout stays disabled.
	if got := secondRun([]string{"-test.timeout=1m0s"}, 2*time.Minute); !slices.Equal(got, []string{"-test.timeout=1s"}) {
		t.Errorf("overrun: %q", got)
	}
	if got := secondRun([]string{"-test.timeout=0s"}, time.Minute); !slices.Equal(got, []string{"-test.timeout=0s"}) {
		t.Errorf("no timeout: %q", got)
	}
}
