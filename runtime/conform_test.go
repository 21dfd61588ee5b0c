package runtime

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/handoff-go/handoff/internal/testio"
)

// The conformance suite: every test of this package runs against both
// Kafka clients. TestMain (harness_test.go) runs the tests for kafka-go,
// then runs the test binary again with HANDOFF_TEST_CLIENT=franz-go
// (testio.BothClients); every Runtime a test makes comes from
// newRuntime, which gives its Config the client of the run.

// testClient is the Kafka client this run of the tests uses.
func testClient() Client { return Client(testio.Client()) }

// recycleEnv, set to anything, makes newRuntime set RecycleMessages on
// every class: the package's tests then run every scenario (stops,
// rebalances, failures, parking) with recycled envelopes, and those whose
// handlers keep messages skip (see skipIfRecycled):
//
//	HANDOFF_TEST_RECYCLE=1 go test -race ./runtime/
const recycleEnv = "HANDOFF_TEST_RECYCLE"

// recycleAll reports whether recycleEnv is set.
func recycleAll() bool { return os.Getenv(recycleEnv) != "" }

// skipIfRecycled skips a test whose handler keeps its messages when
// recycleEnv makes every class recycle them.
func skipIfRecycled(t *testing.T) {
	t.Helper()
	if recycleAll() {
		t.Skipf("%s is set: the classes recycle their messages, which this test's handler keeps", recycleEnv)
	}
}

// newRuntime is New with the Config's Client set to the run's client
// when the test left it empty, its GroupProtocol to the run's
// (testio.ProtocolEnv, on franz-go) when the test left that empty too,
// and every class recycling its messages with recycleEnv. Tests call it instead of New (the
// examples, which are documentation, call runtime.New and run on the
// default client); TestTestsUseNewRuntime checks.
func newRuntime(cfg Config) (*Runtime, error) {
	if cfg.Client == "" {
		cfg.Client = testClient()
	}
	if cfg.GroupProtocol == "" && cfg.Client == testClient() {
		cfg.GroupProtocol = GroupProtocol(testio.Protocol())
	}
	if recycleAll() {
		cfg.Classes = slices.Clone(cfg.Classes)
		for i := range cfg.Classes {
			cfg.Classes[i].RecycleMessages = true
		}
	}
	return New(cfg)
}

// onlyClient skips the test unless this run is for client c: for the
// few tests that check one client's internals (its log lines, its
// connections), not the runtime's behaviour. why says what they check.
func onlyClient(t testing.TB, c Client, why string) {
	t.Helper()
	if got := testClient(); got != c {
		t.Skipf("%s only (this run is for %s): %s", c, got, why)
	}
}

// TestTestsUseNewRuntime keeps the suite's promise for tests added
// later: no test file of this package calls New directly (a Runtime made
// so would run on kafka-go in the franz-go run too), except the
// examples.
func TestTestsUseNewRuntime(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasPrefix(name, "example_") || name == "conform_test.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "New" {
					t.Errorf("%s: a test calls New: call newRuntime, which sets the run's Kafka client", fset.Position(call.Pos()))
				}
			}
			return true
		})
	}
}
