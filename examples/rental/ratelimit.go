package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/handoff-go/handoff/runtime"
)

// rateLimitFlag is -rate-limit CLASS=N[,CLASS=N]: each class's
// runtime.Class.RateLimit, N messages a second (the runtime's default
// burst). Repeating the flag adds classes.
type rateLimitFlag map[string]float64

func (f *rateLimitFlag) String() string {
	var parts []string
	for _, class := range slices.Sorted(maps.Keys(*f)) {
		parts = append(parts, class+"="+strconv.FormatFloat((*f)[class], 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}

func (f *rateLimitFlag) Set(s string) error {
	if *f == nil {
		*f = map[string]float64{}
	}
	for part := range strings.SplitSeq(s, ",") {
		class, n, ok := strings.Cut(part, "=")
		if !ok || class == "" {
			return fmt.Errorf("%q: want CLASS=N (messages a second)", part)
		}
		v, err := strconv.ParseFloat(n, 64)
		if err != nil || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return fmt.Errorf("%q: the rate of class %s must be a number of messages a second > 0, got %q", part, class, n)
		}
		if prev, dup := (*f)[class]; dup && prev != v {
			return fmt.Errorf("%q: class %s is limited twice (%v and %v)", part, class, prev, v)
		}
		(*f)[class] = v
	}
	return nil
}

// withRateLimits returns classes with each limited class's RateLimit
// set; a class name that is none of theirs is an error naming it.
func withRateLimits(classes []runtime.Class, limits rateLimitFlag) ([]runtime.Class, error) {
	var names []string
	seen := 0
	for i := range classes {
		names = append(names, classes[i].Name)
		if v, ok := limits[classes[i].Name]; ok {
			classes[i].RateLimit = runtime.RateLimit{PerSecond: v}
			seen++
		}
	}
	if seen < len(limits) {
		for _, class := range slices.Sorted(maps.Keys(limits)) {
			if !slices.Contains(names, class) {
				return nil, fmt.Errorf("-rate-limit: no class %q (the classes are %s)", class, strings.Join(names, ", "))
			}
		}
	}
	return classes, nil
}
