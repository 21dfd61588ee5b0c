package handoff_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConformanceClient keeps the conformance suite whole (issue 16):
// a test outside runtime/ (which has newRuntime and its own check) that
// builds a runtime.Config with Brokers, a Runtime that consumes from
// Kafka, sets its Client to the run's (testio.Client()), and its package
// runs its tests for both clients (testio.BothClients in TestMain). The
// examples, which are documentation, run on the default client.
func TestConformanceClient(t *testing.T) {
	fset := token.NewFileSet()
	needs := map[string]string{} // package dir -> a Config with Brokers in it
	both := map[string]bool{}    // package dir -> its TestMain runs both clients
	workspace := map[string]bool{}
	for _, d := range workspaceModules(t, "go.work") {
		workspace[filepath.FromSlash(d)] = true
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() && path != "." && !workspace[path] && fileExists(filepath.Join(path, "go.mod")) {
			return filepath.SkipDir // a module outside the workspace (deploy/): not run per client
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") || strings.HasPrefix(d.Name(), "example_") {
			return nil
		}
		dir := filepath.Dir(path)
		if dir == "runtime" {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(src), "testio.BothClients(") {
			both[dir] = true
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok || !isRuntimeConfig(lit.Type) {
				return true
			}
			keys := map[string]bool{}
			for _, e := range lit.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					if id, ok := kv.Key.(*ast.Ident); ok {
						keys[id.Name] = true
					}
				}
			}
			if keys["Brokers"] {
				needs[dir] = fset.Position(lit.Pos()).String()
				if !keys["Client"] {
					t.Errorf("%s: a runtime.Config with Brokers and no Client: set Client: runtime.Client(testio.Client()), the run's client", fset.Position(lit.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, at := range needs {
		if !both[dir] {
			t.Errorf("%s: package %s consumes from Kafka in its tests (%s) but its TestMain does not run them for both clients (testio.BothClients)", dir, dir, at)
		}
	}
}

// isRuntimeConfig says whether a composite literal's type is
// runtime.Config.
func isRuntimeConfig(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Config" {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "runtime"
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
