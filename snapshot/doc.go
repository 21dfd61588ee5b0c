// Package snapshot is the component of handoff that owns "saved": the
// state file of a service instance (package snapshot/internal/store holds
// its format, buckets and codecs) and what the runtime and the CLI do with
// it.
package snapshot
