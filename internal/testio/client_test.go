package testio

import (
	"flag"
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

// TestConcurrentOK: the franz-go run goes beside the kafka-go one except
// for benchmarks, -failfast, profiles and traces, and with SerialEnv.
func TestConcurrentOK(t *testing.T) {
	if !concurrentOK() {
		t.Fatalf("a plain test run (%s unset, no benchmark, profile or -failfast) is not concurrent", SerialEnv)
	}
	for _, f := range []struct{ name, value string }{
		{"test.bench", "."}, {"test.failfast", "true"}, {"test.cpuprofile", "cpu.out"}, {"test.trace", "trace.out"},
	} {
		old := flag.Lookup(f.name).Value.String()
		if err := flag.Set(f.name, f.value); err != nil {
			t.Fatal(err)
		}
		if concurrentOK() {
			t.Errorf("-%s=%s: concurrent", f.name, f.value)
		}
		flag.Set(f.name, old)
	}
	t.Setenv(SerialEnv, "1")
	if concurrentOK() {
		t.Errorf("%s set: concurrent", SerialEnv)
	}
}
