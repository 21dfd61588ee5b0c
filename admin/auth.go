package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
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

// sessionValue is the cookie value of a login of role at issued: the
// time, the role and an HMAC of both keyed by that role's token, so the
// cookie never holds the token and stops working when the token changes.
func (h *handler) sessionValue(issued int64, role string) string {
	ts := strconv.FormatInt(issued, 10)
	key := h.token
	if role == roleRead {
		key = h.readToken
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("handoff admin session\x00" + role + "\x00" + ts))
	return ts + "." + role + "." + hex.EncodeToString(mac.Sum(nil))
}

// session returns the role of r's valid, unexpired session cookie, or
// roleNone.
func (h *handler) session(r *http.Request) string {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return roleNone
	}
	ts, rest, ok := strings.Cut(c.Value, ".")
	if !ok {
		return roleNone
	}
	role, _, ok := strings.Cut(rest, ".")
	if !ok || (role == roleAdmin && len(h.token) == 0) || (role == roleRead && len(h.readToken) == 0) || (role != roleAdmin && role != roleRead) {
		return roleNone
	}
	issued, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return roleNone
	}
	age := time.Since(time.Unix(issued, 0))
	if age < -time.Minute || age > sessionTTL {
		return roleNone
	}
	if subtle.ConstantTimeCompare([]byte(c.Value), []byte(h.sessionValue(issued, role))) != 1 {
		return roleNone
	}
	return role
}

// loggedIn reports whether r carries a valid admin session.
func (h *handler) loggedIn(r *http.Request) bool { return h.session(r) == roleAdmin }

// setSession sets (or, with clear, removes) the session cookie, scoped to
// the path the handler is mounted at.
func (h *handler) setSession(w http.ResponseWriter, r *http.Request, role string, clear bool) {
	c := &http.Cookie{
		Name:     sessionCookie,
		Path:     basePath(r),
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	}
	if clear {
		c.MaxAge = -1
	} else {
		c.Value = h.sessionValue(time.Now().Unix(), role)
		c.MaxAge = int(sessionTTL / time.Second)
	}
	http.SetCookie(w, c)
}
