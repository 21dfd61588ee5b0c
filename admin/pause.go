package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/handoff-go/handoff/runtime"
)

// maxReason bounds a pause's reason, in bytes.
const maxReason = 1024

// maxPauseBody bounds the body of a pause: room for a reason of
// maxReason bytes each spelt as a JSON \uXXXX escape, and the rest.
const maxPauseBody = 6*maxReason + 512

// holdJSON is a class's suspension and pause state in /api/classes.
type holdJSON struct {
	// State is "running", "suspended" (a detected dependency outage) or
	// "paused" (by an operator).
	State string `json:"state"`
	// Since is when the suspension or pause began; absent while running.
	Since time.Time `json:"since,omitzero"`
	// Reason is the pause's reason, or what tripped the suspension.
	// Reason and LastError are absent without the read token (or the
	// admin token, or a session) when Options.ReadToken is set.
	Reason string `json:"reason,omitempty"`
	// LastError is the last handler error of the current (or last)
	// suspension.
	LastError        string  `json:"last_error,omitempty"`
	Probes           int     `json:"probes"`
	Suspensions      uint64  `json:"suspensions"`
	SuspendedSeconds float64 `json:"suspended_seconds"`
}

func toHoldJSON(h runtime.ClassHold) holdJSON {
	return holdJSON{State: h.State, Since: h.Since, Reason: h.Reason, LastError: h.LastError, Probes: h.Probes,
		Suspensions: h.Suspensions, SuspendedSeconds: h.SuspendedSeconds}
}

// redacted returns h without its reason and last error, whose text can
// carry message data: what a reader without the read token sees when
// one is configured.
func (h holdJSON) redacted() holdJSON {
	h.Reason, h.LastError = "", ""
	return h
}

// pauseJSON is the optional body of POST /api/classes/{name}/pause.
type pauseJSON struct {
	Reason string `json:"reason"`
}

// classActionJSON is the body of a successful pause or resume.
type classActionJSON struct {
	Class  string `json:"class"`
	Status string `json:"status"`
}

func (h *handler) apiPause(w http.ResponseWriter, r *http.Request) {
	if !h.authorizeBearer(w, r) {
		return
	}
	var body pauseJSON
	b, err := io.ReadAll(io.LimitReader(r.Body, maxPauseBody+1))
	if len(b) > maxPauseBody {
		writeError(w, http.StatusRequestEntityTooLarge, "admin: pause body too large: at most %d bytes, for a reason of at most %d", maxPauseBody, maxReason)
		return
	}
	if err == nil && len(b) > 0 {
		err = json.Unmarshal(b, &body)
	}
	switch {
	case err != nil:
		writeError(w, http.StatusBadRequest, "admin: pause body: want {\"reason\": \"...\"}: %v", err)
		return
	case len(body.Reason) > maxReason:
		writeError(w, http.StatusBadRequest, "admin: pause reason of %d bytes, at most %d", len(body.Reason), maxReason)
		return
	}
	name := r.PathValue("name")
	if err := h.rt.Pause(r.Context(), name, body.Reason); err != nil {
		h.classError(w, "pause class "+name, err)
		return
	}
	writeJSON(w, http.StatusOK, classActionJSON{Class: name, Status: "paused"})
}

func (h *handler) apiResume(w http.ResponseWriter, r *http.Request) {
	if !h.authorizeBearer(w, r) {
		return
	}
	name := r.PathValue("name")
	if err := h.rt.Resume(r.Context(), name); err != nil {
		h.classError(w, "resume class "+name, err)
		return
	}
	writeJSON(w, http.StatusOK, classActionJSON{Class: name, Status: "resumed"})
}

// classError answers a failed pause or resume: an unknown class is 404.
func (h *handler) classError(w http.ResponseWriter, what string, err error) {
	if errors.Is(err, runtime.ErrUnknownClass) {
		writeError(w, http.StatusNotFound, "admin: %s: %v", what, err)
		return
	}
	h.runtimeError(w, what, err)
}

func (h *handler) uiPause(w http.ResponseWriter, r *http.Request) {
	h.uiClassAction(w, r, "class-paused", func(name string) error {
		reason := r.PostFormValue("reason")
		if len(reason) > maxReason {
			// At a character's boundary: a character across the limit
			// is left out whole.
			n := maxReason
			for n > 0 && !utf8.RuneStart(reason[n]) {
				n--
			}
			reason = reason[:n]
		}
		return h.rt.Pause(r.Context(), name, reason)
	})
}

func (h *handler) uiResume(w http.ResponseWriter, r *http.Request) {
	h.uiClassAction(w, r, "class-resumed", func(name string) error { return h.rt.Resume(r.Context(), name) })
}

// uiClassAction runs a class button's action when the session allows it
// and sends the browser back to the dashboard with the outcome.
func (h *handler) uiClassAction(w http.ResponseWriter, r *http.Request, done string, act func(name string) error) {
	if !h.uiAllowed(w, r) {
		return
	}
	if !h.parseForm(w, r) {
		return
	}
	name := r.PathValue("name")
	if err := act(name); err != nil {
		code := "class-failed"
		switch {
		case errors.Is(err, runtime.ErrUnknownClass):
			code = "class-unknown"
		case errors.Is(err, runtime.ErrNotRunning):
			code = "not-running"
		default:
			h.log.Error("dashboard class action failed", "action", done, "class", name, "err", err)
		}
		h.redirect(w, r, url.Values{"msg": {code}, "name": {name}})
		return
	}
	h.redirect(w, r, url.Values{"msg": {done}, "name": {name}})
}
