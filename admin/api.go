package admin

import (
	"context"

	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/internal/recordjson"
	"github.com/handoff-go/handoff/runtime"
)

// Paging bounds of the list endpoints.
const (
	defaultLimit = 100
	maxLimit     = 1000
)

// requeueTimeout bounds how long a requeue waits for room in a full pool.
const requeueTimeout = 5 * time.Second

// ownerTimeout bounds how long a single requeue or discard of a dead
// letter another instance owns waits for the owner's outcome; with the
// owner's lookup (requeueTimeout) it stays within opTimeout.
const ownerTimeout = opTimeout - requeueTimeout

func (h *handler) metrics(w http.ResponseWriter, r *http.Request) {
	if h.metricsH == nil {
		writeError(w, http.StatusNotFound, "admin: metrics are not enabled: Options.Gatherer is nil")
		return
	}
	h.metricsH.ServeHTTP(w, r)
}

// classesJSON is the body of GET /api/classes.
type classesJSON struct {
	instanceJSON
	Classes []classJSON `json:"classes"`
}

// instanceJSON is what /api/classes and the dashboard's header say about
// this instance.
type instanceJSON struct {
	// Instance and Group name this instance and its consumer group (an
	// operator of N instances has N of these).
	Instance            string  `json:"instance"`
	Group               string  `json:"group"`
	Ready               bool    `json:"ready"`
	DrainTimeoutSeconds float64 `json:"drain_timeout_seconds"`
	// CountingSince is when the counters (succeeded, failed, retried,
	// parked) started counting: the runtime's start in this process.
	CountingSince time.Time `json:"counting_since"`
}

// instance reads what instanceJSON says from the runtime.
func (h *handler) instance() instanceJSON {
	return instanceJSON{Instance: h.rt.Instance(), Group: h.rt.Group(), Ready: h.rt.Ready(),
		DrainTimeoutSeconds: h.rt.DrainTimeout().Seconds(), CountingSince: h.rt.Started().UTC()}
}

// classJSON is one class's [runtime.ClassStats].
type classJSON struct {
	Name      string   `json:"name"`
	Topics    []string `json:"topics"`
	Ordered   bool     `json:"ordered"`
	Workers   int      `json:"workers"`
	QueueSize int      `json:"queue_size"`
	Queued    int      `json:"queued"`
	Waiting   int      `json:"waiting"`
	Running   int      `json:"running"`
	// QueueFill is Queued / QueueSize.
	QueueFill float64 `json:"queue_fill"`
	Succeeded uint64  `json:"succeeded"`
	// Failed counts failed attempts not retried in place (dead letters,
	// delayed redeliveries, held); Parked the messages saved behind a
	// blocked key without running, which are not failures.
	Failed  uint64 `json:"failed"`
	Retried uint64 `json:"retried"`
	Parked  uint64 `json:"parked"`
	// Rate is the handling capacity in messages per second, 0 when unknown.
	Rate                 float64 `json:"rate"`
	DrainEstimateSeconds float64 `json:"drain_estimate_seconds"`
	OverBudget           bool    `json:"over_budget"`
	// LongestRunningSeconds is how long the longest-running handler has
	// run so far.
	LongestRunningSeconds float64 `json:"longest_running_seconds"`
	// Partitions is how many partitions of the class's topics this
	// instance fetches; Lag their consumer lag in messages, null before
	// the first sample; OldestUnsettledSeconds the age of the oldest
	// fetched message not yet done or saved.
	Partitions             int     `json:"partitions"`
	Lag                    *int64  `json:"lag"`
	OldestUnsettledSeconds float64 `json:"oldest_unsettled_seconds"`
	// Hold is the class's suspension or pause (pause.go).
	Hold holdJSON `json:"hold"`
}

