package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/handoff-go/handoff"
)

// previous is the build of the version before this one (see
// previousCommit), extracted from git and built.
type previous struct {
	commit, bin string
	skip        string // why there is none
	err         error
}

// previousRental builds the previous version's rental once per test
// binary (the test runs once per client).
var previousRental = sync.OnceValue(func() previous {
	git, err := exec.LookPath("git")
	if err != nil {
		return previous{skip: "git is not on PATH: cannot build the previous version"}
	}
	top, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return previous{skip: "not in a git clone: cannot build the previous version"}
	}
	repo := strings.TrimSpace(string(top))
	run := func(args ...string) (string, error) {
		out, err := exec.Command(git, append([]string{"-C", repo}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	changelog, err := os.ReadFile(filepath.Join(repo, "CHANGELOG.md"))
	if err != nil {
		return previous{err: err}
	}
	want, err := previousCommit(string(changelog), handoff.Version, func() (string, error) {
		return run("log", "-1", "--format=%H", "-G", "^const Version = ", "--", "version.go")
	})
	if err != nil {
		return previous{err: err}
	}
	prev, err := run("rev-parse", "--verify", "--quiet", want+"^{commit}")
	if err != nil || prev == "" {
		return previous{skip: "commit " + want + " of the previous version is not in this history (a shallow clone?)"}
	}
	dir, err := os.MkdirTemp("", "rental-previous-")
	if err != nil {
		return previous{err: err}
	}
	archive := exec.Command(git, "-C", repo, "archive", "--format=tar", prev)
	var tarball bytes.Buffer
	archive.Stdout = &tarball
	if err := archive.Run(); err != nil {
		return previous{err: errors.New("git archive " + prev + ": " + err.Error())}
	}
	if err := untar(&tarball, dir); err != nil {
		return previous{err: err}
	}
	bin := filepath.Join(dir, "rental-previous")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./examples/rental")
	build.Dir = dir
	// The go.work of the extracted tree if it has one (its modules), not
	// one the environment names.
	build.Env = append(os.Environ(), "GOWORK=")
	if out, err := build.CombinedOutput(); err != nil {
		return previous{err: errors.New("build the previous version's rental (" + prev + "): " + err.Error() + "\n" + string(out))}
	}
	return previous{commit: prev, bin: bin}
})

// untar extracts the regular files and directories of a tar stream into
// dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if err := errors.Join(err, f.Close()); err != nil {
				return err
			}
		}
	}
}

