package main

import (
	"fmt"

	"github.com/handoff-go/handoff/runtime"
)

// groupProtocolFlag is the -group-protocol flag: classic or consumer
// (runtime.Config.GroupProtocol).
type groupProtocolFlag struct{ p runtime.GroupProtocol }

func (f *groupProtocolFlag) String() string {
	if f.p == "" {
		return string(runtime.GroupProtocolClassic)
	}
	return string(f.p)
}

func (f *groupProtocolFlag) Set(s string) error {
	switch p := runtime.GroupProtocol(s); p {
	case runtime.GroupProtocolClassic, runtime.GroupProtocolConsumer:
		f.p = p
	default:
		return fmt.Errorf("want %s or %s, got %q", runtime.GroupProtocolClassic, runtime.GroupProtocolConsumer, s)
	}
	return nil
}
