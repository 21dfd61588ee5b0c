package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/internal/testio"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Every test runs for kafka-go, then for franz-go: the fixture's
	// state file is written by a runtime on the run's client.
	goleak.VerifyTestMain(testio.BothClients(cleanupM{m}),
		// kafka-go's connection pool for its default transport (used by
		// the runtime that builds the fixture) keeps an idle reaper.
		goleak.IgnoreAnyFunction("github.com/segmentio/kafka-go.(*connPool).discover"),
	)
}

// cleanupM removes the shared fixture once the tests ran.
type cleanupM struct{ m *testing.M }

func (c cleanupM) Run() int {
	code := c.m.Run()
	if fixture.dir != "" {
		os.RemoveAll(fixture.dir)
	}
	return code
}

// result is what one in-process run of the CLI printed and returned.
type result struct {
	stdout, stderr string
	code           int
}

// run runs the CLI in-process with args.
func run(t *testing.T, args ...string) result {
	t.Helper()
	return runWith(t, context.Background(), nil, args...)
}

// runWith runs the CLI in-process under ctx; when errW is not nil, stderr
// goes to it too.
func runWith(t *testing.T, ctx context.Context, errW io.Writer, args ...string) result {
	t.Helper()
	var out, errb testio.SyncBuffer
	root := newRootCmd()
	root.SetOut(&out)
	if errW != nil {
		root.SetErr(io.MultiWriter(&errb, errW))
	} else {
		root.SetErr(&errb)
	}
	root.SetIn(strings.NewReader(""))
	code := execute(ctx, root, args)
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// copyFile copies the file at src into t's temp dir and returns the copy's
// path.
func copyFile(t *testing.T, src string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "handoff needs a command"},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"dead without command", []string{"dead"}, "handoff dead needs a command: discard, list, ops, requeue, show"},
		{"unknown flag", []string{"inspect", "--nope", "x.db"}, "unknown flag: --nope"},
		{"inspect without state", []string{"inspect"}, "missing STATE"},
		{"inspect two args", []string{"inspect", "a", "b"}, `unexpected argument "b"`},
		{"demo with args", []string{"demo", "x"}, `handoff demo takes no arguments, got "x"`},
		{"broker bad partitions", []string{"broker", "--partitions", "0"}, "--partitions must be > 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.args...)
			if r.code != exitUsage {
				t.Errorf("exit status %d, want %d; stderr:\n%s", r.code, exitUsage, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "--help' for usage") {
				t.Errorf("stderr does not say %q and point to --help:\n%s", tc.want, r.stderr)
			}
		})
	}
}

func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	r := run(t, "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "replay") || !strings.Contains(r.stdout, "inspect") {
		t.Errorf("--help: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Both print the version the build carries, not "(devel)", with the
	// Go version it was built with.
	want := "handoff version " + handoff.Version + " ("
	for _, args := range [][]string{{"--version"}, {"version"}} {
		r = run(t, args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, want) || !strings.Contains(r.stdout, "go1.") || strings.Contains(r.stdout, "(devel)") {
			t.Errorf("%s: %d %q, want a line starting %q with the Go version", args[0], r.code, r.stdout, want)
		}
	}
}
