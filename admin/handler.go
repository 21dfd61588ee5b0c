package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/handoff-go/handoff/runtime"
)

// ErrConfig is wrapped by every error [NewHandler] returns for bad
// arguments.
var ErrConfig = errors.New("admin: invalid options")

// Options configures the handler [NewHandler] returns.
type Options struct {
	// Token is the secret that mutating endpoints (requeue, discard,
	// pause, resume) require: as "Authorization: Bearer <token>" on the
	// API, through the dashboard's login form on the page. It also grants
	// what ReadToken does. Empty means mutating endpoints are disabled and
	// answer 403.
	Token string

	// ReadToken, when set, is required (or Token) by the endpoints that
	// show messages: /api/dead, /api/dead/{key}, /api/parked,
	// /api/delayed, and the dashboard's dead letters, parked keys and
	// delayed messages (a login with it makes a read-only session).
	// Probes, metrics and /api/classes stay open, but /api/classes and
	// the dashboard show the classes' hold reasons and last handler
	// errors (text that can carry message data) only with it. Empty
	// means reading needs no token: then bind the handler to a trusted
	// interface only.
	ReadToken string

	// Gatherer is served on /metrics, usually the prometheus.Registry
	// passed to the runtime as Config.Registerer. Nil means /metrics
	// answers 404.
	Gatherer prometheus.Gatherer

	// Logger receives one record per request: method, path, status and
	// duration; at Debug for the probes and /metrics whatever they
	// answer, and for other reads that succeed; at Info for writes and
	// client errors; at Warn for a 503, at Error for another 5xx. Nil
	// means discard.
	Logger *slog.Logger

	// Refresh is how often the dashboard reloads itself (it skips a
	// reload while an input field has the focus). Zero means 5s; negative
	// means never.
	Refresh time.Duration

	// ReadTimeout, WriteTimeout and IdleTimeout are the http.Server's
	// timeouts when [Serve] serves this handler: how long a request may
	// take to arrive, its body included (bodies are at most
	// [MaxBodyBytes]); how long from the end of its headers to the end
	// of its answer; how long a kept-alive connection may sit idle. A
	// connection past one is closed. Zero means [DefaultReadTimeout],
	// [DefaultWriteTimeout], [DefaultIdleTimeout]; negative means none.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration

	// MaxPreLogin bounds the requests without a valid token or session
	// (the login form's posts, and the pages and API reads that need no
	// token) that the handler serves at once; more are answered 503 with
	// Retry-After. Requests with a valid bearer token or dashboard
	// session, and the probes and /metrics, are never counted or
	// refused. Zero means [DefaultMaxPreLogin]; negative means no bound.
	MaxPreLogin int
}

// handler serves the admin endpoints of one runtime.
type handler struct {
	rt        *runtime.Runtime
	log       *slog.Logger
	token     []byte
	readToken []byte
	// fails limits failed token attempts per client (limit.go).
	fails failLimiter
	// sessions are the dashboard's logins (auth.go).
	sessions sessionStore
	// preLogin holds a slot per request without a valid token or
	// session being served; nil means no bound.
	preLogin chan struct{}
	// timeouts are Options' server timeouts, for Serve.
	timeouts serverTimeouts
	// probesOnly: serve the probes and metrics only (NewProbeHandler).
	probesOnly bool
	// metricsH serves /metrics; nil without a Gatherer.
	metricsH http.Handler
	refresh  time.Duration
	mux      *http.ServeMux
	csrf     *http.CrossOriginProtection
}

// NewHandler returns the admin handler of rt: probes, metrics, the JSON
// API and the dashboard (see the package doc). It reads rt's state on
// each request and is safe for concurrent use; it may serve before
// [runtime.Runtime.Run] starts and after it returns (endpoints that need
// the state file then answer 503). Mount it at the root of a server, or
// under a prefix with [http.StripPrefix] ("/admin", no trailing slash).
func NewHandler(rt *runtime.Runtime, opts Options) (http.Handler, error) {
	return newHandler(rt, opts, false)
}

