package admin

import (
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// post sends a POST with body and the headers in hdr (pairs).
func (b *bundle) post(path, body string, hdr ...string) (*http.Response, []byte) {
	b.t.Helper()
	req, err := http.NewRequest("POST", b.srv.URL+path, strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return resp, out
}

// TestPauseResumeAPI: pause and resume are token-protected, an unknown
// class is 404, the pause holds the class's messages and shows in
// /api/classes, /metrics and the dashboard, and resume lets them run.
func TestPauseResumeAPI(t *testing.T) {
	t.Parallel()
	t.Run("no token configured", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(o *Options) { o.Token = "" })
		for _, action := range []string{"pause", "resume"} {
			resp, body := b.post("/api/classes/jobs/"+action, `{"reason":"x"}`, bearer("anything")...)
			wantError(t, resp, body, 403, "no token is configured")
		}
		if s := b.rt.Stats()[0].Hold.State; s != "running" {
			t.Errorf("a refused pause left the class %s", s)
		}
	})
	b := setup(t, nil)
	for _, action := range []string{"pause", "resume"} {
		path := "/api/classes/jobs/" + action
		resp, body := b.post(path, `{"reason":"x"}`)
		wantError(t, resp, body, 401, "missing bearer token")
		resp, body = b.post(path, `{"reason":"x"}`, bearer("wrong")...)
		wantError(t, resp, body, 401, "wrong bearer token")
		resp, body = b.post("/api/classes/nope/"+action, "", bearer(testToken)...)
		wantError(t, resp, body, 404, "nope")
	}
	if s := b.rt.Stats()[0].Hold.State; s != "running" {
		t.Fatalf("a refused pause left the class %s", s)
	}
	resp, body := b.post("/api/classes/jobs/pause", `{"reason":`, bearer(testToken)...)
	wantError(t, resp, body, 400, "pause body")

	resp, body = b.post("/api/classes/jobs/pause", `{"reason":"db migration"}`, bearer(testToken)...)
	if got := decode[classActionJSON](t, resp, body, 200); got.Status != "paused" || got.Class != "jobs" {
		t.Fatalf("pause answered %+v", got)
	}
	id := b.submit("jobs", "k", "v")
	waitFor(t, "the message queued", func() bool { return b.rt.Stats()[0].Queued == 1 })
	resp, body = b.do("GET", "/api/classes")
	cls := decode[classesJSON](t, resp, body, 200)
	if h := cls.Classes[0].Hold; h.State != "paused" || h.Reason != "db migration" || h.Since.IsZero() ||
		cls.Classes[0].Running != 0 || cls.Classes[0].Succeeded != 0 {
		t.Fatalf("/api/classes while paused: %+v", cls.Classes[0])
	}
	if h := cls.Classes[1].Hold; h.State != "running" {
		t.Fatalf("orders is %s", h.State)
	}
	_, body = b.do("GET", "/metrics")
	if !strings.Contains(string(body), `handoff_class_paused{class="jobs"} 1`) ||
		!strings.Contains(string(body), `handoff_class_suspended{class="jobs"} 0`) ||
		!strings.Contains(string(body), `handoff_class_suspensions_total{class="jobs"} 0`) {
		t.Errorf("/metrics lacks the pause:\n%s", body)
	}
	_, body = b.do("GET", "/")
	for _, want := range []string{`id="hold-jobs"`, "paused since", "db migration", `id="resume-jobs"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("dashboard lacks %q", want)
		}
	}
	select {
	case got := <-b.handled:
		t.Fatalf("%s handled while paused", got)
	default:
	}

	resp, body = b.post("/api/classes/jobs/resume", "", bearer(testToken)...)
	if got := decode[classActionJSON](t, resp, body, 200); got.Status != "resumed" {
		t.Fatalf("resume answered %+v", got)
	}
	select {
	case got := <-b.handled:
		if got != id {
			t.Fatalf("handled %s, want %s", got, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("not handled after the resume")
	}
	if s := b.rt.Stats()[0].Hold.State; s != "running" {
		t.Fatalf("after resume: %s", s)
	}
}

// TestDashboardPauseOddClassNames: the dashboard's pause and resume
// buttons work for a class whose name holds characters that mean
// something in a URL path ("/", "?", "#", "%"): its form posts to that
// class, not to a path the routes do not know or to another class.
func TestDashboardPauseOddClassNames(t *testing.T) {
	t.Parallel()
	for _, names := range [][2]string{{"billing/v2", "q?x"}, {"a#b", "50%2Foff"}} {
		b := setupClasses(t, nil, names[0], names[1])
		cookie := login(t, b, testToken)
		base, err := url.Parse(b.srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		// press submits the form of the button with id as a browser
		// does: to its action resolved against the page.
		press := func(id string) {
			t.Helper()
			_, body := b.do("GET", "/", "Cookie", cookie)
			re := regexp.MustCompile(`<form method="post" action="([^"]*)">[^<]*(<input[^>]*>[^<]*)?<button[^>]*id="` + regexp.QuoteMeta(html.EscapeString(id)) + `"`)
			m := re.FindSubmatch(body)
			if m == nil {
				t.Fatalf("dashboard has no button %s:\n%s", id, body)
			}
			action, err := url.Parse(html.UnescapeString(string(m[1])))
			if err != nil {
				t.Fatalf("button %s: action %q: %v", id, m[1], err)
			}
			resp, _ := b.post(base.ResolveReference(action).RequestURI(), "", "Cookie", cookie,
				"Content-Type", "application/x-www-form-urlencoded")
			if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || strings.Contains(loc, "class-unknown") {
				t.Errorf("button %s (action %q): status %d, location %q", id, m[1], resp.StatusCode, loc)
			}
		}
		for i, name := range names {
			press("pause-" + name)
			if s := b.rt.Stats()[i].Hold.State; s != "paused" {
				t.Errorf("class %q after its pause button: %s", name, s)
			}
			press("resume-" + name)
			if s := b.rt.Stats()[i].Hold.State; s != "running" {
				t.Errorf("class %q after its resume button: %s", name, s)
			}
		}
	}
}

