package main

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/handoff-go/handoff/snapshot"
)

// sameState fails t when the records of a and b differ in keys.
func sameState(t *testing.T, a, b fileState) {
	t.Helper()
	if !slices.Equal(sortedKeys(a.dead), sortedKeys(b.dead)) || !slices.Equal(sortedKeys(a.pending), sortedKeys(b.pending)) {
		t.Errorf("state changed: dead %v -> %v, pending %v -> %v",
			slices.Sorted(maps.Keys(a.dead)), slices.Sorted(maps.Keys(b.dead)), slices.Sorted(maps.Keys(a.pending)), slices.Sorted(maps.Keys(b.pending)))
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	path := stateFile(t)
	before := readState(t, path)
	good := before.deadID[sortedKeys(before.dead)[0]]
	const unknown1, unknown2 = "0000000000000000-9999", "0000000000000000-8888"

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"show unknown ID", []string{"dead", "show", path, "abc"}, `no dead letter with ID or message ID "abc" in ` + path},
		{"show zero key", []string{"dead", "show", path, "0"}, `no dead letter with ID or message ID "0"`},
		{"show negative key", []string{"dead", "show", path, "--", "-3"}, `no dead letter with ID or message ID "-3"`},
		{"show unknown key", []string{"dead", "show", path, unknown1}, `no dead letter with ID or message ID "` + unknown1 + `" in ` + path},
		{"show bare key", []string{"dead", "show", path, "9999"}, `no dead letter with message ID "9999" in ` + path},
		{"show without key", []string{"dead", "show", path}, "missing ID after STATE"},
		{"show two keys", []string{"dead", "show", path, "1", "2"}, `unexpected argument "2"`},
		{"list without state", []string{"dead", "list"}, "missing STATE"},
		{"list bad limit", []string{"dead", "list", path, "--limit", "0"}, "--limit must be > 0"},
		{"list bad after", []string{"dead", "list", path, "--after", "x"}, `invalid argument "x" for "--after"`},
		{"requeue nothing", []string{"dead", "requeue", path}, "missing ID after STATE (or --all)"},
		{"requeue keys and all", []string{"dead", "requeue", path, good, "--all"}, "give IDs or --all, not both"},
		{"requeue class without all", []string{"dead", "requeue", path, good, "--class", "orders"}, "--class needs --all"},
		{"requeue unknown and good key", []string{"dead", "requeue", path, good, unknown1, unknown2}, "no dead letter with ID " + unknown1 + ", " + unknown2 + " in " + path + "; nothing changed"},
		{"requeue malformed key", []string{"dead", "requeue", path, good, "1x"}, `malformed dead letter ID "1x"`},
		{"requeue bare key", []string{"dead", "requeue", path, "1"}, "1 is a bare key, which may be another state file's"},
		{"discard unknown key", []string{"dead", "discard", path, unknown1, good}, "no dead letter with ID " + unknown1},
		{"discard nothing", []string{"dead", "discard", path}, "missing ID after STATE (or --all)"},
		{"bad lock timeout", []string{"inspect", "--lock-timeout", "0s", path}, "--lock-timeout must be > 0"},
		{"replay without brokers", []string{"replay", path}, "--brokers is required"},
		{"replay bad topic map", []string{"replay", path, "--brokers", "127.0.0.1:1", "--topic", "local"}, `--topic "local": want CLASS=TOPIC`},
		{"replay bad batch", []string{"replay", path, "--brokers", "127.0.0.1:1", "--batch", "0"}, "--batch must be > 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.args...)
			if r.code != exitUsage {
				t.Errorf("exit status %d, want %d; stdout %q stderr %q", r.code, exitUsage, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr does not say %q:\n%s", tc.want, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout: %q", r.stdout)
			}
		})
	}
	sameState(t, before, readState(t, path))
}

func TestMissingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nope.db")
	for _, args := range [][]string{
		{"inspect", path},
		{"dead", "list", path},
		{"dead", "requeue", path, "--all"},
		{"replay", path, "--brokers", "127.0.0.1:1"},
	} {
		r := run(t, args...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "handoff: state file "+path+" does not exist") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a command created %s: %v", path, err)
	}
	dir := t.TempDir()
	if r := run(t, "inspect", dir); r.code != exitFailure || !strings.Contains(r.stderr, "is a directory") {
		t.Errorf("inspect of a directory: %d %q", r.code, r.stderr)
	}
	junk := filepath.Join(dir, "junk.db")
	os.WriteFile(junk, []byte(strings.Repeat("not a bbolt file ", 1000)), 0o600)
	if r := run(t, "inspect", junk); r.code != exitFailure || !strings.Contains(r.stderr, "handoff: snapshot: open "+junk) {
		t.Errorf("inspect of a junk file: %d %q", r.code, r.stderr)
	}
}

// TestLocked: a state file held by another process (a running service)
// is refused by every command that writes with a clear error and exit
// status 1; the commands that only read (inspect, dead list, dead show)
// read a consistent copy of it instead and say so where they can.
func TestLocked(t *testing.T) {
	t.Parallel()
	path := stateFile(t)
	before := readState(t, path)
	st, err := snapshot.Open(path, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"inspect", path},
		{"dead", "list", path},
		{"dead", "show", path, before.deadID[sortedKeys(before.dead)[0]]},
	} {
		r := run(t, append(args, "--lock-timeout", "50ms")...)
		if r.code != 0 || args[0] == "inspect" && !strings.Contains(r.stdout, "read from a consistent copy: a running service holds the file") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	for _, args := range [][]string{
		{"inspect", "--quarantine", path},
		{"dead", "requeue", path, "--all"},
		{"dead", "discard", path, "1"},
		{"replay", path, "--brokers", "127.0.0.1:1"},
	} {
		r := run(t, append(args, "--lock-timeout", "50ms")...)
		want := "handoff: " + path + " is in use by a running service (lock not released within 50ms): " +
			"stop the service first, or use that service's admin API to list, requeue or discard its dead letters\n"
		if r.code != exitFailure || r.stderr != want {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	sameState(t, before, readState(t, path))
}

// TestNotAStateFile: an empty file and another program's bbolt database
// are not state files: every command refuses them, naming the file, and
// the commands that write leave them as they were instead of making
// state files of them.
func TestNotAStateFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "foreign.db")
	db, err := bolt.Open(foreign, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("users"))
		if err != nil {
			return err
		}
		return b.Put([]byte("alice"), []byte("admin"))
	})
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{empty, foreign} {
		before, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"inspect", path},
			{"inspect", "--quarantine", path},
			{"dead", "list", path},
			{"dead", "requeue", path, "--all"},
			{"dead", "discard", path, "--all"},
			{"pause", path, "orders", "--force"},
			{"pause", path, "orders"},
			{"resume", path, "orders"},
			{"rename-class", path, "a", "b"},
			{"replay", path, "--brokers", "127.0.0.1:1"},
		} {
			r := run(t, args...)
			if r.code != exitFailure || !strings.Contains(r.stderr, path) || !strings.Contains(r.stderr, "not a handoff state file") {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
			}
			if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
				t.Fatalf("%v changed %s (%d bytes, was %d): %v", args, path, len(after), len(before), err)
			}
		}
	}
}
