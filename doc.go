// Package handoff holds the small types every part of handoff shares: the
// message envelope that handlers receive, pools run and the state file
// stores, the error helpers a handler returns, typed handlers ([Typed],
// with [JSON] or any [Decoder]) and [Middleware].
//
// The runtime that consumes Kafka lives in package
// github.com/handoff-go/handoff/runtime; this package imports nothing else
// of the project, so the runtime, the pools and the snapshot store can all
// depend on it without cycles (as river keeps rivertype).
package handoff
