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

// tokenOK reports whether got is the configured token, in constant time
// (both sides are hashed first, so not even the length leaks).
func (h *handler) tokenOK(got string) bool {
	a := sha256.Sum256([]byte(got))
	b := sha256.Sum256(h.token)
	return len(h.token) > 0 && subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// authorizeBearer checks the API's "Authorization: Bearer <token>"
// header. On failure it answers 403 (no token configured) or 401 and
// returns false.
func (h *handler) authorizeBearer(w http.ResponseWriter, r *http.Request) bool {
	if len(h.token) == 0 {
		writeError(w, http.StatusForbidden, "admin: no token is configured: mutating endpoints are disabled (set admin.Options.Token)")
		return false
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="handoff admin"`)
		writeError(w, http.StatusUnauthorized, "admin: missing bearer token: send the header \"Authorization: Bearer <token>\"")
		return false
	}
	if !h.tokenOK(strings.TrimSpace(tok)) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="handoff admin", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, "admin: wrong bearer token")
		return false
	}
	return true
}

// sessionValue is the cookie value of a login at issued: the time and an
// HMAC of it keyed by the token, so the cookie never holds the token and
// stops working when the token changes.
func (h *handler) sessionValue(issued int64) string {
	ts := strconv.FormatInt(issued, 10)
	mac := hmac.New(sha256.New, h.token)
	mac.Write([]byte("handoff admin session\x00" + ts))
	return ts + "." + hex.EncodeToString(mac.Sum(nil))
}

// loggedIn reports whether r carries a valid, unexpired session cookie.
func (h *handler) loggedIn(r *http.Request) bool {
	if len(h.token) == 0 {
		return false
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return false
	}
	ts, _, ok := strings.Cut(c.Value, ".")
	if !ok {
		return false
	}
	issued, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	age := time.Since(time.Unix(issued, 0))
	if age < -time.Minute || age > sessionTTL {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(c.Value), []byte(h.sessionValue(issued))) == 1
}

// setSession sets (or, with clear, removes) the session cookie, scoped to
// the path the handler is mounted at.
func (h *handler) setSession(w http.ResponseWriter, r *http.Request, clear bool) {
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
		c.Value = h.sessionValue(time.Now().Unix())
		c.MaxAge = int(sessionTTL / time.Second)
	}
	http.SetCookie(w, c)
}
