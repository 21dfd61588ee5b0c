package handoff_test

import (
	"bufio"
	"bytes"
	"go/version"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestGoDirectiveIsOldestNeeded checks that go.mod's go line states the
// oldest Go the module needs: no newer than the newest go line among its
// dependencies (the language features the code itself uses are checked by
// building with that toolchain: see docs/design.md, "Go version"). It
// reads the library's own graph, the one a user's build gets (GOWORK=off:
// the workspace's graph holds the other modules' requirements too).
func TestGoDirectiveIsOldestNeeded(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH")
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{if .Main}}main {{end}}{{.Path}} {{.GoVersion}}", "all")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m all: %v", err)
	}
	var mainGo, needed, neededBy string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "main":
			mainGo = f[2]
		case len(f) == 2:
			if v := "go" + f[1]; needed == "" || version.Compare(v, needed) > 0 {
				needed, neededBy = v, f[0]
			}
		}
	}
	if mainGo == "" {
		t.Fatalf("go list printed no main module:\n%s", out)
	}
	if got := "go" + mainGo; version.Compare(got, needed) != 0 {
		t.Errorf("go.mod says go %s; the dependencies need %s (%s): state the oldest Go the module needs", mainGo, strings.TrimPrefix(needed, "go"), neededBy)
	}
}
