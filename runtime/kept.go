package runtime

import (
	"log/slog"

	"github.com/handoff-go/handoff/snapshot"
)

// kept reads what the state file holds as the stop closes it, for
// the stop's last log line: what the next start re-pushes (pending),
// what waits for an operator (dead, quarantine), what waits for its time
// (delayed) or its key (parked), and the file. An operator reading the
// line of a retired instance knows whether its file must be kept or
// replayed.
func (f *stateFile) kept() slog.Attr {
	counts, err := f.counts()
	if err != nil {
		return slog.Group("state_file", "path", f.store.Path(), "err", err)
	}
	return slog.Group("state_file", "path", f.store.Path(),
		"pending", counts[snapshot.BucketPending], "dead", counts[snapshot.BucketDead],
		"delayed", counts[snapshot.BucketDelayed], "parked", counts[snapshot.BucketParked],
		"quarantine", counts[snapshot.BucketQuarantine])
}