// NewProbeHandler returns a handler of rt's probes and metrics only:
// /livez, /healthz, /readyz and /metrics (opts.Gatherer), none of which
// shows a message or needs a token. Serve it on an address the kubelet
// and Prometheus reach, and [NewHandler]'s on a trusted one (or behind
// a ReadToken). Only opts.Gatherer, opts.Logger and the timeouts are
// used.
func NewProbeHandler(rt *runtime.Runtime, opts Options) (http.Handler, error) {
	return newHandler(rt, Options{Gatherer: opts.Gatherer, Logger: opts.Logger,
		ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout, IdleTimeout: opts.IdleTimeout}, true)
}

func newHandler(rt *runtime.Runtime, opts Options, probesOnly bool) (http.Handler, error) {
	var errs []error
	if rt == nil {
		errs = append(errs, fmt.Errorf("%w: nil runtime", ErrConfig))
	}
	for name, tok := range map[string]string{"Token": opts.Token, "ReadToken": opts.ReadToken} {
		if tok != "" && (strings.TrimSpace(tok) != tok ||
			strings.ContainsFunc(tok, func(r rune) bool { return r < 0x20 || r == 0x7f })) {
			errs = append(errs, fmt.Errorf("%w: %s must not have control characters or surrounding spaces", ErrConfig, name))
		}
	}
	if opts.Token != "" && opts.Token == opts.ReadToken {
		errs = append(errs, fmt.Errorf("%w: ReadToken must differ from Token", ErrConfig))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h := &handler{
		rt:         rt,
		log:        opts.Logger,
		token:      []byte(opts.Token),
		readToken:  []byte(opts.ReadToken),
		refresh:    opts.Refresh,
		mux:        http.NewServeMux(),
		csrf:       http.NewCrossOriginProtection(),
		probesOnly: probesOnly,
		timeouts:   serverTimeouts{read: opts.ReadTimeout, write: opts.WriteTimeout, idle: opts.IdleTimeout},
	}
	switch {
	case probesOnly || opts.MaxPreLogin < 0:
	case opts.MaxPreLogin == 0:
		h.preLogin = make(chan struct{}, DefaultMaxPreLogin)
	default:
		h.preLogin = make(chan struct{}, opts.MaxPreLogin)
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.log = h.log.With("component", "admin")
	if opts.Gatherer != nil {
		h.metricsH = promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{})
	}
	if h.refresh == 0 {
		h.refresh = 5 * time.Second
	}
	h.routes()
	return h, nil
}

// routes registers every endpoint, and for each path a fallback that
// answers 405 with Allow and a JSON body: a pattern with a method is more
// specific than the same path without one.
func (h *handler) routes() {
	table := []route{
		{"GET", "/livez", h.livez},
		{"GET", "/healthz", h.livez},
		{"GET", "/readyz", h.readyz},
		{"GET", "/metrics", h.metrics},
	}
	if !h.probesOnly {
		table = append(table, h.apiRoutes()...)
	}
	h.register(table)
}

// route is one endpoint: a method, a mux pattern and its handler.
type route struct {
	method, path string
	fn           http.HandlerFunc
}

// apiRoutes are the endpoints besides the probes and metrics.
func (h *handler) apiRoutes() []route {
	return []route{
		{"GET", "/api/classes", h.apiClasses},
		{"GET", "/api/dead", h.apiDeadList},
		{"POST", "/api/dead/requeue", h.apiBulkRequeue},
		{"POST", "/api/dead/discard", h.apiBulkDiscard},
		{"GET", "/api/dead/ops", h.apiOps},
		{"GET", "/api/dead/ops/{id}", h.apiOp},
		{"POST", "/api/dead/ops/{id}/cancel", h.apiOpCancel},
		{"GET", "/api/dead/{key}", h.apiDeadGet},
		{"POST", "/api/dead/{key}/requeue", h.apiRequeue},
		{"POST", "/api/dead/{key}/discard", h.apiDiscard},
		{"POST", "/api/classes/{name}/pause", h.apiPause},
		{"POST", "/api/classes/{name}/resume", h.apiResume},
		{"GET", "/api/parked", h.apiParked},
		{"GET", "/api/delayed", h.apiDelayed},
		{"GET", "/{$}", h.dashboard},
		{"POST", "/ui/login", h.uiLogin},
		{"POST", "/ui/logout", h.uiLogout},
		{"POST", "/ui/dead/requeue", h.uiBulkRequeue},
		{"POST", "/ui/dead/discard", h.uiBulkDiscard},
		{"POST", "/ui/dead/ops/{id}/cancel", h.uiOpCancel},
		{"POST", "/ui/dead/{key}/requeue", h.uiRequeue},
		{"POST", "/ui/dead/{key}/discard", h.uiDiscard},
		{"POST", "/ui/classes/{name}/pause", h.uiPause},
		{"POST", "/ui/classes/{name}/resume", h.uiResume},
	}
}

// register adds table to the mux, with the fallbacks routes describes.
func (h *handler) register(table []route) {
	allowed := map[string][]string{}
	var paths []string
	for _, rt := range table {
		h.mux.HandleFunc(rt.method+" "+rt.path, rt.fn)
		if _, ok := allowed[rt.path]; !ok {
			paths = append(paths, rt.path)
		}
		allowed[rt.path] = append(allowed[rt.path], rt.method)
		if rt.method == "GET" {
			allowed[rt.path] = append(allowed[rt.path], "HEAD")
		}
	}
	// A fallback without a method would conflict with a route whose
	// pattern also matches its path (/api/dead/ops and GET
	// /api/dead/{key}): such a path gets one per method instead, where
	// that conflicts with nothing, and the catch-all answers the rest.
	patterns := make([][2]string, 0, len(table))
	for _, rt := range table {
		patterns = append(patterns, [2]string{rt.method, rt.path})
	}
	add := func(method, path string, fn http.HandlerFunc) bool {
		for _, q := range patterns {
			if conflict(method, path, q[0], q[1]) {
				return false
			}
		}
		patterns = append(patterns, [2]string{method, path})
		if method != "" {
			path = method + " " + path
		}
		h.mux.HandleFunc(path, fn)
		return true
	}
	for _, p := range paths {
		allow := strings.Join(slices.Sorted(slices.Values(allowed[p])), ", ")
		notAllowed := func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "admin: method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow)
		}
		if add("", p, notAllowed) {
			continue
		}
		for _, m := range httpMethods {
			if !slices.Contains(allowed[p], m) {
				add(m, p, notAllowed)
			}
		}
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := allowedOn(r.URL.Path, table); allow != "" {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "admin: method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow)
			return
		}
		writeError(w, http.StatusNotFound, "admin: no endpoint %s", r.URL.Path)
	})
}

