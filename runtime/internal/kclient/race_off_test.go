//go:build !race

package kclient

// raceEnabled reports whether the tests run under -race.
const raceEnabled = false
