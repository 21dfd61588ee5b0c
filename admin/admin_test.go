package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/internal/testio"
	"github.com/handoff-go/handoff/runtime"
)

func TestMain(m *testing.M) {
	// Every test runs for kafka-go, then for franz-go: the group tests
	// (deadgroup_test.go) consume from the embedded broker.
	goleak.VerifyTestMain(testio.BothClients(m),
		// kafka-go's package-level connection pool for the default
		// transport keeps an idle reaper per address.
		goleak.IgnoreAnyFunction("github.com/segmentio/kafka-go.(*connPool).discover"),
	)
}

const testToken = "s3cret-token"

// bundle is one test's Submit-only runtime (classes "jobs" and, ordered,
// "orders") served by the admin handler.
type bundle struct {
	t   *testing.T
	rt  *runtime.Runtime
	srv *httptest.Server

	cured   atomic.Bool       // poison values succeed once set
	unblock chan struct{}     // closed to let "block" values finish (after poison is cured)
	handled chan string       // IDs handled with success
	logs    testio.SyncBuffer // the handler's request log, JSON lines
	seq     atomic.Int64
}

// setup starts the runtime and the handler with opts (Gatherer and
// Logger are filled in unless mod clears them).
func setup(t *testing.T, mod func(*Options)) *bundle {
	t.Helper()
	return setupClasses(t, mod, "jobs", "orders")
}

