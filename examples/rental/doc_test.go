package main

import (
	"go/parser"
	"go/token"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/handoff-go/handoff/internal/rental"
)

// TestPackageDocListsFlagsAndTopics: `go doc ./examples/rental` is what a
// user reads before running the service, so the package comment names
// every flag `rental -h` prints and every topic the service consumes.
func TestPackageDocListsFlagsAndTopics(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()
	out, _ := exec.Command(rentalBinary(t), "-h").CombinedOutput() // -h exits 2
	flags := regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(string(out), -1)
	if len(flags) < 20 {
		t.Fatalf("rental -h listed %d flags, want the service's flags:\n%s", len(flags), out)
	}
	for _, m := range flags {
		if !regexp.MustCompile(`(?m)[\s,]-` + regexp.QuoteMeta(m[1]) + `\b`).MatchString(doc) {
			t.Errorf("the package doc of examples/rental does not list -%s", m[1])
		}
	}
	_, topics, ok := strings.Cut(doc, "\nTopics:")
	topics, _, _ = strings.Cut(topics, "\n\n")
	if !ok {
		t.Fatal(`the package doc of examples/rental has no "Topics:" paragraph`)
	}
	for _, topic := range append(rental.Topics(), "handoff-changelog") {
		if !strings.Contains(topics, topic) {
			t.Errorf("the Topics paragraph of examples/rental's doc does not name %q:\n%s", topic, topics)
		}
	}
}