// allowedOn returns the methods of the routes of table whose patterns
// match path, the most specific only (those with the most literal
// segments), as an Allow header; "" when none matches.
func allowedOn(path string, table []route) string {
	segs := strings.Split(path, "/")
	best := -1
	var methods []string
	for _, rt := range table {
		pat := strings.Split(rt.path, "/")
		if len(pat) != len(segs) {
			continue
		}
		literal := 0
		for i, s := range pat {
			wild := strings.HasPrefix(s, "{") && s != "{$}"
			switch {
			case wild && segs[i] != "", s == "{$}" && segs[i] == "":
			case !wild && s == segs[i]:
				literal++
			default:
				literal = -1
			}
			if literal < 0 {
				break
			}
		}
		switch {
		case literal < 0 || literal < best:
			continue
		case literal > best:
			best, methods = literal, nil
		}
		methods = append(methods, rt.method)
		if rt.method == "GET" {
			methods = append(methods, "HEAD")
		}
	}
	slices.Sort(methods)
	return strings.Join(slices.Compact(methods), ", ")
}

// httpMethods are the methods the per-method fallbacks answer 405 to.
var httpMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// conflict reports whether http.ServeMux refuses the patterns m1 p1 and
// m2 p2 together (a method "" takes every method): they match a request
// in common and neither is more specific than the other, in its method
// and its path alike. Paths are compared segment by segment, a {name}
// matching any one (the table has no {name...} and no trailing slash).
func conflict(m1, p1, m2, p2 string) bool {
	var method int // 1: m1 the more specific, -1: m2, 0: equal
	switch {
	case m1 == m2:
	case m1 == "" || (m1 == "GET" && m2 == "HEAD"):
		method = -1
	case m2 == "" || (m2 == "GET" && m1 == "HEAD"):
		method = 1
	default:
		return false // no request has both methods
	}
	s1, s2 := strings.Split(p1, "/"), strings.Split(p2, "/")
	if len(s1) != len(s2) {
		return false
	}
	wild := func(s string) bool { return strings.HasPrefix(s, "{") && s != "{$}" }
	var more1, more2 bool // p1 (p2) has a literal where the other has a wildcard
	for i := range s1 {
		switch w1, w2 := wild(s1[i]), wild(s2[i]); {
		case w1 && w2:
		case w2:
			more1 = true
		case w1:
			more2 = true
		case s1[i] != s2[i]:
			return false // no path matches both
		}
	}
	switch {
	case more1 && more2:
		return true
	case more1:
		return method < 0
	case more2:
		return method > 0
	}
	return method == 0
}

