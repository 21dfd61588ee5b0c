package snapshot

import "github.com/handoff-go/handoff/snapshot/internal/store"

// TEMPORARY: the store's transaction and handle, kept (with State's
// embedded *store.Store) so that the tests not yet moved to State's
// methods compile. They go as soon as nothing outside snapshot uses them.
type (
	Tx    = store.Tx
	Store = State // the State, which embeds the store while callers move
)
