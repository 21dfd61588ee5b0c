package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdminTokens: the admin token comes from -admin-token, else
// -admin-token-file (trailing newline dropped), else the environment;
// the read token from its file, else the environment; both flags at
// once, an empty or missing file are errors.
func TestAdminTokens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	adminFile, readFile, empty := file("admin", "from-file\n"), file("read", "read-from-file\r\n"), file("empty", "\n")
	env := func(k string) (string, bool) {
		v, ok := map[string]string{envAdminToken: "from-env", envAdminReadToken: "read-from-env"}[k]
		return v, ok
	}
	noEnv := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		name                string
		flag                string
		o                   opsFlags
		lookup              func(string) (string, bool)
		wantToken, wantRead string
		wantErr             string
	}{
		{name: "flag", flag: "from-flag", lookup: env, wantToken: "from-flag", wantRead: "read-from-env"},
		{name: "files", o: opsFlags{adminTokenFile: adminFile, adminReadTokenFile: readFile}, lookup: env, wantToken: "from-file", wantRead: "read-from-file"},
		{name: "environment", lookup: env, wantToken: "from-env", wantRead: "read-from-env"},
		{name: "none", lookup: noEnv},
		{name: "both", flag: "x", o: opsFlags{adminTokenFile: adminFile}, lookup: env, wantErr: "both set"},
		{name: "empty file", o: opsFlags{adminTokenFile: empty}, lookup: env, wantErr: "is empty"},
		{name: "missing file", o: opsFlags{adminReadTokenFile: filepath.Join(dir, "nope")}, lookup: env, wantErr: "-admin-read-token-file"},
	} {
		tok, read, err := tc.o.tokens(tc.flag, tc.lookup)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.wantErr)
			}
		case err != nil || tok != tc.wantToken || read != tc.wantRead:
			t.Errorf("%s: %q %q %v, want %q %q", tc.name, tok, read, err, tc.wantToken, tc.wantRead)
		}
	}
}