// ServeHTTP bounds the request's body and the requests without a valid
// token or session served at once, hands the request to the mux and
// logs it.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cache-Control", "no-store")
	// Bound on w, not sw: past the bound, MaxBytesReader tells the
	// server (through w) to close the connection after the answer
	// instead of reading the rest of the body.
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	h.serve(sw, r)
	status := sw.status
	if status == 0 {
		status = http.StatusOK
	}
	level := slog.LevelDebug
	switch {
	case probePaths[r.URL.Path]:
		// A probe's 503 is its answer (not ready during a rollout, a
		// loop stuck: the runtime logs why), not a failed request.
	case status == http.StatusServiceUnavailable:
		level = slog.LevelWarn // not running, or too many requests at once
	case status >= 500:
		level = slog.LevelError
	case status >= 400 || (r.Method != http.MethodGet && r.Method != http.MethodHead):
		level = slog.LevelInfo
	}
	h.log.LogAttrs(r.Context(), level, "request", slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.Int("status", status), slog.Duration("took", time.Since(began)))
}

// serve is ServeHTTP but for the log.
func (h *handler) serve(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > MaxBodyBytes {
		w.Header().Set("Connection", "close") // the body is not read
		writeError(w, http.StatusRequestEntityTooLarge, "admin: request body of %d bytes: at most %d", r.ContentLength, MaxBodyBytes)
		return
	}
	if h.preLogin != nil && !probePaths[r.URL.Path] && !h.authenticated(r) {
		select {
		case h.preLogin <- struct{}{}:
			defer func() { <-h.preLogin }()
		default:
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "admin: %d requests without a token or session are in progress already: try again, or send a token", cap(h.preLogin))
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

// probePaths are the endpoints that the pre-login bound never refuses:
// the kubelet and Prometheus send no token.
var probePaths = map[string]bool{"/livez": true, "/healthz": true, "/readyz": true, "/metrics": true}

// parseForm reads r's form (URL-encoded or multipart; the body is at
// most MaxBodyBytes, held in memory). On failure it answers 413 for a
// body over the bound, 400 for a malformed one, and returns false.
func (h *handler) parseForm(w http.ResponseWriter, r *http.Request) bool {
	var err error
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		err = r.ParseMultipartForm(MaxBodyBytes)
	} else {
		err = r.ParseForm()
	}
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return true
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, "admin: form of more than %d bytes", tooBig.Limit)
	default:
		writeError(w, http.StatusBadRequest, "admin: read the form: %v", err)
	}
	return false
}

// statusWriter remembers the status written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// errorJSON is the body of every error response.
type errorJSON struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, errorJSON{Error: fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		// Only our own types are encoded; this is a programmer error.
		status = http.StatusInternalServerError
		b, _ = json.Marshal(errorJSON{Error: "admin: encode response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// livez serves /livez and /healthz: 200 while the runtime's loops turn
// (runtime.Runtime.Alive), 503 naming the stuck ones.
func (h *handler) livez(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := h.rt.Alive(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not alive: %v\n", err)
		return
	}
	w.Write([]byte("ok\n"))
}

func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !h.rt.Ready() {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("not ready\n"))
		return
	}
	w.Write([]byte("ok\n"))
}
