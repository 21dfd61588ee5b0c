// Package admin is handoff's operator surface: an [http.Handler] with
// health and readiness probes, Prometheus metrics, a JSON API over a
// [runtime.Runtime] (per-class stats, dead letters, parked keys, delayed
// messages) and a small server-rendered dashboard.
//
// A service mounts the handler [NewHandler] returns on a listener of its
// own, off by default and on the loopback interface by default ([Listen],
// [Serve]); docs/admin.md in the repository describes every endpoint.
// [NewProbeHandler] serves the probes and metrics alone, for a listener
// the kubelet and Prometheus reach while the rest stays on a trusted one.
//
// # Endpoints
//
//	GET  /livez, /healthz              200 while the runtime's loops turn (Runtime.Alive), else 503 naming the stuck ones
//	GET  /readyz                       200 while Runtime.Ready, else 503 (a stuck partition included)
//	GET  /metrics                      Options.Gatherer in the Prometheus text format
//	GET  /api/classes                  per-class stats (holds' reasons and errors: read token)
//	GET  /api/dead?class=&after=&limit= the group's dead letters with their owners, searched and paged, with the
//	                                   count of matches (read token); also topic, partition, key, key_b64, error,
//	                                   min_attempts, since, until, first_since, first_until (RFC 3339),
//	                                   order=oldest|newest; scope=local for this instance's own only
//	POST /api/dead/requeue             bulk requeue of a selection (the search's parameters, or ids), as a JSON
//	                                   body or a form, with dry_run, rate (per second, group-wide), limit (token)
//	POST /api/dead/discard             bulk discard, the same; more than one needs confirm=true (token)
//	GET  /api/dead/ops                 the group's recent operations: who, when, selection, progress (read token)
//	GET  /api/dead/ops/{id}            one operation's progress, per owner too (read token)
//	POST /api/dead/ops/{id}/cancel     stop an operation; what it did stays done (token)
//	GET  /api/dead/{key}               one dead letter, by its group-wide ID (read token)
//	POST /api/dead/{key}/requeue       hand a dead letter back to its class, through its owner (token)
//	POST /api/dead/{key}/discard       delete a dead letter, through its owner (token)
//	POST /api/classes/{name}/pause     stop a class taking messages, on every instance, until resumed; body {"reason": "..."} (token)
//	POST /api/classes/{name}/resume    end a class's pause or suspension (token)
//	GET  /api/parked                   parked keys of ordered classes (read token)
//	GET  /api/delayed?after=&limit=    delayed messages, in due order (read token)
//	GET  /                             the dashboard
//	POST /ui/login, /ui/logout         the dashboard's session
//	POST /ui/dead/{key}/requeue        the dashboard's buttons (session)
//	POST /ui/dead/{key}/discard
//	POST /ui/dead/requeue              the bulk panel's (form: the search, rate, limit; confirm for a discard)
//	POST /ui/dead/discard
//	POST /ui/dead/ops/{id}/cancel
//	POST /ui/classes/{name}/pause      (form field reason)
//	POST /ui/classes/{name}/resume
//
// Errors are JSON objects {"error": "..."} naming what failed, with the
// status saying why: 400 malformed input (a bulk request also: a
// parameter of another name, a selection over 20,000 without a limit,
// a discard of more than one without confirm=true), 401 a missing or
// wrong token, 403 no token configured, 404 no such dead letter,
// operation, class or path, or a bulk selection of none, 405 a wrong
// method (with Allow), 409 a dead letter that is already requeued, of a
// class the service no longer has, or, through another instance than
// its owner, whose partition nobody owns now or whose owner did not
// answer in time (the error names it), 413 a body over
// [MaxBodyBytes] (or a pause body over 1 KiB), 429 a client over its
// limit of wrong tokens (with Retry-After), 503 a runtime that is not
// running, a read of the group's dead letters or operations that got no
// answer within 20 s, or too many requests without a token or session
// at once (Options.MaxPreLogin, with Retry-After).
//
// # Message bytes in JSON
//
// Message keys, values and header values are []byte and so base64 in JSON
// (null when nil, "" when empty: Kafka tells them apart). Next to each, a
// *_text field ("message_key_text", "value_text", header "value_text")
// holds the same bytes as a string when they are valid UTF-8, and is
// absent otherwise.
//
// # Authentication
//
// Reading needs no token unless Options.ReadToken is set: then the
// endpoints marked "read token" above, and the dashboard's dead letters,
// parked keys and delayed messages, need it or Options.Token (as a bearer
// token, or a dashboard session of either); without one, bind the handler
// to a trusted interface. Every mutating endpoint needs Options.Token
// (the read token gets 401). The API takes it as
// "Authorization: Bearer <token>"; without one it answers 401, with a wrong
// one 401, and when Options.Token is empty 403: mutating is then disabled.
// The dashboard has a login form that sets an HttpOnly, SameSite=Strict
// session cookie: a random ID of a session the handler keeps in memory
// for 12 hours, so the token itself is never stored in the browser,
// logout ends the session on the server (a copied cookie stops working)
// and a restart ends them all. Its form posts are also checked against
// cross-origin requests with [http.CrossOriginProtection]. Tokens are
// compared in constant time. With Options.ReadToken set, /api/classes
// and the dashboard leave out the holds' reasons and last handler errors
// (text that can carry message data) without it.
//
// Wrong tokens (API or login form) are logged at Warn with the client's
// address; after 10 from one address within a minute of its first, that
// address's token attempts get 429 until the minute ends (a proxy in
// front makes every client one address: limit there as well). Past
// 10,000 tracked addresses the oldest is forgotten, so every address is
// limited.
//
// # Limits
//
// Every request body is bounded by [MaxBodyBytes] (413 past it, unread
// when Content-Length says so). [Serve] sets read, write and idle
// timeouts (Options.ReadTimeout, WriteTimeout, IdleTimeout; defaults
// [DefaultReadTimeout], [DefaultWriteTimeout], [DefaultIdleTimeout]),
// and at most Options.MaxPreLogin ([DefaultMaxPreLogin]) requests
// without a valid token or session are served at once.
//
// # Logging
//
// Each request is logged to Options.Logger with its method, path, status
// and duration, never message contents: successful reads at Debug (probes
// and scrapes are frequent), mutations and errors at Info, server errors
// at Error.
package admin
