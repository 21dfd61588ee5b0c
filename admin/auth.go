package admin

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// sessionCookie names the dashboard's session cookie.
	sessionCookie = "handoff_admin"
	// sessionTTL is how long a dashboard login lasts.
	sessionTTL = 12 * time.Hour
)

// Session roles: what a dashboard session, or a bearer token, may do.
const (
	roleNone  = ""
	roleRead  = "r" // read messages: Options.ReadToken
	roleAdmin = "w" // read and mutate: Options.Token
)

// equalToken reports whether got is want, in constant time (both sides
// are hashed first, so not even the length leaks); an empty want matches
// nothing.
func equalToken(got string, want []byte) bool {
	a := sha256.Sum256([]byte(got))
	b := sha256.Sum256(want)
	return len(want) > 0 && subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// roleOf returns the role token grants: admin for Options.Token, read
// for Options.ReadToken, none otherwise.
func (h *handler) roleOf(token string) string {
	switch {
	case equalToken(token, h.token):
		return roleAdmin
	case equalToken(token, h.readToken):
		return roleRead
	}
	return roleNone
}

// tokenOK reports whether got is the configured (admin) token.
func (h *handler) tokenOK(got string) bool { return h.roleOf(got) == roleAdmin }

// bearer checks the API's "Authorization: Bearer <token>" header for a
// token of role want (an admin token also grants read). On failure it
// answers 401 (429 for a client over its limit of failed attempts) and
// returns false.
func (h *handler) bearer(w http.ResponseWriter, r *http.Request, want string) bool {
	client := clientOf(r)
	if wait, limited := h.fails.limited(client, time.Now()); limited {
		h.tooMany(w, r, client, wait)
		return false
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="handoff admin"`)
		writeError(w, http.StatusUnauthorized, "admin: missing bearer token: send the header \"Authorization: Bearer <token>\"")
		return false
	}
	role := h.roleOf(strings.TrimSpace(tok))
	if role == roleAdmin || role == want {
		h.succeeded(client, role)
		return true
	}
	h.failed(r, client, "api")
	w.Header().Set("WWW-Authenticate", `Bearer realm="handoff admin", error="invalid_token"`)
	if role == roleRead {
		writeError(w, http.StatusUnauthorized, "admin: the read token does not allow this: it needs the admin token")
	} else {
		writeError(w, http.StatusUnauthorized, "admin: wrong bearer token")
	}
	return false
}

// authorizeBearer checks the admin token of a mutating API request. On
// failure it answers 403 (no token configured), 401 or 429 and returns
// false.
func (h *handler) authorizeBearer(w http.ResponseWriter, r *http.Request) bool {
	if len(h.token) == 0 {
		writeError(w, http.StatusForbidden, "admin: no token is configured: mutating endpoints are disabled (set admin.Options.Token)")
		return false
	}
	return h.bearer(w, r, roleAdmin)
}

// authorizeRead checks a request to an endpoint that shows messages:
// with Options.ReadToken set it needs the read or the admin token, as a
// bearer token or a dashboard session; without, anyone may read.
func (h *handler) authorizeRead(w http.ResponseWriter, r *http.Request) bool {
	if len(h.readToken) == 0 || h.session(r) != roleNone {
		return true
	}
	return h.bearer(w, r, roleRead)
}

// succeeded forgets client's wrong tokens after it showed one of role:
// the admin token only, so that a holder of the read token cannot reset
// its count of guesses at the admin token with a good read between them.
func (h *handler) succeeded(client, role string) {
	if role == roleAdmin {
		h.fails.succeeded(client)
	}
}

// failed counts and logs a wrong token from client.
func (h *handler) failed(r *http.Request, client, via string) {
	n, locked := h.fails.failed(client, time.Now())
	h.log.Warn("wrong admin token", "client", client, "via", via, "path", r.URL.Path, "failures", n)
	if locked {
		h.log.Warn("admin token attempts of a client limited", "client", client, "failures", n,
			"for", failWindow, "limit", failLimit)
	}
}

// tooMany answers 429 to a client over its limit of failed attempts.
func (h *handler) tooMany(w http.ResponseWriter, r *http.Request, client string, wait time.Duration) {
	secs := int((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	h.log.Debug("admin token attempt refused: too many failures", "client", client, "path", r.URL.Path, "retry_after", wait)
	writeError(w, http.StatusTooManyRequests, "admin: too many wrong tokens from %s: try again in %ds", client, secs)
}

// session returns the role of r's session cookie when it names a live
// session of this handler, else roleNone.
func (h *handler) session(r *http.Request) string {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return roleNone
	}
	role := h.sessions.lookup(c.Value, time.Now())
	if (role == roleAdmin && len(h.token) == 0) || (role == roleRead && len(h.readToken) == 0) {
		return roleNone
	}
	return role
}

// authenticated reports whether r carries a live session or a bearer
// token of either role. It counts no failure: the endpoint does.
func (h *handler) authenticated(r *http.Request) bool {
	if h.session(r) != roleNone {
		return true
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && h.roleOf(strings.TrimSpace(tok)) != roleNone
}

// who names the requester of r in the audit trail of the group's
// dead-letter operations: its client address (clientOf). The admin API
// has one admin token, not named ones, so the address is what tells
// requesters apart.
func who(r *http.Request) string { return clientOf(r) }

// loggedIn reports whether r carries a valid admin session.
func (h *handler) loggedIn(r *http.Request) bool { return h.session(r) == roleAdmin }

// setSession ends r's session (if any), then starts a session of role
// and sets its cookie, or, with clear, removes the cookie; the cookie is
// scoped to the path the handler is mounted at.
func (h *handler) setSession(w http.ResponseWriter, r *http.Request, role string, clear bool) {
	c := &http.Cookie{
		Name:     sessionCookie,
		Path:     basePath(r),
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	}
	if old, err := r.Cookie(sessionCookie); err == nil {
		h.sessions.revoke(old.Value)
	}
	if clear {
		c.MaxAge = -1
	} else {
		c.Value = h.sessions.start(role, time.Now())
		c.MaxAge = int(sessionTTL / time.Second)
	}
	http.SetCookie(w, c)
}

// maxSessions bounds the live sessions a handler keeps: past it, a login
// ends the session that would expire first (only a right token logs in).
const maxSessions = 1000

// sessionStore holds the dashboard's sessions in memory: a cookie is a
// random ID that names one until it expires (sessionTTL after the login)
// or its logout ends it, and only in the handler that issued it (a
// restart ends every session). IDs are kept hashed, so a lookup's timing
// says nothing about them. Safe for concurrent use; the zero value is
// ready.
type sessionStore struct {
	mu   sync.Mutex
	live map[[sha256.Size]byte]liveSession
}

type liveSession struct {
	role    string
	expires time.Time
}

// start begins a session of role at now and returns its cookie value.
func (s *sessionStore) start(role string, now time.Time) string {
	id := make([]byte, 32)
	rand.Read(id)
	value := base64.RawURLEncoding.EncodeToString(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil {
		s.live = map[[sha256.Size]byte]liveSession{}
	}
	if len(s.live) >= maxSessions {
		var first [sha256.Size]byte
		var firstExp time.Time
		for k, v := range s.live {
			if !v.expires.After(now) {
				delete(s.live, k)
			} else if firstExp.IsZero() || v.expires.Before(firstExp) {
				first, firstExp = k, v.expires
			}
		}
		if len(s.live) >= maxSessions {
			delete(s.live, first)
		}
	}
	s.live[sha256.Sum256([]byte(value))] = liveSession{role: role, expires: now.Add(sessionTTL)}
	return value
}

// lookup returns the role of the live session value names at now, or
// roleNone.
func (s *sessionStore) lookup(value string, now time.Time) string {
	k := sha256.Sum256([]byte(value))
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.live[k]
	if !ok {
		return roleNone
	}
	if !v.expires.After(now) {
		delete(s.live, k)
		return roleNone
	}
	return v.role
}

// revoke ends the session value names, if it is live.
func (s *sessionStore) revoke(value string) {
	k := sha256.Sum256([]byte(value))
	s.mu.Lock()
	delete(s.live, k)
	s.mu.Unlock()
}
