package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/handoff-go/handoff/runtime"
)

// shareFlag is -share CLASS[,CLASS]: the classes run on Kafka share
// groups (runtime.Class.ShareGroup), each its own, <group>.<class>.
// Repeating the flag adds classes.
type shareFlag []string

func (f *shareFlag) String() string { return strings.Join(*f, ",") }

func (f *shareFlag) Set(s string) error {
	for class := range strings.SplitSeq(s, ",") {
		if class == "" {
			return fmt.Errorf("%q: want CLASS[,CLASS], e.g. heartbeats,users", s)
		}
		if !slices.Contains(*f, class) {
			*f = append(*f, class)
		}
	}
	return nil
}

// withShare returns classes with each shared class's ShareGroup set to
// <group>.<class>. A shared class retries in place only: its delayed
// redeliveries are dropped (a share group redelivers a released record
// at once). A class name that is none of theirs, or an ordered class (a
// share group keeps no order), is an error naming it.
func withShare(classes []runtime.Class, group string, share shareFlag) ([]runtime.Class, error) {
	var names []string
	for i := range classes {
		c := &classes[i]
		names = append(names, c.Name)
		if !slices.Contains(share, c.Name) {
			continue
		}
		if c.Ordered {
			return nil, fmt.Errorf("-share: class %q is ordered, and a share group hands a key's records to any member in no order", c.Name)
		}
		c.ShareGroup = group + "." + c.Name
		c.Retry.Redeliveries, c.Retry.RedeliveryDelay = 0, 0
	}
	for _, class := range share {
		if !slices.Contains(names, class) {
			return nil, fmt.Errorf("-share: no class %q (the classes are %s)", class, strings.Join(names, ", "))
		}
	}
	return classes, nil
}
