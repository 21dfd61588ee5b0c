package admin

import (
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestPackageDocListsEveryEndpoint: the package doc's endpoint table is
// what `go doc ./admin` shows, so it names every route the handler serves.
func TestPackageDocListsEveryEndpoint(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()
	var h handler
	for _, rt := range append(h.apiRoutes(), route{"GET", "/livez", nil}, route{"GET", "/readyz", nil}, route{"GET", "/metrics", nil}) {
		path := strings.TrimSuffix(rt.path, "{$}")
		if path == "/" {
			path = "/   " // the dashboard's row
		}
		found := false
		for line := range strings.Lines(doc) {
			if strings.HasPrefix(strings.TrimSpace(line), rt.method) && strings.Contains(line, path) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("the admin package doc does not list %s %s", rt.method, rt.path)
		}
	}
}