func toClassJSON(cs runtime.ClassStats) classJSON {
	c := classJSON{
		Name: cs.Name, Topics: cs.Topics, Ordered: cs.Ordered, Workers: cs.Workers, QueueSize: cs.QueueSize,
		Queued: cs.Queued, Waiting: cs.Waiting, Running: cs.Running,
		Succeeded: cs.Succeeded, Failed: cs.Failed, Retried: cs.Retried, Parked: cs.Parked,
		Rate: cs.Rate, DrainEstimateSeconds: cs.DrainEstimate, OverBudget: cs.OverBudget,
		Hold:                  toHoldJSON(cs.Hold),
		LongestRunningSeconds: cs.LongestRunning, Partitions: cs.Partitions, OldestUnsettledSeconds: cs.OldestUnsettled,
	}
	if cs.Lag >= 0 {
		lag := cs.Lag
		c.Lag = &lag
	}
	if c.Topics == nil {
		c.Topics = []string{}
	}
	if cs.QueueSize > 0 {
		c.QueueFill = float64(cs.Queued) / float64(cs.QueueSize)
	}
	return c
}

// apiClasses serves /api/classes: to anyone, but with Options.ReadToken
// set the holds' reasons and last errors only with it (or the admin
// token, or a session); a wrong bearer token is refused as on the
// endpoints that need one.
func (h *handler) apiClasses(w http.ResponseWriter, r *http.Request) {
	full := len(h.readToken) == 0 || h.session(r) != roleNone
	if !full && r.Header.Get("Authorization") != "" {
		if !h.bearer(w, r, roleRead) {
			return
		}
		full = true
	}
	stats := h.rt.Stats()
	out := classesJSON{instanceJSON: h.instance(), Classes: make([]classJSON, len(stats))}
	for i, cs := range stats {
		out.Classes[i] = toClassJSON(cs)
		if !full {
			out.Classes[i].Hold = out.Classes[i].Hold.redacted()
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// The message and dead-letter JSON are the CLI's too (internal/recordjson).
type (
	messageJSON = recordjson.Message
	deadJSON    = recordjson.Dead
)

func text(b []byte) *string { return recordjson.Text(b) }

func toMessageJSON(m *handoff.Message) messageJSON { return recordjson.MessageOf(m) }

func toDeadJSON(dl *runtime.DeadLetter) deadJSON {
	return recordjson.DeadOf(dl.Key, &dl.Message, recordjson.DeadFields{Reason: dl.Reason, Err: dl.Err,
		Redeliveries: dl.Redeliveries, FirstFailed: dl.FirstFailed, LastFailed: dl.LastFailed})
}

// deadPageJSON is the body of GET /api/dead.
type deadPageJSON struct {
	DeadLetters []deadJSON `json:"dead_letters"`
	// Next is the after of the next page (an opaque cursor); absent on
	// the last.
	Next runtime.Cursor `json:"next,omitempty"`
	// Total counts the dead letters the search selects, on every page.
	Total int `json:"total"`
}

// groupDeadPageJSON is the body of GET /api/dead of the group's dead
// letters (the default scope).
type groupDeadPageJSON struct {
	DeadLetters []groupDeadJSON `json:"dead_letters"`
	Next        runtime.Cursor  `json:"next,omitempty"`
	Total       int             `json:"total"`
}

// parseLimit reads the limit parameter: defaultLimit when absent.
func parseLimit(r *http.Request) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return defaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxLimit {
		return 0, fmt.Errorf("admin: limit must be an integer from 1 to %d, got %q", maxLimit, s)
	}
	return n, nil
}

// apiDeadList serves GET /api/dead: the group's dead letters, each with
// its owner (scope=group, the default), or those of this instance's
// state file (scope=local).
func (h *handler) apiDeadList(w http.ResponseWriter, r *http.Request) {
	if !h.authorizeRead(w, r) {
		return
	}
	q := r.URL.Query()
	after := runtime.Cursor(q.Get("after"))
	limit, err := parseLimit(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%s", err)
		return
	}
	filter, err := parseDeadFilter(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%s", err)
		return
	}
	var (
		out  any
		next runtime.Cursor
	)
	switch scope := q.Get("scope"); scope {
	case "", "group":
		ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
		defer cancel()
		var (
			dls   []runtime.GroupDeadLetter
			total int
		)
		dls, next, total, err = h.rt.GroupDeadLetters(ctx, filter, after, limit)
		page := groupDeadPageJSON{DeadLetters: make([]groupDeadJSON, len(dls)), Next: next, Total: total}
		for i := range dls {
			page.DeadLetters[i] = toGroupDeadJSON(&dls[i])
		}
		out = page
	case "local":
		var (
			dls   []runtime.DeadLetter
			total int
		)
		dls, next, total, err = h.rt.FindDeadLetters(filter, after, limit)
		page := deadPageJSON{DeadLetters: make([]deadJSON, len(dls)), Next: next, Total: total}
		for i := range dls {
			page.DeadLetters[i] = toDeadJSON(&dls[i])
		}
		out = page
	default:
		writeError(w, http.StatusBadRequest, "admin: scope must be group or local, got %q", scope)
		return
	}
	if errors.Is(err, runtime.ErrBadCursor) {
		writeError(w, http.StatusBadRequest, "admin: after must be the next of an earlier page of the same scope: %v", err)
		return
	}
	if err != nil {
		h.opError(w, "list dead letters", err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) apiDeadGet(w http.ResponseWriter, r *http.Request) {
	if !h.authorizeRead(w, r) {
		return
	}
	key := r.PathValue("key")
	ctx, cancel := context.WithTimeout(r.Context(), requeueTimeout)
	defer cancel()
	dl, err := h.rt.GetGroupDeadLetter(ctx, key)
	if err != nil {
		h.runtimeError(w, fmt.Sprintf("get dead letter %s", key), err)
		return
	}
	writeJSON(w, http.StatusOK, toGroupDeadJSON(&dl))
}

// actionJSON is the body of a successful requeue or discard.
type actionJSON struct {
	Key    string `json:"key"`
	Status string `json:"status"`
}

func (h *handler) apiRequeue(w http.ResponseWriter, r *http.Request) {
	if !h.authorizeBearer(w, r) {
		return
	}
	key := r.PathValue("key")
	if err := h.requeue(r.Context(), key); err != nil {
		h.runtimeError(w, fmt.Sprintf("requeue dead letter %s", key), err)
		return
	}
	writeJSON(w, http.StatusAccepted, actionJSON{Key: key, Status: "requeued"})
}

func (h *handler) apiDiscard(w http.ResponseWriter, r *http.Request) {
	if !h.authorizeBearer(w, r) {
		return
	}
	key := r.PathValue("key")
	if err := h.discard(r.Context(), key); err != nil {
		h.runtimeError(w, fmt.Sprintf("discard dead letter %s", key), err)
		return
	}
	writeJSON(w, http.StatusOK, actionJSON{Key: key, Status: "discarded"})
}

// requeue requeues the dead letter with ID key, waiting at most
// requeueTimeout for room in its class's pool, or, for one another
// instance owns, ownerTimeout for the owner's outcome (actionCtx).
func (h *handler) requeue(ctx context.Context, key string) error {
	ctx, cancel := h.actionCtx(ctx, key)
	defer cancel()
	return h.rt.Requeue(ctx, key)
}

// discard discards the dead letter with ID key, waiting at most as
// requeue does.
func (h *handler) discard(ctx context.Context, key string) error {
	ctx, cancel := h.actionCtx(ctx, key)
	defer cancel()
	return h.rt.Discard(ctx, key)
}

// actionCtx bounds a single requeue or discard of key: requeueTimeout
// when this instance owns it, ownerTimeout when another instance does (the
// runtime asks the owner through the meta topic and waits for its
// answer: a round of each side following the topic, about a second
// each, and more under load). Finding the owner is bounded by
// requeueTimeout; when it fails, the action's own error says why.
func (h *handler) actionCtx(ctx context.Context, key string) (context.Context, context.CancelFunc) {
	timeout := requeueTimeout
	find, cancel := context.WithTimeout(ctx, requeueTimeout)
	g, err := h.rt.GetGroupDeadLetter(find, key)
	cancel()
	if err == nil && g.Owner != h.rt.Instance() {
		timeout = ownerTimeout
	}
	return context.WithTimeout(ctx, timeout)
}

// parkedJSON is one parked key of an ordered class.
type parkedJSON struct {
	Class   string    `json:"class"`
	Key     []byte    `json:"key"`
	KeyText *string   `json:"key_text,omitempty"`
	Count   int       `json:"count"`
	Oldest  time.Time `json:"oldest,omitzero"`
}

func (h *handler) apiParked(w http.ResponseWriter, r *http.Request) {
	if !h.authorizeRead(w, r) {
		return
	}
	keys, err := h.rt.ParkedKeys()
	if err != nil {
		h.runtimeError(w, "list parked keys", err)
		return
	}
	out := struct {
		Parked []parkedJSON `json:"parked"`
	}{Parked: make([]parkedJSON, len(keys))}
	for i, k := range keys {
		out.Parked[i] = parkedJSON{Class: k.Class, Key: k.Key, KeyText: text(k.Key), Count: k.Count, Oldest: k.Oldest}
	}
	writeJSON(w, http.StatusOK, out)
}

// delayedJSON is one delayed message. Cursor is its place in the listing
// (opaque): pass it as after for what follows it.
type delayedJSON struct {
	Cursor runtime.Cursor `json:"cursor"`
	Due    time.Time      `json:"due"`
	messageJSON
	Reason       string `json:"reason"`
	Error        string `json:"error,omitempty"`
	Redeliveries int    `json:"redeliveries"`
}

func (h *handler) apiDelayed(w http.ResponseWriter, r *http.Request) {
	if !h.authorizeRead(w, r) {
		return
	}
	after := runtime.Cursor(r.URL.Query().Get("after"))
	limit, err := parseLimit(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%s", err)
		return
	}
	entries, next, err := h.rt.Delayed(after, limit)
	if errors.Is(err, runtime.ErrBadCursor) {
		writeError(w, http.StatusBadRequest, "admin: after must be the cursor of a delayed message: %v", err)
		return
	}
	if err != nil {
		h.runtimeError(w, "list delayed messages", err)
		return
	}
	out := struct {
		Delayed []delayedJSON `json:"delayed"`
		// Next is the after of the next page; absent when this page is
		// not full.
		Next runtime.Cursor `json:"next,omitempty"`
	}{Delayed: make([]delayedJSON, len(entries)), Next: next}
	for i, e := range entries {
		out.Delayed[i] = delayedJSON{
			Cursor: e.Cursor, Due: e.Due, messageJSON: toMessageJSON(&e.Message),
			Reason: delayedReason(e), Error: e.Err, Redeliveries: e.Redeliveries,
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// delayedReason is why a delayed message waits: "redelivery" or
// "scheduled".
func delayedReason(e runtime.DelayedMessage) string {
	if e.Redelivery {
		return "redelivery"
	}
	return "scheduled"
}

// statusOf maps a runtime error to an HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, runtime.ErrBadKey):
		return http.StatusBadRequest
	case errors.Is(err, runtime.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, runtime.ErrRequeued), errors.Is(err, runtime.ErrUnknownClass), errors.Is(err, runtime.ErrNotOwner):
		return http.StatusConflict
	case errors.Is(err, runtime.ErrNotRunning), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// runtimeError answers a failed runtime call: what names the call.
func (h *handler) runtimeError(w http.ResponseWriter, what string, err error) {
	status := statusOf(err)
	msg := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		msg = fmt.Sprintf("the class's pool stayed full for %s: %v", requeueTimeout, err)
	}
	if status == http.StatusInternalServerError {
		h.log.Error("admin request failed", "what", what, "err", err)
	}
	writeError(w, status, "admin: %s: %s", what, msg)
}
