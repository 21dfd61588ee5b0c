package admin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff/runtime"
)

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// repeatReader yields b forever.
type repeatReader byte

func (b repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

// hugeMultipart returns a multipart/form-data body with a "token" field
// and a file part of size bytes, its content type, and the reader that
// counts what is read of it.
func hugeMultipart(size int64) (*countingReader, string) {
	const boundary = "xXxBoundaryxXx"
	head := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"token\"\r\n\r\nguess\r\n" +
		"--" + boundary + "\r\nContent-Disposition: form-data; name=\"reason\"; filename=\"big\"\r\nContent-Type: application/octet-stream\r\n\r\n"
	tail := "\r\n--" + boundary + "--\r\n"
	body := io.MultiReader(strings.NewReader(head), io.LimitReader(repeatReader('A'), size), strings.NewReader(tail))
	return &countingReader{r: body}, "multipart/form-data; boundary=" + boundary
}

// TestOversizedBodiesRefused: a 64 MiB multipart post to each endpoint
// that reads a body (the login form before any login, the dashboard's
// pause form with an admin session, the pause API with the token) is
// refused with 413 after reading at most MaxBodyBytes and a buffer of
// it, whether it declares its length or not (chunked); one that declares
// a length above the bound is refused unread. Before, the login form and
// the pause form parsed the whole body (32 MiB in memory, the rest in
// temporary files) and the login answered a redirect: eight concurrent
// 200 MB posts took rental from 30 MB to 899 MB RSS.
func TestOversizedBodiesRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cookie := login(t, b, testToken)
	h := b.srv.Config.Handler
	const size = 64 << 20
	for _, c := range []struct {
		path string
		hdr  []string
	}{
		{"/ui/login", nil},
		{"/ui/classes/jobs/pause", []string{"Cookie", cookie}},
		{"/api/classes/jobs/pause", bearer(testToken)},
		{"/api/dead/requeue", bearer(testToken)},
		{"/api/dead/discard", bearer(testToken)},
		{"/ui/dead/requeue", []string{"Cookie", cookie}},
		{"/ui/dead/discard", []string{"Cookie", cookie}},
	} {
		for _, declared := range []bool{false, true} {
			body, ct := hugeMultipart(size)
			req := httptest.NewRequest("POST", c.path, body)
			req.ContentLength = -1 // chunked: the length is unknown
			if declared {
				req.ContentLength = size + 300
			}
			req.Header.Set("Content-Type", ct)
			for i := 0; i+1 < len(c.hdr); i += 2 {
				req.Header.Set(c.hdr[i], c.hdr[i+1])
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			read := body.n.Load()
			if w.Code != http.StatusRequestEntityTooLarge {
				t.Errorf("POST %s (length declared %v) of %d bytes: %d (Location %q), want 413", c.path, declared, size, w.Code, w.Header().Get("Location"))
			}
			if limit := int64(MaxBodyBytes + 64<<10); read > limit || (declared && read > 0) {
				t.Errorf("POST %s (length declared %v): the handler read %d bytes of the body, want at most %d (none when the length is declared)",
					c.path, declared, read, limit)
			}
		}
	}
	if h := b.rt.Stats()[0].Hold; h.State != runtime.HoldRunning {
		t.Errorf("an oversized pause paused the class: %+v", h)
	}
}

// TestSlowBodyTimesOut: on the server Serve builds, a request whose body
// trickles in is cut off at Options.ReadTimeout, and a kept-alive
// connection left idle at Options.IdleTimeout. Before, Serve set no
// ReadTimeout: 500 slow-body connections stayed open past 45 s (here:
// still open after 5 s); and the idle timeout was a fixed minute.
func TestSlowBodyTimesOut(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	h, err := NewHandler(b.rt, Options{Token: testToken, ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, h) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	// closedWithin reads conn until the server closes it, or fails the
	// test after limit.
	closedWithin := func(what string, conn net.Conn, limit time.Duration) {
		t.Helper()
		began := time.Now()
		conn.SetReadDeadline(began.Add(limit))
		_, err := io.Copy(io.Discard, conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: the connection is still open after %s", what, limit)
		}
		t.Logf("%s: closed after %s", what, time.Since(began).Round(time.Millisecond))
	}

	slow, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "POST /ui/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ntoken=ab")
	closedWithin("a body that stops after 8 of 1000 bytes", slow, 5*time.Second)

	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprintf(idle, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("GET /readyz: %d, close %v: want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	closedWithin("a kept-alive connection left idle", idle, 5*time.Second)
}

// TestServerTimeouts: the server Serve builds for a handler of NewHandler
// or NewProbeHandler takes its Options' timeouts, the defaults for zero
// and none for a negative one; any other handler gets the defaults.
func TestServerTimeouts(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	check := func(what string, srv *http.Server, read, write, idle time.Duration) {
		t.Helper()
		if srv.ReadTimeout != read || srv.WriteTimeout != write || srv.IdleTimeout != idle || srv.ReadHeaderTimeout == 0 {
			t.Errorf("%s: read %s write %s idle %s header %s, want %s %s %s and a header timeout",
				what, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.ReadHeaderTimeout, read, write, idle)
		}
	}
	h, _ := NewHandler(b.rt, Options{})
	check("defaults", newServer(h), DefaultReadTimeout, DefaultWriteTimeout, DefaultIdleTimeout)
	h, _ = NewHandler(b.rt, Options{ReadTimeout: time.Second, WriteTimeout: -1, IdleTimeout: 3 * time.Second})
	check("set", newServer(h), time.Second, 0, 3*time.Second)
	h, _ = NewProbeHandler(b.rt, Options{ReadTimeout: 2 * time.Second})
	check("probes", newServer(h), 2*time.Second, DefaultWriteTimeout, DefaultIdleTimeout)
	check("another handler", newServer(http.NotFoundHandler()), DefaultReadTimeout, DefaultWriteTimeout, DefaultIdleTimeout)
}

// TestPreLoginCapped: at most Options.MaxPreLogin requests without a
// token or session are served at once; the next is answered 503 with
// Retry-After at once, while a request with the token, a dashboard
// session, the probes and /metrics are still served; once the held ones
// end, unauthenticated requests are served again. Before, every
// pre-login request was served, however many.
func TestPreLoginCapped(t *testing.T) {
	t.Parallel()
	const capN = 2
	b := setup(t, func(o *Options) { o.MaxPreLogin = capN; o.ReadToken = testReadToken })
	cookie := login(t, b, testReadToken)
	// Hold capN login posts in the handler: their bodies never come.
	var held []net.Conn
	for range capN {
		c, err := net.Dial("tcp", b.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /ui/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n")
		held = append(held, c)
	}
	// Wait until both hold their slots before asking anything: a probe
	// without a token takes a slot too, and one that came between them
	// would have the second held request refused instead.
	h := b.srv.Config.Handler.(*handler)
	waitFor(t, "the pre-login requests to be held", func() bool { return len(h.preLogin) == capN })
	resp, _ := b.do("GET", "/api/classes")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GET /api/classes without a token while %d pre-login requests are held: %d, want 503", capN, resp.StatusCode)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	resp, err := noRedirect.PostForm(b.srv.URL+"/ui/login", url.Values{"token": {testToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a login beyond the bound: %d, want 503", resp.StatusCode)
	}
	for _, c := range []struct {
		path string
		hdr  []string
	}{
		{"/api/classes", bearer(testToken)},
		{"/api/dead", bearer(testReadToken)},
		{"/", []string{"Cookie", cookie}},
		{"/livez", nil}, {"/readyz", nil}, {"/metrics", nil},
	} {
		if resp, body := b.do("GET", c.path, c.hdr...); resp.StatusCode != 200 {
			t.Errorf("GET %s %v while the pre-login requests are held: %d %s", c.path, c.hdr, resp.StatusCode, body)
		}
	}
	for _, c := range held {
		c.Close()
	}
	waitFor(t, "pre-login requests served again", func() bool {
		resp, _ := b.do("GET", "/api/classes")
		return resp.StatusCode == 200
	})
}

// TestFailLimiterBeyondItsTable: with the table of clients full (each
// within its window), a new client is still limited after failLimit
// wrong tokens: the oldest client is dropped for it, and the table stays
// bounded. Before, a client past failClients was never tracked, so never
// limited.
func TestFailLimiterBeyondItsTable(t *testing.T) {
	t.Parallel()
	var l failLimiter
	t0 := time.Unix(1e9, 0)
	for i := range failClients {
		l.failed(fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&0xff, i&0xff), t0.Add(time.Duration(i)*time.Microsecond))
	}
	now := t0.Add(time.Second)
	for i := range failLimit {
		if n, locked := l.failed("192.0.2.7", now); n != i+1 || locked != (i+1 == failLimit) {
			t.Fatalf("failure %d of a client beyond the table: counted %d, locked %v", i, n, locked)
		}
	}
	if _, ok := l.limited("192.0.2.7", now); !ok {
		t.Errorf("a client beyond the table of %d is not limited after %d wrong tokens", failClients, failLimit)
	}
	if n := l.tracked(); n > failClients {
		t.Errorf("%d clients tracked, above the bound %d", n, failClients)
	}
	if n, _ := l.failed("10.0.0.0", now); n != 1 {
		t.Errorf("the oldest client was not the one dropped: its next failure counted %d", n)
	}
	if n, _ := l.failed(fmt.Sprintf("10.%d.%d.%d", (failClients-1)>>16, (failClients-1)>>8&0xff, (failClients-1)&0xff), now); n != 2 {
		t.Errorf("the newest client lost its count: its next failure counted %d, want 2", n)
	}
}

// TestLogoutRevokesSession: after a logout, the session cookie it ended
// no longer works, even sent again as it was (a copy): its reads get
// 401 and its buttons ask for a login. Before, logout only asked the
// browser to drop the cookie, and a copy kept working for 12 hours.
func TestLogoutRevokesSession(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *Options) { o.ReadToken = testReadToken })
	key := b.poison("jobs", 1)[0]
	cookie := login(t, b, testToken)
	other := login(t, b, testToken)
	if resp, body := b.do("GET", "/api/dead", "Cookie", cookie); resp.StatusCode != 200 {
		t.Fatalf("read with the session: %d %s", resp.StatusCode, body)
	}
	if resp, _ := b.post("/ui/logout", "", "Cookie", cookie, "Content-Type", "application/x-www-form-urlencoded"); !strings.Contains(resp.Header.Get("Location"), "msg=logged-out") {
		t.Fatalf("logout: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, body := b.do("GET", "/api/dead", "Cookie", cookie); resp.StatusCode != 401 {
		t.Errorf("read with the logged-out cookie: %d %s, want 401", resp.StatusCode, body)
	}
	resp, _ := b.post("/ui/dead/"+key+"/discard", "", "Cookie", cookie, "Content-Type", "application/x-www-form-urlencoded")
	if loc := resp.Header.Get("Location"); !strings.Contains(loc, "msg=login-first") {
		t.Errorf("discard with the logged-out cookie: redirect %q, want login-first", loc)
	}
	if len(b.deadLetters()) != 1 {
		t.Fatal("a logged-out cookie discarded a dead letter")
	}
	if resp, body := b.do("GET", "/api/dead", "Cookie", other); resp.StatusCode != 200 {
		t.Errorf("another session after the logout: %d %s, want 200", resp.StatusCode, body)
	}
}

