//go:build race

package runtime

// raceEnabled reports whether the tests run under -race.
const raceEnabled = true
