package handoff_test

import (
	"os"
	"os/exec"
	"testing"
)

// TestDeployModule runs the tests of the nested module deploy/ (the
// Kubernetes manifests, the alert rules and the dashboard, checked
// against the Kubernetes API types, Prometheus' parsers and a real
// runtime's metrics), which go test ./... at the root does not reach: it
// is a module of its own so that the library's go.mod stays small. It is
// not in go.work (its Kubernetes and Prometheus requirements would raise
// the versions every workspace module builds with) and finds the library
// by its own replace directive, so it runs with GOWORK=off. It needs the
// go command and the deploy module's dependencies (.ci/run downloads
// them: GOWORK=off go -C deploy mod download).
func TestDeployModule(t *testing.T) {
	t.Parallel() // each runs its own go test: together they take the longer of the two
	if testing.Short() {
		t.Skip("-short: not running the deploy module's tests")
	}
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: cannot run the deploy module's tests (go -C deploy test ./...)")
	}
	if _, err := os.Stat("deploy/go.mod"); err != nil {
		t.Fatalf("no deploy module: %v", err)
	}
	inputs(t, ".")
	cmd := exec.Command(gotool, "-C", "deploy", "test", "./...")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("GOWORK=off go -C deploy test ./...: %v\n%s", err, out)
	}
	t.Logf("GOWORK=off go -C deploy test ./...:\n%s", out)
}