// TestPauseReasonEscaped: a pause's reason is bounded by its length, not
// by how its JSON spells it: a reason of maxReason bytes that a JSON
// encoder escapes ("<" as \u003c, as encoding/json does) pauses the
// class, and a body too large to hold any allowed reason is refused
// saying so. Before, the body was cut at maxReason+512 bytes and the
// reason got "unexpected end of JSON input".
func TestPauseReasonEscaped(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reason := strings.Repeat("<", maxReason)
	body, err := json.Marshal(pauseJSON{Reason: reason})
	if err != nil {
		t.Fatal(err)
	}
	resp, out := b.post("/api/classes/jobs/pause", string(body), bearer(testToken)...)
	if got := decode[classActionJSON](t, resp, out, 200); got.Status != "paused" {
		t.Fatalf("pause answered %+v", got)
	}
	if h := b.rt.Stats()[0].Hold; h.State != "paused" || h.Reason != reason {
		t.Fatalf("jobs after the pause: %s, reason of %d bytes", h.State, len(h.Reason))
	}
	resp, out = b.post("/api/classes/orders/pause", `{"reason":"x"}`+strings.Repeat(" ", 8*maxReason), bearer(testToken)...)
	wantError(t, resp, out, http.StatusRequestEntityTooLarge, "pause body", "too large")
	if s := b.rt.Stats()[1].Hold.State; s != "running" {
		t.Errorf("a refused pause left orders %s", s)
	}
}

// TestDashboardPauseReasonCutAtRune: the dashboard's pause form cuts a
// reason longer than maxReason bytes at a character's boundary, so a
// character of several bytes across the limit is left out whole, not cut
// into bytes that are no UTF-8 (which the JSON API and the meta topic
// would turn into U+FFFD).
func TestDashboardPauseReasonCutAtRune(t *testing.T) {
	t.Parallel()
	b := setupClasses(t, nil, "jobs", "orders")
	cookie := login(t, b, testToken)
	reason := strings.Repeat("a", maxReason-1) + "é and more"
	resp, _ := b.post("/ui/classes/orders/pause", url.Values{"reason": {reason}}.Encode(), "Cookie", cookie,
		"Content-Type", "application/x-www-form-urlencoded", "Origin", b.srv.URL)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("pause form: status %d", resp.StatusCode)
	}
	got := b.rt.Stats()[1].Hold.Reason
	if want := strings.Repeat("a", maxReason-1); got != want {
		t.Errorf("reason kept: %d bytes ending %q (valid UTF-8: %v), want the %d bytes before the é", len(got), got[max(0, len(got)-4):],
			utf8.ValidString(got), len(want))
	}
}