// setupClasses is setup with the classes named jobs and (ordered) orders.
func setupClasses(t *testing.T, mod func(*Options), jobs, orders string) *bundle {
	t.Helper()
	b := &bundle{t: t, unblock: make(chan struct{}), handled: make(chan string, 100)}
	reg := prometheus.NewRegistry()
	handle := func(ctx context.Context, m *handoff.Message) error {
		v := string(m.Value)
		if strings.Contains(v, "poison") && !b.cured.Load() {
			return handoff.Permanent(errors.New("poisoned value"))
		}
		if strings.Contains(v, "block") {
			select {
			case <-b.unblock:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		b.handled <- m.ID
		return nil
	}
	rt, err := runtime.New(runtime.Config{
		StatePath:    filepath.Join(t.TempDir(), "state.db"),
		DrainTimeout: 30 * time.Second,
		Registerer:   reg,
		Group:        "billing-workers",
		Instance:     "billing-7f9c-2",
		Classes: []runtime.Class{
			{Name: jobs, Handler: handle, Workers: 2, QueueSize: 8},
			{Name: orders, Handler: handle, Workers: 2, QueueSize: 8, Ordered: true},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	b.rt = rt
	opts := Options{Token: testToken, Gatherer: reg, Refresh: -1,
		Logger: slog.New(slog.NewJSONHandler(&b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if mod != nil {
		mod(&opts)
	}
	h, err := NewHandler(rt, opts)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = httptest.NewServer(h)
	ran := make(chan error, 1)
	go func() {
		_, err := rt.Run(context.Background())
		ran <- err
	}()
	t.Cleanup(func() {
		b.srv.Close()
		b.release()
		rt.Shutdown(context.Background())
		select {
		case err := <-ran:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return")
		}
	})
	waitFor(t, "ready", rt.Ready)
	return b
}

// release lets blocked handlers finish (once).
func (b *bundle) release() {
	select {
	case <-b.unblock:
	default:
		close(b.unblock)
	}
}

// waitFor polls cond until it holds or 30s pass: it waits on the
// runtime's pools, not on a timer.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// submit hands a message with value v and key k to class and returns its ID.
func (b *bundle) submit(class, k, v string) string {
	b.t.Helper()
	id := fmt.Sprintf("m%d", b.seq.Add(1))
	if err := b.rt.Submit(context.Background(), class, &handoff.Message{ID: id, Key: []byte(k), Value: []byte(v)}); err != nil {
		b.t.Fatal(err)
	}
	return id
}

// deadLetters returns every dead letter.
func (b *bundle) deadLetters() []runtime.DeadLetter {
	b.t.Helper()
	dls, _, err := b.rt.DeadLetters("", "", 1000)
	if err != nil {
		b.t.Fatal(err)
	}
	return dls
}

// poison makes n dead letters in class (values poison-0 ...) and returns
// their keys in the order GET /api/dead lists them (the group's
// listing): by their last failure, then by key. With several workers
// that is not always submit order, nor the order they were saved in
// (a handler that failed first may be saved second).
func (b *bundle) poison(class string, n int) []string {
	b.t.Helper()
	before := len(b.deadLetters())
	for i := range n {
		b.submit(class, fmt.Sprintf("key-%d", i), fmt.Sprintf("poison-%d", i))
	}
	waitFor(b.t, "dead letters", func() bool { return len(b.deadLetters()) == before+n })
	dls := b.deadLetters()[before:] // new ones have higher keys in the file
	slices.SortFunc(dls, func(x, y runtime.DeadLetter) int {
		return cmp.Or(x.LastFailed.Compare(y.LastFailed), cmp.Compare(x.Key, y.Key))
	})
	var keys []string
	for _, dl := range dls {
		keys = append(keys, dl.Key)
	}
	return keys
}

// do sends a request; hdr is pairs of header names and values.
func (b *bundle) do(method, path string, hdr ...string) (*http.Response, []byte) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, nil)
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
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return resp, body
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// wantError checks a JSON error response: status, and an error text
// containing each of want.
func wantError(t *testing.T, resp *http.Response, body []byte, status int, want ...string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("%s %s: status %d, want %d; body %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %s: content type %q, want JSON", resp.Request.Method, resp.Request.URL.Path, ct)
	}
	var e errorJSON
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Errorf("%s %s: body is not a JSON error: %s", resp.Request.Method, resp.Request.URL.Path, body)
		return
	}
	for _, w := range want {
		if !strings.Contains(e.Error, w) {
			t.Errorf("%s %s: error %q does not say %q", resp.Request.Method, resp.Request.URL.Path, e.Error, w)
		}
	}
}

func decode[T any](t *testing.T, resp *http.Response, body []byte, status int) T {
	t.Helper()
	var v T
	if resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d; body %s", resp.Request.Method, resp.Request.URL, resp.StatusCode, status, body)
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%s %s: %v in %s", resp.Request.Method, resp.Request.URL, err, body)
	}
	return v
}

func TestNewHandlerOptions(t *testing.T) {
	if _, err := NewHandler(nil, Options{Token: " padded"}); !errors.Is(err, ErrConfig) ||
		!strings.Contains(err.Error(), "nil runtime") || !strings.Contains(err.Error(), "Token") {
		t.Errorf("want both problems reported, got %v", err)
	}
}

// TestProbes: /healthz answers while the process lives; /readyz turns 503
// as soon as the stop begins, while Run is still draining.
func TestProbes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, p := range []string{"/healthz", "/readyz"} {
		if resp, body := b.do("GET", p); resp.StatusCode != 200 || string(body) != "ok\n" {
			t.Errorf("%s: %d %q", p, resp.StatusCode, body)
		}
	}
	b.submit("jobs", "k", "block-1") // keeps the drain busy
	waitFor(t, "the handler to start", func() bool { return b.rt.Stats()[0].Running == 1 })
	stopped := make(chan struct{})
	go func() {
		b.rt.Shutdown(context.Background())
		close(stopped)
	}()
	waitFor(t, "/readyz 503", func() bool { resp, _ := b.do("GET", "/readyz"); return resp.StatusCode == 503 })
	select {
	case <-stopped:
		t.Fatal("the stop ended before the drain could")
	default:
	}
	if resp, _ := b.do("GET", "/healthz"); resp.StatusCode != 200 {
		t.Errorf("/healthz during the stop: %d", resp.StatusCode)
	}
	resp, body := b.do("GET", "/api/classes")
	if c := decode[classesJSON](t, resp, body, 200); c.Ready {
		t.Errorf("/api/classes says ready during the stop")
	}
	b.release()
	<-stopped
	if resp, _ := b.do("GET", "/readyz"); resp.StatusCode != 503 {
		t.Errorf("/readyz after the stop: %d", resp.StatusCode)
	}
	// The state file is closed: the dead-letter API says so.
	resp, body = b.do("GET", "/api/dead")
	wantError(t, resp, body, 503, "list dead letters", "not running")
	// A probe's 503 is the probe's answer, normal during a rollout: no
	// ERROR line for it (the runtime logs why it is not ready).
	for line := range strings.Lines(b.logs.String()) {
		if strings.Contains(line, `"path":"/readyz"`) && !strings.Contains(line, `"level":"DEBUG"`) {
			t.Errorf("a /readyz request logged above Debug: %s", line)
		}
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	t.Run("gatherer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.submit("jobs", "k", "v")
		<-b.handled
		resp, body := b.do("GET", "/metrics")
		if resp.StatusCode != 200 || !strings.Contains(string(body), `handoff_messages_total{class="jobs",outcome="succeeded"} 1`) {
			t.Errorf("/metrics: %d\n%s", resp.StatusCode, body)
		}
	})
	t.Run("no gatherer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(o *Options) { o.Gatherer = nil })
		resp, body := b.do("GET", "/metrics")
		wantError(t, resp, body, 404, "metrics are not enabled", "Gatherer")
	})
}

func TestClasses(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for range 3 {
		b.submit("jobs", "k", "v")
		<-b.handled
	}
	b.poison("jobs", 1)
	// The dead letter is in the state file before the class's counters
	// take its result in (the handler's result is counted once its write
	// is done): wait for the counters, not just the dead letter.
	var c classesJSON
	waitFor(t, "the classes to count the dead letter", func() bool {
		resp, body := b.do("GET", "/api/classes")
		c = decode[classesJSON](t, resp, body, 200)
		return len(c.Classes) > 0 && c.Classes[0].Failed == 1 && c.Classes[0].Running == 0
	})
	if !c.Ready || c.DrainTimeoutSeconds != 30 || len(c.Classes) != 2 {
		t.Fatalf("classes %+v", c)
	}
	jobs, orders := c.Classes[0], c.Classes[1]
	if jobs.Name != "jobs" || jobs.Workers != 2 || jobs.QueueSize != 8 || jobs.Succeeded != 3 || jobs.Failed != 1 || jobs.Ordered {
		t.Errorf("jobs %+v", jobs)
	}
	if orders.Name != "orders" || !orders.Ordered || orders.Topics == nil {
		t.Errorf("orders %+v", orders)
	}
}

func TestDeadLetterList(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	keys := b.poison("jobs", 3)
	b.poison("orders", 1)

	resp, body := b.do("GET", "/api/dead?class=jobs&limit=2")
	p1 := decode[deadPageJSON](t, resp, body, 200)
	if len(p1.DeadLetters) != 2 || p1.Next == "" || p1.DeadLetters[0].Key != keys[0] {
		t.Fatalf("page 1: %s", body)
	}
	resp, body = b.do("GET", fmt.Sprintf("/api/dead?class=jobs&limit=2&after=%s", p1.Next))
	p2 := decode[deadPageJSON](t, resp, body, 200)
	if len(p2.DeadLetters) != 1 || p2.Next != "" || p2.DeadLetters[0].Key != keys[2] {
		t.Fatalf("page 2: %s", body)
	}
	if strings.Contains(string(body), `"next"`) {
		t.Errorf("the last page has a next: %s", body)
	}
	resp, body = b.do("GET", "/api/dead")
	if all := decode[deadPageJSON](t, resp, body, 200); len(all.DeadLetters) != 4 {
		t.Errorf("all classes: %d dead letters", len(all.DeadLetters))
	}

	// keys are in save order, not submit order (see poison): find
	// poison-1's key.
	var k1 string
	for _, d := range b.deadLetters() {
		if string(d.Message.Value) == "poison-1" {
			k1 = d.Key
		}
	}
	resp, body = b.do("GET", fmt.Sprintf("/api/dead/%s", k1))
	dl := decode[deadJSON](t, resp, body, 200)
	if dl.Key != k1 || dl.Class != "jobs" || dl.ValueText == nil || *dl.ValueText != "poison-1" ||
		string(dl.Value) != "poison-1" || string(dl.MessageKey) != "key-1" || dl.Attempt != 1 ||
		!strings.Contains(dl.Error, "poisoned value") || dl.FirstFailed.IsZero() || dl.LastFailed.IsZero() {
		t.Errorf("dead letter %s", body)
	}
	// Bytes are base64 in the JSON, with a text twin.
	var raw map[string]any
	json.Unmarshal(body, &raw)
	if raw["value"] != "cG9pc29uLTE=" || raw["value_text"] != "poison-1" {
		t.Errorf("value rendering: %v %v", raw["value"], raw["value_text"])
	}

	for _, c := range []struct {
		path   string
		status int
		want   []string
	}{
		{"/api/dead?after=x", 400, []string{"after", `"x"`}},
		{"/api/dead?after=-1", 400, []string{"after"}},
		{"/api/dead?limit=0", 400, []string{"limit", "1 to 1000", `"0"`}},
		{"/api/dead?limit=abc", 400, []string{"limit", `"abc"`}},
		{"/api/dead?limit=5000", 400, []string{"limit"}},
		{"/api/dead/abc", 400, []string{"key", `"abc"`}},
		{"/api/dead/99999", 404, []string{"get dead letter 99999", "not found"}},
	} {
		resp, body := b.do("GET", c.path)
		wantError(t, resp, body, c.status, c.want...)
	}
}

// TestAuth: mutating endpoints refuse without the right token, and
// change nothing.
func TestAuth(t *testing.T) {
	t.Parallel()
	t.Run("no token configured", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(o *Options) { o.Token = "" })
		key := b.poison("jobs", 1)[0]
		for _, action := range []string{"requeue", "discard"} {
			resp, body := b.do("POST", fmt.Sprintf("/api/dead/%s/%s", key, action), bearer("anything")...)
			wantError(t, resp, body, 403, "no token is configured")
		}
		if len(b.deadLetters()) != 1 {
			t.Error("a refused request changed the dead letters")
		}
	})
	t.Run("wrong or missing token", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		key := b.poison("jobs", 1)[0]
		for _, action := range []string{"requeue", "discard"} {
			path := fmt.Sprintf("/api/dead/%s/%s", key, action)
			resp, body := b.do("POST", path)
			wantError(t, resp, body, 401, "missing bearer token")
			if resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			resp, body = b.do("POST", path, bearer("wrong")...)
			wantError(t, resp, body, 401, "wrong bearer token")
			resp, body = b.do("POST", path, bearer(testToken+"x")...)
			wantError(t, resp, body, 401, "wrong bearer token")
			resp, body = b.do("POST", path, "Authorization", "Basic "+testToken)
			wantError(t, resp, body, 401, "missing bearer token")
			// Auth is checked before the key: a bad key says nothing.
			resp, body = b.do("POST", "/api/dead/zzz/"+action)
			wantError(t, resp, body, 401)
		}
		if dls := b.deadLetters(); len(dls) != 1 || dls[0].Key != key {
			t.Errorf("a refused request changed the dead letters: %+v", dls)
		}
		if c := b.rt.Stats()[0]; c.Succeeded != 0 {
			t.Errorf("a refused requeue ran: %+v", c)
		}
	})
}