// fileMark returns the state file's format mark (1 for none) and the
// features it lists, read with bbolt directly.
func fileMark(t *testing.T, path string) (format int, features []string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	format = 1
	err = db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		if v := meta.Get([]byte("format")); len(v) == 1 {
			format = int(v[0])
		}
		c := meta.Cursor()
		for k, _ := c.Seek([]byte("feature/")); k != nil && bytes.HasPrefix(k, []byte("feature/")); k, _ = c.Next() {
			features = append(features, strings.TrimPrefix(string(k), "feature/"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return format, features
}

// TestProcessRollback: a rollback by one version on a file the newer
// version wrote. This build runs under load and is stopped with a drain
// too short to finish, so the state file holds the records it saved;
// then the previous version's binary (built from git) starts on the same
// file. Records of format 2 with no feature are readable by every build
// since the previous one, so it must start, re-push every saved record
// and handle every message: nothing lost. A file that holds what the
// previous build cannot read (a newer format, a feature) must instead be
// refused at start with exit 2 and an error naming it, never a crash loop
// of unnamed errors or quarantined records (exit 1: a state file that
// does not open fails Run). Then this build starts again on the file the
// older one wrote (the roll forward) and stops cleanly. A copy of the
// file marked as a later version with a feature leaves it would (format
// 3, feature "changelog") is refused by the previous version, naming it.
func TestProcessRollback(t *testing.T) {
	t.Parallel()
	newer := rentalBinary(t)
	prev := previousRental()
	if prev.skip != "" {
		t.Skip(prev.skip)
	}
	if prev.err != nil {
		t.Fatal(prev.err)
	}
	broker := startBroker(t, 2)
	dir := t.TempDir()
	state, effects := filepath.Join(dir, "rental.db"), filepath.Join(dir, "effects.log")
	keys := produceSteadily(context.Background(), t, broker.Addrs(), 3000)
	args := func(work string) []string {
		return []string{"-brokers", broker.Addr(), "-group", "rental-rollback", "-state", state,
			"-drain-timeout", "50ms", "-work", work, "-effects", effects}
	}

	s := startService(t, newer, args("20ms")...)
	waitLines(t, effects, 200, s)
	s.stopOK(t, "this version, stopped under load")
	saved := s.report(t).Snapshotted
	if saved == 0 {
		t.Fatalf("this version saved nothing at its stop: nothing for the rollback to read\nstderr:\n%s", s.stderrText())
	}
	format, features := fileMark(t, state)
	t.Logf("this version saved %d records; file format %d, features %v; rolling back to %s", saved, format, features, prev.commit)

	refuseNewer(t, prev.bin, broker.Addr(), state)

	old := startService(t, prev.bin, args("1ms")...)
	if format > 2 || len(features) > 0 {
		// Builds before format 3 name the mark ("file format 03"), later
		// ones each feature they do not know.
		code := old.wait(t)
		names := []string{"file format " + strconv.Itoa(format), fmt.Sprintf("file format %02x", format)}
		named := slices.ContainsFunc(names, func(n string) bool { return strings.Contains(old.stderrText(), n) })
		for _, f := range features {
			named = named || strings.Contains(old.stderrText(), f)
		}
		if code == 0 || !named {
			t.Fatalf("the previous version on a file it cannot read: exit %d, want a failed start with an error naming %v or a feature of %v\nstderr:\n%s",
				code, names, features, old.stderrText())
		}
		return
	}
	waitHandled(t, effects, keys, old, 90*time.Second, " after the rollback")
	old.stopOK(t, "the previous version after the rollback")
	if rep := old.report(t); rep.Repushed != saved || rep.Quarantined != 0 {
		t.Errorf("the previous version re-pushed %d and quarantined %d of the %d saved records", rep.Repushed, rep.Quarantined, saved)
	}

	again := startService(t, newer, args("1ms")...)
	waitFor := time.Now().Add(30 * time.Second)
	for !strings.Contains(again.stderrText(), `msg=running`) {
		if time.Now().After(waitFor) {
			t.Fatalf("this version did not start again on the file the previous one wrote\nstderr:\n%s", again.stderrText())
		}
		time.Sleep(20 * time.Millisecond)
	}
	again.stopOK(t, "this version, rolled forward")
	if missing, lines := missingKeys(t, effects, keys); missing != 0 {
		t.Errorf("%d of %d messages lost (%d effect lines)", missing, len(keys), lines)
	}
}

// refuseNewer copies the state file at path, marks the copy as a later
// version marks a file with a feature's records (format 3 and its
// feature key), and checks that bin refuses it at start, naming what it
// cannot read, and leaves it as it was.
func refuseNewer(t *testing.T, bin, broker, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(t.TempDir(), "newer.db")
	if err := os.WriteFile(newer, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(newer, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		return errors.Join(meta.Put([]byte("format"), []byte{3}),
			meta.Put([]byte("feature/changelog"), []byte("changelog checkpoints in bucket changelog, since handoff 0.3.0")))
	})
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	s := startService(t, bin, "-brokers", broker, "-group", "rental-rollback", "-state", newer)
	code := s.wait(t)
	if code == 0 || !(strings.Contains(s.stderrText(), "file format 03") || strings.Contains(s.stderrText(), "changelog")) {
		t.Fatalf("the previous version on a file with a newer feature: exit %d, want a failed start naming the format or the feature\nstderr:\n%s", code, s.stderrText())
	}
	if f, features := fileMark(t, newer); f != 3 || len(features) != 1 {
		t.Errorf("the refused file changed: format %d, features %v", f, features)
	}
	t.Logf("the previous version refused a file of a later feature: exit %d, %s", code, lastLine(s.stderrText()))
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// previousCommit returns the commit of the version before this one, to
// roll back to, from CHANGELOG.md's text and version, this build's
// handoff.Version. A release changes handoff.Version in one commit (its
// tree is the release), turns the Unreleased entry into the release's and
// writes into the entry of the release before it the commit that one
// shipped ("Last commit: HASH."). So while the CHANGELOG's first entry is
// version's own (the tree is the release), the previous version is the
// commit its entry below names; once an Unreleased entry is back on top,
// it is version itself, the commit that last changed handoff.Version,
// which lastVersionChange returns.
func previousCommit(changelog, version string, lastVersionChange func() (string, error)) (string, error) {
	headings := regexp.MustCompile(`(?m)^## (\S+)`).FindAllStringSubmatchIndex(changelog, -1)
	if len(headings) == 0 {
		return "", errors.New("CHANGELOG.md has no version entry")
	}
	first := changelog[headings[0][2]:headings[0][3]]
	switch {
	case first == "Unreleased":
		c, err := lastVersionChange()
		if err != nil || c == "" {
			return "", fmt.Errorf("no commit sets handoff.Version %s (%v)", version, err)
		}
		return c, nil
	case first != version:
		return "", fmt.Errorf("CHANGELOG.md's first entry is %s, not Unreleased nor this build's version %s", first, version)
	case len(headings) < 2:
		return "", fmt.Errorf("CHANGELOG.md has no entry before %s", version)
	}
	end := len(changelog)
	if len(headings) > 2 {
		end = headings[2][0]
	}
	below := changelog[headings[1][0]:end]
	m := regexp.MustCompile(`Last commit: ([0-9a-f]{7,40})`).FindStringSubmatch(below)
	if m == nil {
		return "", fmt.Errorf("CHANGELOG.md's entry %s names no \"Last commit: HASH\": the release of %s must write the commit it shipped", changelog[headings[1][2]:headings[1][3]], version)
	}
	return m[1], nil
}

// TestPreviousCommit: the rollback tests find the previous version in
// CHANGELOG.md while the tree is a release, and take the release commit
// itself once work toward the next one is under Unreleased.
func TestPreviousCommit(t *testing.T) {
	last := func() (string, error) { return "abc1234", nil }
	for _, tc := range []struct {
		name, changelog, version, want, err string
	}{
		{"a release", "# Changelog\n\n## 0.3.0\n\n- x\n\n## 0.2.0\n\nLast commit: f238c0d.\n\n- y\n\n## 0.1.0\n\nLast commit: 62855fb.\n", "0.3.0", "f238c0d", ""},
		{"work after a release", "## Unreleased\n\n- z\n\n## 0.3.0\n\n## 0.2.0\n\nLast commit: f238c0d.\n", "0.3.0", "abc1234", ""},
		{"the entry below names none", "## 0.3.0\n\n## 0.2.0\n\n- y\n\n## 0.1.0\n\nLast commit: 62855fb.\n", "0.3.0", "", "names no"},
		{"a version the changelog does not start with", "## 0.2.0\n\nLast commit: f238c0d.\n", "0.3.0", "", "not Unreleased"},
	} {
		got, err := previousCommit(tc.changelog, tc.version, last)
		if got != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %q, %v; want %q, an error with %q", tc.name, got, err, tc.want, tc.err)
		}
	}
	// This tree's own CHANGELOG.md names a commit to roll back to.
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := previousCommit(string(b), handoff.Version, last); err != nil {
		t.Error(err)
	}
}