// TestClassesHideErrorText: with a ReadToken configured, /api/classes
// and the dashboard show a class's hold (its state, since when, counts)
// without it, but not its reason or its last handler error, which can
// carry message data; with the read token, the admin token or a session
// they show them. Without a ReadToken everyone reads them. Before,
// /api/classes showed them to anyone.
func TestClassesHideErrorText(t *testing.T) {
	t.Parallel()
	const secret = "card 4111-1111-1111-1111 declined"
	b := setup(t, func(o *Options) { o.ReadToken = testReadToken })
	if resp, body := b.post("/api/classes/jobs/pause", `{"reason": "`+secret+`"}`, bearer(testToken)...); resp.StatusCode != 200 {
		t.Fatalf("pause: %d %s", resp.StatusCode, body)
	}
	resp, body := b.do("GET", "/api/classes")
	if resp.StatusCode != 200 || strings.Contains(string(body), secret) || !strings.Contains(string(body), `"state": "paused"`) {
		t.Errorf("/api/classes without a token: %d, want 200 with the hold's state and without its reason:\n%s", resp.StatusCode, body)
	}
	if _, page := b.do("GET", "/"); strings.Contains(string(page), secret) || !strings.Contains(string(page), "paused since") {
		t.Errorf("the dashboard without a session shows the hold's reason (or not the hold):\n%s", page)
	}
	if resp, body := b.do("GET", "/api/classes", bearer("wrong")...); resp.StatusCode != 401 {
		t.Errorf("/api/classes with a wrong token: %d %s, want 401", resp.StatusCode, body)
	}
	cookie := login(t, b, testReadToken)
	for _, hdr := range [][]string{bearer(testReadToken), bearer(testToken), {"Cookie", cookie}} {
		if resp, body := b.do("GET", "/api/classes", hdr...); resp.StatusCode != 200 || !strings.Contains(string(body), secret) {
			t.Errorf("/api/classes with %v: %d, want the reason:\n%s", hdr, resp.StatusCode, body)
		}
	}
	if _, page := b.do("GET", "/", "Cookie", cookie); !strings.Contains(string(page), secret) {
		t.Error("the dashboard with a read session does not show the hold's reason")
	}
	h := toHoldJSON(runtime.ClassHold{State: runtime.HoldSuspended, Reason: "3 failed", LastError: secret}).redacted()
	if h.LastError != "" || h.Reason != "" || h.State != runtime.HoldSuspended {
		t.Errorf("a redacted suspension: %+v", h)
	}
}