// TestRequeue: a requeued dead letter runs again; once it succeeds its
// record is gone. Requeueing it again meanwhile is a conflict.
func TestRequeue(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	keys := b.poison("jobs", 2)
	// Once cured, this one blocks when requeued: a second requeue conflicts.
	b.submit("jobs", "kb", "block-poison")
	waitFor(t, "the blocking dead letter", func() bool { return len(b.deadLetters()) == 3 })
	b.cured.Store(true)

	resp, body := b.do("POST", fmt.Sprintf("/api/dead/%s/requeue", keys[0]), bearer(testToken)...)
	if a := decode[actionJSON](t, resp, body, 202); a.Key != keys[0] || a.Status != "requeued" {
		t.Errorf("requeue answer %s", body)
	}
	select {
	case <-b.handled:
	case <-time.After(30 * time.Second):
		t.Fatal("the requeued message was not handled")
	}
	waitFor(t, "the dead letter to go", func() bool {
		resp, _ := b.do("GET", fmt.Sprintf("/api/dead/%s", keys[0]))
		return resp.StatusCode == 404
	})
	// The block-poison dead letter: requeue, then requeue again while it runs.
	dls := b.deadLetters()
	bk := dls[len(dls)-1].Key
	resp, body = b.do("POST", fmt.Sprintf("/api/dead/%s/requeue", bk), bearer(testToken)...)
	decode[actionJSON](t, resp, body, 202)
	resp, body = b.do("POST", fmt.Sprintf("/api/dead/%s/requeue", bk), bearer(testToken)...)
	wantError(t, resp, body, 409, fmt.Sprintf("requeue dead letter %s", bk), "already requeued")
	resp, body = b.do("POST", fmt.Sprintf("/api/dead/%s/discard", bk), bearer(testToken)...)
	wantError(t, resp, body, 409, fmt.Sprintf("discard dead letter %s", bk), "already requeued")
	b.release()
	<-b.handled

	resp, body = b.do("POST", "/api/dead/99999/requeue", bearer(testToken)...)
	wantError(t, resp, body, 404, "requeue dead letter 99999", "not found")
	resp, body = b.do("POST", "/api/dead/1x/requeue", bearer(testToken)...)
	wantError(t, resp, body, 400, "key", `"1x"`)
	waitFor(t, "the second requeued dead letter to go", func() bool { return len(b.deadLetters()) == 1 })
	if dls := b.deadLetters(); dls[0].Key != keys[1] {
		t.Errorf("dead letters left %+v, want only %s", dls, keys[1])
	}

	// The log names requests, never message contents.
	logs := b.logs.String()
	if !strings.Contains(logs, fmt.Sprintf(`"path":"/api/dead/%s/requeue","status":202`, keys[0])) || !strings.Contains(logs, `"took":`) {
		t.Errorf("requeue not logged:\n%s", logs)
	}
	if strings.Contains(logs, "poison-") || strings.Contains(logs, testToken) {
		t.Errorf("the log shows a message value or the token:\n%s", logs)
	}
}

