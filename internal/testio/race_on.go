//go:build race

package testio

// RaceEnabled reports whether the test binary was built with -race,
// under which allocation counts are not kept (instrumentation allocates,
// and a sync.Pool drops items at random).
const RaceEnabled = true
