package handoff_test

import (
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/handoff-go/handoff/internal/testio"
)

// TestWorkspaceModules runs the tests of go.work's other modules (the
// CLI, the OTel plugin, the benchmark, the examples): `go test ./...` at
// the root matches the root module's packages only, workspace or not, so
// this is how the README's `go test -race ./...` reaches them. It runs
// them in one `go test` so that their packages share its parallelism,
// passes -race, -short and an explicit -count on, and stops them (with
// their goroutines dumped) a minute before this test's own deadline. A
// package's lines (ok, FAIL) are in this test's log: go test -v -run
// TestWorkspaceModules . lists them.
func TestWorkspaceModules(t *testing.T) {
	t.Parallel() // each runs its own go test: together they take the longer of the two
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: cannot run the workspace modules' tests")
	}
	dirs := workspaceModules(t, "go.work")
	if len(dirs) == 0 {
		t.Fatal("go.work uses no module but the library's")
	}
	inputs(t, ".")
	args := []string{"test"}
	if testio.RaceEnabled {
		args = append(args, "-race")
	}
	if testing.Short() {
		args = append(args, "-short")
	}
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.count" {
			args = append(args, "-count="+f.Value.String())
		}
	})
	if d, ok := t.Deadline(); ok {
		left := time.Until(d) - time.Minute
		if left < time.Minute {
			t.Fatalf("%s left before the test's deadline: too little to run the workspace modules' tests (raise -timeout)", time.Until(d).Round(time.Second))
		}
		args = append(args, "-timeout="+left.Round(time.Second).String())
	}
	for _, d := range dirs {
		args = append(args, "./"+d+"/...")
	}
	cmd := exec.Command(gotool, args...)
	// The go.work found from here whatever the environment says (with
	// GOWORK=off the other modules' packages are not found from the
	// root), and found again by what the tests run (the rollback tests
	// build an older tree elsewhere, with its own go.work or none).
	cmd.Env = append(os.Environ(), "GOWORK=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("go %s:\n%s", strings.Join(args, " "), out)
}

// TestWorkspaceRequiresLibrary keeps the workspace modules' go.mod valid
// on their own (docs/releasing.md): each requires the library at one
// version, the same for all, with no replace directive (go install
// refuses a module with one, and an importer ignores it), and go.work
// replaces exactly that version with this tree.
func TestWorkspaceRequiresLibrary(t *testing.T) {
	const lib = "github.com/handoff-go/handoff"
	var work goModJSON
	goEditJSON(t, &work, "work", "edit", "-json", "go.work")
	var replaced []string
	for _, r := range work.Replace {
		if r.Old.Path == lib && filepath.Clean(r.New.Path) == "." {
			replaced = append(replaced, r.Old.Version)
		}
	}
	if len(replaced) != 1 || replaced[0] == "" {
		t.Fatalf("go.work replaces %s at versions %q: want one version (the one the workspace modules require) => ./", lib, replaced)
	}
	for _, d := range workspaceModules(t, "go.work") {
		path := filepath.Join(d, "go.mod")
		var mod goModJSON
		goEditJSON(t, &mod, "mod", "edit", "-json", path)
		if want := lib + "/" + d; mod.Module.Path != want {
			t.Errorf("%s: module %s, want %s (its directory)", path, mod.Module.Path, want)
		}
		for _, r := range mod.Replace {
			t.Errorf("%s: replace %s => %s: a released module must not carry one (go.work's replace serves the workspace)", path, r.Old.Path, r.New.Path)
		}
		got := ""
		for _, r := range mod.Require {
			if r.Path == lib {
				got = r.Version
			}
		}
		if got != replaced[0] {
			t.Errorf("%s requires %s %q; go.work replaces %s: they must be the same (docs/releasing.md)", path, lib, got, replaced[0])
		}
	}
}

// goModJSON is the part of `go mod edit -json` and `go work edit -json`
// these tests read.
type goModJSON struct {
	Module  struct{ Path string }
	Use     []struct{ DiskPath string }
	Require []struct{ Path, Version string }
	Replace []struct {
		Old, New struct{ Path, Version string }
	}
}

// goEditJSON runs the go command with args and decodes its JSON into v.
func goEditJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: cannot read go.work and go.mod")
	}
	cmd := exec.Command(gotool, args...)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
}

// workspaceModules returns the directories, relative to the root and
// slash-separated, of the modules the go.work at work uses, but the
// root's.
func workspaceModules(t *testing.T, work string) []string {
	t.Helper()
	var wf goModJSON
	goEditJSON(t, &wf, "work", "edit", "-json", work)
	var dirs []string
	for _, u := range wf.Use {
		if d := filepath.ToSlash(filepath.Clean(u.DiskPath)); d != "." {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// inputs stats every file under dir (but .git) so that go test's result
// cache counts them as this test's inputs: the other modules' tests run
// in a child process the cache cannot see, and a cached pass must not
// hide a change to them or to the library they build on.
func inputs(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			_, err = os.Stat(path)
		}
		return err
	})
	if err != nil {
		t.Fatalf("list the test's inputs: %v", err)
	}
}