func TestDiscard(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	keys := b.poison("jobs", 2)
	path := fmt.Sprintf("/api/dead/%s/discard", keys[0])
	resp, body := b.do("POST", path, bearer(testToken)...)
	if a := decode[actionJSON](t, resp, body, 200); a.Status != "discarded" {
		t.Errorf("discard answer %s", body)
	}
	resp, body = b.do("GET", fmt.Sprintf("/api/dead/%s", keys[0]))
	wantError(t, resp, body, 404)
	resp, body = b.do("POST", path, bearer(testToken)...)
	wantError(t, resp, body, 404, fmt.Sprintf("discard dead letter %s", keys[0]), "not found")
	if dls := b.deadLetters(); len(dls) != 1 || dls[0].Key != keys[1] {
		t.Errorf("dead letters left %+v", dls)
	}
}

func TestMethodsAndPaths(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	key := b.poison("jobs", 1)[0]
	for _, c := range []struct {
		method, path, allow string
	}{
		{"GET", fmt.Sprintf("/api/dead/%s/requeue", key), "POST"},
		{"DELETE", fmt.Sprintf("/api/dead/%s", key), "GET, HEAD"},
		{"PUT", fmt.Sprintf("/api/dead/%s/discard", key), "POST"},
		{"POST", "/api/classes", "GET, HEAD"},
		{"POST", "/healthz", "GET, HEAD"},
		{"POST", "/", "GET, HEAD"},
		{"GET", "/ui/login", "POST"},
	} {
		resp, body := b.do(c.method, c.path, bearer(testToken)...)
		wantError(t, resp, body, 405, "method "+c.method+" not allowed")
		if got := resp.Header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
	resp, body := b.do("GET", "/api/nothing")
	wantError(t, resp, body, 404, "no endpoint /api/nothing")
	if len(b.deadLetters()) != 1 {
		t.Error("a refused request changed the dead letters")
	}
}

func TestParked(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.poison("orders", 1) // key-0 is blocked behind its dead letter
	b.submit("orders", "key-0", "later")
	var parked struct {
		Parked []parkedJSON `json:"parked"`
	}
	waitFor(t, "a parked key", func() bool {
		resp, body := b.do("GET", "/api/parked")
		parked = decode[struct {
			Parked []parkedJSON `json:"parked"`
		}](t, resp, body, 200)
		return len(parked.Parked) == 1
	})
	p := parked.Parked[0]
	if p.Class != "orders" || string(p.Key) != "key-0" || p.KeyText == nil || *p.KeyText != "key-0" || p.Count != 1 || p.Oldest.IsZero() {
		t.Errorf("parked %+v", p)
	}
}

func TestDelayed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	due := time.Now().Add(time.Hour)
	for i := range 3 {
		m := &handoff.Message{ID: fmt.Sprintf("later-%d", i), Value: []byte{0xff, byte(i)}}
		if err := b.rt.Schedule(context.Background(), "jobs", m, due.Add(time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	type delayedPage struct {
		Delayed []delayedJSON `json:"delayed"`
		Next    string        `json:"next"`
	}
	resp, body := b.do("GET", "/api/delayed?limit=2")
	p1 := decode[delayedPage](t, resp, body, 200)
	if len(p1.Delayed) != 2 || p1.Next == "" || p1.Delayed[0].ID != "later-0" || p1.Delayed[0].ValueText != nil ||
		p1.Delayed[0].Class != "jobs" || p1.Delayed[0].Due.IsZero() {
		t.Fatalf("page 1: %s", body)
	}
	resp, body = b.do("GET", "/api/delayed?limit=2&after="+url.QueryEscape(p1.Next))
	p2 := decode[delayedPage](t, resp, body, 200)
	if len(p2.Delayed) != 1 || p2.Delayed[0].ID != "later-2" || p2.Next != "" {
		t.Fatalf("page 2: %s", body)
	}
	resp, body = b.do("GET", "/api/delayed?after=***")
	wantError(t, resp, body, 400, "after", "cursor")
	resp, body = b.do("GET", "/api/delayed?limit=-3")
	wantError(t, resp, body, 400, "limit")
}

// TestDashboard drives the page's forms over HTTP: the login, a refused
// action without a session, a cross-origin post, requeue and discard.
func TestDashboard(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	keys := b.poison("jobs", 2)
	b.cured.Store(true)

	resp, body := b.do("GET", "/")
	page := string(body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{`id="class-jobs"`, `id="class-orders"`, fmt.Sprintf(`id="dead-%s"`, keys[0]),
		fmt.Sprintf(`id="requeue-%s" disabled`, keys[1]), `id="login"`, `<base href="/">`, "poisoned value"} {
		if !strings.Contains(page, want) {
			t.Errorf("dashboard lacks %s", want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'nonce-") {
		t.Errorf("CSP %q", csp)
	}

	form := func(path string, cookie *http.Cookie, vals url.Values, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", b.srv.URL+path, strings.NewReader(vals.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	wantBack := func(resp *http.Response, msg string) {
		t.Helper()
		if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "msg="+msg) {
			t.Errorf("%s: %d to %q, want a redirect with msg=%s", resp.Request.URL.Path, resp.StatusCode, resp.Header.Get("Location"), msg)
		}
	}
	requeue := fmt.Sprintf("/ui/dead/%s/requeue", keys[0])
	wantBack(form(requeue, nil, nil), "login-first")
	wantBack(form(requeue, &http.Cookie{Name: sessionCookie, Value: "1.abc"}, nil), "login-first")
	resp = form("/ui/login", nil, url.Values{"token": {"wrong"}})
	wantBack(resp, "bad-token")
	if len(resp.Cookies()) != 0 {
		t.Error("a wrong token got a session")
	}
	resp = form("/ui/login", nil, url.Values{"token": {testToken}})
	wantBack(resp, "logged-in")
	if len(resp.Cookies()) != 1 {
		t.Fatalf("login set %d cookies", len(resp.Cookies()))
	}
	session := resp.Cookies()[0]
	if !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/" || strings.Contains(session.Value, testToken) {
		t.Errorf("session cookie %+v", session)
	}
	if len(b.deadLetters()) != 2 {
		t.Fatal("a refused dashboard action changed the dead letters")
	}
	// A cross-site post is refused even with the session.
	resp = form(requeue, session, nil, "Sec-Fetch-Site", "cross-site")
	if resp.StatusCode != http.StatusForbidden || len(b.deadLetters()) != 2 {
		t.Errorf("cross-site post: %d", resp.StatusCode)
	}

	wantBack(form(requeue, session, nil), "requeued")
	<-b.handled
	waitFor(t, "the dead letter to go", func() bool { return len(b.deadLetters()) == 1 })
	wantBack(form(fmt.Sprintf("/ui/dead/%s/discard", keys[1]), session, nil), "discarded")
	wantBack(form(fmt.Sprintf("/ui/dead/%s/discard", keys[1]), session, nil), "not-found")
	wantBack(form("/ui/dead/x/discard", session, nil), "bad-key")
	if len(b.deadLetters()) != 0 {
		t.Errorf("dead letters left: %+v", b.deadLetters())
	}

	req, _ := http.NewRequest("GET", b.srv.URL+"/?msg=discarded&key="+fmt.Sprint(keys[1]), nil)
	req.AddCookie(session)
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	page = string(body)
	for _, want := range []string{fmt.Sprintf("Dead letter %s discarded.", keys[1]), `id="no-dead"`, `id="session"`} {
		if !strings.Contains(page, want) {
			t.Errorf("dashboard after discard lacks %s", want)
		}
	}
	// Flash codes are a fixed set: the query cannot inject text.
	_, body = b.do("GET", "/?msg=%3Cscript%3E&key=%3Cb%3E")
	if strings.Contains(string(body), "<b>") || strings.Contains(string(body), `id="flash"`) {
		t.Error("an unknown flash code was rendered")
	}

	resp = form("/ui/logout", session, nil)
	wantBack(resp, "logged-out")
	if c := resp.Cookies(); len(c) != 1 || c[0].MaxAge >= 0 {
		t.Errorf("logout cookies %+v", c)
	}
}

// TestDashboardNoToken: without a token the page is read-only and the
// forms refuse.
func TestDashboardNoToken(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *Options) { o.Token = "" })
	key := b.poison("jobs", 1)[0]
	_, body := b.do("GET", "/")
	if !strings.Contains(string(body), "no admin token configured") || strings.Contains(string(body), `id="login"`) ||
		!strings.Contains(string(body), fmt.Sprintf(`id="requeue-%s" disabled`, key)) {
		t.Errorf("read-only dashboard:\n%s", body)
	}
	resp, _ := b.do("POST", fmt.Sprintf("/ui/dead/%s/requeue", key))
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "msg=no-token") {
		t.Errorf("requeue without a token: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, _ = b.do("POST", "/ui/login")
	if !strings.Contains(resp.Header.Get("Location"), "msg=no-token") {
		t.Errorf("login without a token: %s", resp.Header.Get("Location"))
	}
	if len(b.deadLetters()) != 1 {
		t.Error("a refused dashboard action changed the dead letters")
	}
}

// TestMountedUnderPrefix: behind http.StripPrefix the page's links, the
// redirects and the cookie stay under the prefix.
func TestMountedUnderPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	mux := http.NewServeMux()
	h := b.srv.Config.Handler
	mux.Handle("/admin/", http.StripPrefix("/admin", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/admin/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `<base href="/admin/">`) {
		t.Errorf("base under a prefix:\n%s", body)
	}
	resp, err = noRedirect.PostForm(srv.URL+"/admin/ui/login", url.Values{"token": {testToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); !strings.HasPrefix(loc, "/admin/?") || len(resp.Cookies()) != 1 || resp.Cookies()[0].Path != "/admin/" {
		t.Errorf("login under a prefix: %s %+v", loc, resp.Cookies())
	}
	resp, err = http.Get(srv.URL + "/admin/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/admin/readyz: %d", resp.StatusCode)
	}
}

func TestServe(t *testing.T) {
	t.Parallel()
	if _, err := Listen("no-port"); err == nil {
		t.Error("Listen accepted an address without a port")
	}
	ln, err := Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	if host, _, _ := strings.Cut(ln.Addr().String(), ":"); host != "127.0.0.1" {
		t.Errorf("an address without a host bound %s, want the loopback", ln.Addr())
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hi") }))
	}()
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hi" {
		t.Errorf("served %q", body)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve after ctx ended: %v", err)
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/"); err == nil {
		t.Error("still serving after Serve returned")
	}
}

// TestDashboardNamesAndCounts: the page and /api/classes name the
// instance and the group and say since when the counters count; a
// message parked behind its key's dead letter is counted parked, not
// failed. Before, neither name was shown, nor the start, and the card
// said "failed 4" for one dead letter and three parked messages.
func TestDashboardNamesAndCounts(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.poison("orders", 1) // key-0 is blocked behind its dead letter
	for i := range 3 {
		b.submit("orders", "key-0", fmt.Sprint("later-", i))
	}
	var orders map[string]any
	var out map[string]any
	waitFor(t, "three parked", func() bool {
		resp, body := b.do("GET", "/api/classes")
		out = decode[map[string]any](t, resp, body, 200)
		for _, c := range out["classes"].([]any) {
			if c := c.(map[string]any); c["name"] == "orders" {
				orders = c
			}
		}
		return orders["parked"] == 3.0
	})
	if orders["failed"] != 1.0 {
		t.Errorf("orders: failed %v, want 1 (the dead letter; the parked are not failures): %v", orders["failed"], orders)
	}
	if out["instance"] != "billing-7f9c-2" || out["group"] != "billing-workers" || out["counting_since"] == nil {
		t.Errorf("/api/classes lacks the instance, group or counting_since: %v", out)
	}
	_, body := b.do("GET", "/")
	page := string(body)
	since := b.rt.Started().UTC().Format("2006-01-02")
	for _, want := range []string{`id="instance">billing-7f9c-2<`, `id="group">billing-workers<`, "counters since " + since,
		`id="failed-orders">1<`, `id="parked-orders">3<`} {
		if !strings.Contains(page, want) {
			t.Errorf("dashboard lacks %s", want)
		}
	}
}
