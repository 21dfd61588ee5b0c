package admin

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

const testReadToken = "read-only-token"

// TestProbeHandler: the probe handler serves the probes and metrics and
// nothing that shows a message, with no token.
func TestProbeHandler(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.poison("jobs", 1)
	h, err := NewProbeHandler(b.rt, Options{Token: testToken, Gatherer: nil})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for path, want := range map[string]int{
		"/livez": 200, "/healthz": 200, "/readyz": 200, "/metrics": 404,
		"/api/dead": 404, "/api/dead/1": 404, "/api/classes": 404, "/": 404,
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// TestReadToken: with a ReadToken, the endpoints that show messages need
// it (or the admin token); it does not mutate; probes, metrics and the
// class stats stay open; the dashboard hides messages until a login,
// and a login with the read token is a read-only session.
func TestReadToken(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *Options) { o.ReadToken = testReadToken })
	key := b.poison("jobs", 1)[0]
	dead := "/api/dead/" + key
	for _, path := range []string{"/api/dead", dead, "/api/parked", "/api/delayed"} {
		if resp, _ := b.do("GET", path); resp.StatusCode != 401 {
			t.Errorf("GET %s without a token: %d, want 401", path, resp.StatusCode)
		}
		for _, tok := range []string{testReadToken, testToken} {
			if resp, body := b.do("GET", path, bearer(tok)...); resp.StatusCode != 200 {
				t.Errorf("GET %s with %s: %d %s", path, tok, resp.StatusCode, body)
			}
		}
	}
	for _, path := range []string{"/livez", "/readyz", "/metrics", "/api/classes"} {
		if resp, _ := b.do("GET", path); resp.StatusCode != 200 {
			t.Errorf("GET %s without a token: %d, want 200", path, resp.StatusCode)
		}
	}
	if resp, body := b.do("POST", dead+"/discard", bearer(testReadToken)...); resp.StatusCode != 401 || !strings.Contains(string(body), "needs the admin token") {
		t.Errorf("discard with the read token: %d %s", resp.StatusCode, body)
	}
	if len(b.deadLetters()) != 1 {
		t.Fatal("the read token discarded a dead letter")
	}

	resp, page := b.do("GET", "/")
	if resp.StatusCode != 200 || !strings.Contains(string(page), `id="need-read"`) || strings.Contains(string(page), `id="dead-`) {
		t.Fatalf("dashboard without a session shows messages (or failed): %d\n%s", resp.StatusCode, page)
	}
	cookie := login(t, b, testReadToken)
	resp, page = b.do("GET", "/", "Cookie", cookie)
	if resp.StatusCode != 200 || !strings.Contains(string(page), `id="dead-`+key) || !strings.Contains(string(page), "(read only)") {
		t.Fatalf("dashboard with a read session: %d\n%s", resp.StatusCode, page)
	}
	if resp, body := b.do("GET", dead, "Cookie", cookie); resp.StatusCode != 200 {
		t.Errorf("API with a read session: %d %s", resp.StatusCode, body)
	}
	form := url.Values{}
	req, _ := http.NewRequest("POST", b.srv.URL+"/ui/dead/"+key+"/discard", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Cookie", cookie)
	r2, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if loc := r2.Header.Get("Location"); !strings.Contains(loc, "msg=login-first") {
		t.Errorf("discard button with a read session: redirect %q, want login-first", loc)
	}
	if len(b.deadLetters()) != 1 {
		t.Fatal("a read session discarded a dead letter")
	}
}

// login posts the dashboard's login form and returns the session cookie.
func login(t *testing.T, b *bundle, token string) string {
	t.Helper()
	return loginAt(t, b.srv.URL, token)
}

// TestTokenFailuresLimited: a client's wrong tokens are each logged at
// Warn with its address; after the 10th, its attempts (even with the
// right token) get 429 with Retry-After, while other clients are not
// affected. Before, 200 wrong tokens got 200 fast 401s and no address
// in the logs.
func TestTokenFailuresLimited(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	key := b.poison("jobs", 1)[0]
	path := "/api/dead/" + key + "/requeue"
	h := b.srv.Config.Handler
	send := func(client, tok string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", path, nil)
		req.RemoteAddr = client + ":41000"
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	for i := range failLimit {
		if w := send("192.0.2.7", "guess-"+itoa(uint64(i))); w.Code != 401 {
			t.Fatalf("wrong token %d: %d, want 401", i, w.Code)
		}
	}
	w := send("192.0.2.7", testToken)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("after %d failures: %d (Retry-After %q), want 429", failLimit, w.Code, w.Header().Get("Retry-After"))
	}
	if w := send("198.51.100.9", testToken); w.Code != http.StatusAccepted {
		t.Errorf("another client: %d %s", w.Code, w.Body)
	}
	logs := b.logs.String()
	if n := strings.Count(logs, `"msg":"wrong admin token","component":"admin","client":"192.0.2.7"`); n != failLimit {
		t.Errorf("%d wrong-token lines with the client address, want %d:\n%s", n, failLimit, logs)
	}
	if !strings.Contains(logs, `"msg":"admin token attempts of a client limited","component":"admin","client":"192.0.2.7"`) {
		t.Errorf("no line saying the client is limited:\n%s", logs)
	}
	// The dashboard's login counts too, for its own client.
	for range failLimit {
		resp, err := noRedirect.PostForm(b.srv.URL+"/ui/login", url.Values{"token": {"nope"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := noRedirect.PostForm(b.srv.URL+"/ui/login", url.Values{"token": {testToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); !strings.Contains(loc, "msg=too-many") || len(resp.Cookies()) > 0 {
		t.Errorf("login after %d failures: redirect %q, cookies %v", failLimit, loc, resp.Cookies())
	}
}

// TestReadTokenKeepsFailures: the read token's successes do not forget a
// client's wrong tokens, so a holder of the read token cannot guess the
// admin token without limit by sending a good read between every few
// guesses. Before, each read (or read-token login) reset the count: 30
// guesses in a row got 30 401s and no 429.
func TestReadTokenKeepsFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *Options) { o.ReadToken = testReadToken })
	key := b.poison("jobs", 1)[0]
	h := b.srv.Config.Handler
	send := func(method, path, tok string) int {
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = "192.0.2.7:41000"
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	login := func(tok string) string {
		req := httptest.NewRequest("POST", "/ui/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
		req.RemoteAddr = "192.0.2.7:41000"
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Header().Get("Location")
	}
	requeue := "/api/dead/" + key + "/requeue"
	limited := false
	for i := range 3 * failLimit {
		if i%(failLimit-1) == failLimit-2 {
			if i%2 == 0 {
				send("GET", "/api/dead", testReadToken)
			} else {
				login(testReadToken)
			}
		}
		switch code := send("POST", requeue, "guess-"+itoa(uint64(i))); code {
		case http.StatusTooManyRequests:
			limited = true
		case http.StatusUnauthorized:
		default:
			t.Fatalf("guess %d: %d", i, code)
		}
	}
	if !limited {
		t.Fatalf("%d wrong admin tokens, with the read token's reads between them, were never limited", 3*failLimit)
	}
	if len(b.deadLetters()) != 1 {
		t.Fatal("a guess requeued the dead letter")
	}
}

// TestFailLimiterWindow: the limit lasts one window from the first
// failure, and a success forgets the failures.
func TestFailLimiterWindow(t *testing.T) {
	t.Parallel()
	var l failLimiter
	t0 := time.Unix(1e9, 0)
	for i := range failLimit {
		n, locked := l.failed("a", t0.Add(time.Duration(i)*time.Second))
		if n != i+1 || locked != (i+1 == failLimit) {
			t.Fatalf("failure %d: %d %v", i, n, locked)
		}
	}
	if wait, ok := l.limited("a", t0.Add(20*time.Second)); !ok || wait != 40*time.Second {
		t.Errorf("limited at +20s: %s %v, want 40s true", wait, ok)
	}
	if _, ok := l.limited("a", t0.Add(failWindow)); ok {
		t.Error("still limited when the window ended")
	}
	if n, _ := l.failed("a", t0.Add(failWindow+time.Second)); n != 1 {
		t.Errorf("first failure of a new window counted %d", n)
	}
	l.succeeded("a")
	if n, _ := l.failed("a", t0.Add(failWindow+2*time.Second)); n != 1 {
		t.Errorf("failure after a success counted %d", n)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
