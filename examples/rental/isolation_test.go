package main

import (
	"testing"

	"github.com/handoff-go/handoff/runtime"
)

// TestIsolationFlag: -isolation takes read_committed and
// read_uncommitted (read_committed when not given); any other value is a
// usage error, exit status 2 as for every bad flag.
func TestIsolationFlag(t *testing.T) {
	var f isolationFlag
	if f.l != runtime.ReadCommitted || f.String() != "read_committed" {
		t.Fatalf("default: %v %q, want read_committed", f.l, f.String())
	}
	for s, want := range map[string]runtime.IsolationLevel{"read_uncommitted": runtime.ReadUncommitted, "read_committed": runtime.ReadCommitted} {
		if err := f.Set(s); err != nil || f.l != want {
			t.Fatalf("Set(%q): %v, %v; want %v", s, f.l, err, want)
		}
	}
	if err := f.Set("serializable"); err == nil {
		t.Fatal("Set(serializable): no error")
	}
	if code := run([]string{"-brokers", "127.0.0.1:1", "-isolation", "READ_COMMITTED"}); code != 2 {
		t.Fatalf("rental -isolation READ_COMMITTED: exit %d, want 2", code)
	}
}
