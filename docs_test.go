package handoff_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks checks every relative link of README.md and docs/*.md:
// the file it names exists, and the heading its #anchor names is in that
// file (anchors as GitHub makes them from headings). Links with a scheme
// (https:, mailto:) and links inside code are not checked.
func TestDocLinks(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"README.md", "CHANGELOG.md"}, files...)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a, nil
	}
	checked := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range relativeLinks(string(b)) {
			checked++
			target, anchor, _ := strings.Cut(l.dest, "#")
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", file, l.line, l.dest, path)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				t.Errorf("%s:%d: link %q: an anchor into %s, which is not Markdown", file, l.line, l.dest, path)
				continue
			}
			a, err := anchorsOf(path)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", file, l.line, l.dest, err)
				continue
			}
			if !a[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", file, l.line, l.dest, path, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found in README.md and docs/*.md: the parser is broken")
	}
}

// TestDocLinksParser keeps the link and anchor parsing of TestDocLinks
// honest: links in code are skipped, anchors follow GitHub's rules.
func TestDocLinksParser(t *testing.T) {
	doc := "# Top\n\nSee [a](docs/a.md#x-y), ![img](p.png) and [web](https://x.org).\n" +
		"`[not](code.md)`\n\n```\n[not](fenced.md)\n```\n\n" +
		"## Metrics, drain budget, CLI\n### Share-group classes (Kafka 4.2+, KIP-932)\n## Top\n## `Config.TLS` and *SASL*\n"
	var got []string
	for _, l := range relativeLinks(doc) {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.dest))
	}
	if want := "3:docs/a.md#x-y 3:p.png"; strings.Join(got, " ") != want {
		t.Errorf("links %q, want %q", strings.Join(got, " "), want)
	}
	a := headingAnchors(doc)
	for _, want := range []string{"top", "top-1", "metrics-drain-budget-cli", "share-group-classes-kafka-42-kip-932", "configtls-and-sasl"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
	if a["not"] {
		t.Errorf("an anchor from a fenced block: %v", a)
	}
}

type docLink struct {
	line int
	dest string
}

var linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// relativeLinks returns the inline links of a Markdown text whose
// destination has no scheme, outside fenced blocks and code spans.
func relativeLinks(text string) []docLink {
	var links []docLink
	for i, line := range proseLines(text) {
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			dest := m[1]
			if strings.Contains(dest, "://") || strings.HasPrefix(dest, "mailto:") {
				continue
			}
			links = append(links, docLink{line: i + 1, dest: dest})
		}
	}
	return links
}

// proseLines returns the text's lines with fenced blocks and code spans
// blanked, so that the line numbers stay.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
			continue
		}
		parts := strings.Split(line, "`")
		for j := 1; j < len(parts); j += 2 {
			if j < len(parts)-1 { // an unclosed backtick is no span
				parts[j] = ""
			}
		}
		lines[i] = strings.Join(parts, "`")
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives the text's ATX headings:
// lower case, punctuation dropped, spaces as hyphens, "-1", "-2" on repeats.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimLeft(line, "#")
		if len(line)-len(title) > 6 || (title != "" && title[0] != ' ') {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// TestREADMEUsageCompiles builds the README's usage example, the first Go
// block under "## Usage", as a main package of this module (through an
// overlay: nothing is written to the tree), so that the example a new user
// copies keeps compiling against the API.
func TestREADMEUsageCompiles(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	code, err := usageExample(string(b))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\n"+code), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(root, "internal", "readmeusage", "main.go"): src}})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goCmd, "build", "-overlay", ov, "-o", os.DevNull, "./internal/readmeusage")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's usage example does not build: %v\n%s\n--- the example:\n%s", err, out, code)
	}
}

// usageExample returns the first fenced Go block after the "## Usage"
// heading of a README.
func usageExample(readme string) (string, error) {
	_, after, ok := strings.Cut(readme, "\n## Usage\n")
	if !ok {
		return "", errors.New(`README.md has no "## Usage" section`)
	}
	_, after, ok = strings.Cut(after, "```go\n")
	if !ok {
		return "", errors.New(`README.md's "## Usage" has no Go block`)
	}
	code, _, ok := strings.Cut(after, "\n```")
	if !ok {
		return "", errors.New(`README.md's usage example has no closing fence`)
	}
	return code + "\n", nil
}
