package main

import (
	"fmt"

	"github.com/handoff-go/handoff/runtime"
)

// isolationFlag is the -isolation flag: read_committed or
// read_uncommitted (runtime.Config.IsolationLevel).
type isolationFlag struct{ l runtime.IsolationLevel }

func (f *isolationFlag) String() string { return f.l.String() }

func (f *isolationFlag) Set(s string) error {
	switch s {
	case runtime.ReadCommitted.String():
		f.l = runtime.ReadCommitted
	case runtime.ReadUncommitted.String():
		f.l = runtime.ReadUncommitted
	default:
		return fmt.Errorf("want %s or %s, got %q", runtime.ReadCommitted, runtime.ReadUncommitted, s)
	}
	return nil
}
