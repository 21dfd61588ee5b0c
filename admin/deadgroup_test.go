package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/testio"
	"github.com/handoff-go/handoff/runtime"
)

// groupTopic is the input topic of the group tests, of 2 partitions.
const groupTopic = "jobs"

// group is two instances, a and b, of one consumer group on an embedded
// broker, with the changelog on, each owning one partition of
// groupTopic and served by its own admin handler.
type group struct {
	t      *testing.T
	broker *devbroker.Broker
	a, b   *member
	cured  atomic.Bool // "poison" values succeed once set

	mu      sync.Mutex
	handled map[string]int // successes by message key
}

// member is one instance of a group.
type member struct {
	name string
	rt   *runtime.Runtime
	srv  *httptest.Server
	logs testio.SyncBuffer
}

// groupSetup starts the broker, the two instances and their handlers
// (Options.Token testToken), and waits until each owns one partition.
func groupSetup(t *testing.T) *group {
	t.Helper()
	broker, err := devbroker.Start(devbroker.Config{Topics: []string{groupTopic}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	g := &group{t: t, broker: broker, handled: map[string]int{}}
	g.a = g.start("a")
	waitFor(t, "a ready", g.a.rt.Ready)
	g.b = g.start("b")
	waitFor(t, "each instance owning one partition", func() bool {
		return g.a.rt.Ready() && g.b.rt.Ready() && g.a.rt.Stats()[0].Partitions == 1 && g.b.rt.Stats()[0].Partitions == 1
	})
	return g
}

// start starts instance name and its handler; both stop at the test's
// end.
func (g *group) start(name string) *member {
	t := g.t
	m := &member{name: name}
	handle := func(ctx context.Context, msg *handoff.Message) error {
		if strings.HasPrefix(string(msg.Value), "poison") && !g.cured.Load() {
			return handoff.Permanent(fmt.Errorf("poisoned value %s", msg.Value))
		}
		g.mu.Lock()
		g.handled[string(msg.Key)]++
		g.mu.Unlock()
		return nil
	}
	reg := prometheus.NewRegistry()
	rt, err := runtime.New(runtime.Config{
		Client:  runtime.Client(testio.Client()),
		Brokers: g.broker.Addrs(), Group: "admin-group", Instance: name, StatePath: filepath.Join(t.TempDir(), name+".db"),
		Classes:    []runtime.Class{{Name: "jobs", Topics: []string{groupTopic}, Handler: handle, Workers: 2, QueueSize: 8}},
		Registerer: reg, DrainTimeout: 10 * time.Second, HardStopGrace: time.Second,
		CommitInterval: 100 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond, SessionTimeout: 6 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.rt = rt
	h, err := NewHandler(rt, Options{Token: testToken, Gatherer: reg, Refresh: -1,
		Logger: slog.New(slog.NewJSONHandler(&m.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	m.srv = httptest.NewServer(h)
	ran := make(chan error, 1)
	go func() {
		_, err := rt.Run(context.Background())
		ran <- err
	}()
	t.Cleanup(func() {
		m.srv.Close()
		rt.Shutdown(context.Background())
		select {
		case err := <-ran:
			if err != nil {
				t.Errorf("Run of %s: %v", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run of %s did not return", name)
		}
	})
	return m
}

// poison produces n poison messages (keys poison-<from>.. spread over
// both partitions) and waits until the group holds them as dead letters.
func (g *group) poison(from, n int) {
	g.t.Helper()
	before := len(g.local(g.a)) + len(g.local(g.b))
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Topic: groupTopic, Key: fmt.Appendf(nil, "poison-%d", from+i), Value: []byte("poison")}
	}
	w := devbroker.NewWriter(g.broker.Addrs())
	defer devbroker.CloseWriter(w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		g.t.Fatal(err)
	}
	waitFor(g.t, fmt.Sprintf("%d dead letters", before+n), func() bool {
		return len(g.local(g.a))+len(g.local(g.b)) == before+n
	})
	// The other instance lists them once its changelog has them.
	waitFor(g.t, fmt.Sprintf("%d dead letters in both instances' group listings", before+n), func() bool {
		for _, m := range []*member{g.a, g.b} {
			_, _, total, err := m.rt.GroupDeadLetters(context.Background(), runtime.DeadFilter{}, "", 1)
			if err != nil || total != before+n {
				return false
			}
		}
		return true
	})
}

// local returns the dead letters m's state file holds (the partition it
// owns).
func (g *group) local(m *member) []runtime.DeadLetter {
	g.t.Helper()
	dls, _, err := m.rt.DeadLetters("", "", 1000)
	if err != nil {
		g.t.Fatal(err)
	}
	return dls
}

// handledCount returns how often the message of key was handled with
// success.
func (g *group) handledCount(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.handled[key]
}

// send sends a request to m with body (JSON when it starts with "{",
// else a form; none when "") and headers hdr (pairs).
func (m *member) send(t *testing.T, method, path, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, m.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.HasPrefix(body, "{"):
		req.Header.Set("Content-Type", "application/json")
	case body != "":
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, out
}

// deadPage is the body of GET /api/dead, either scope.
type deadPage struct {
	DeadLetters []struct {
		Key            string  `json:"key"`
		MessageKeyText *string `json:"message_key_text"`
		Partition      int     `json:"partition"`
		InputPartition *int32  `json:"input_partition"`
		Owner          *string `json:"owner"`
	} `json:"dead_letters"`
	Next  string `json:"next"`
	Total int    `json:"total"`
}

// waitOp polls GET /api/dead/ops/{id} on m until the operation is over
// (canceled, or done with every dead letter it names reported on) and
// returns it. An instance knows an operation started
// through another once it followed the meta topic (about a second): a
// 404 until then is waited out.
func (m *member) waitOp(t *testing.T, id string) opJSON {
	t.Helper()
	var op opJSON
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, body := m.send(t, "GET", "/api/dead/ops/"+url.PathEscape(id), "")
		// A 404: started through the other instance, not followed yet.
		if resp.StatusCode != http.StatusNotFound {
			op = decode[opJSON](t, resp, body, 200)
			// "done" as soon as the owners that reported are; the
			// others' statuses may be on their way.
			if op.State == "canceled" || op.State == "done" && op.Unreported == 0 {
				return op
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("operation %s not over on %s within 30s: %+v", id, m.name, op)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitKnown waits until m knows operation id (it follows the meta topic
// about a second behind the instance that started it).
func (m *member) waitKnown(t *testing.T, id string) {
	t.Helper()
	waitFor(t, m.name+" knowing operation "+id, func() bool {
		resp, _ := m.send(t, "GET", "/api/dead/ops/"+url.PathEscape(id), "")
		return resp.StatusCode == http.StatusOK
	})
}

// TestGroupDeadLetterList: with the changelog on, GET /api/dead through
// either instance lists the dead letters of both partitions, each with
// its owner and input partition, filtered and paged with the total as
// before; scope=local lists the instance's own only, without owners;
// GET /api/dead/{key} of the other instance's dead letter answers it.
func TestGroupDeadLetterList(t *testing.T) {
	g := groupSetup(t)
	g.poison(0, 8)
	owner := map[string]string{}
	for _, m := range []*member{g.a, g.b} {
		dls := g.local(m)
		if len(dls) == 0 {
			t.Fatalf("instance %s holds no dead letter: the test needs both partitions", m.name)
		}
		for _, dl := range dls {
			owner[dl.Key] = m.name
		}
	}
	for _, m := range []*member{g.a, g.b} {
		resp, body := m.send(t, "GET", "/api/dead", "")
		p := decode[deadPage](t, resp, body, 200)
		if p.Total != 8 || len(p.DeadLetters) != 8 {
			t.Fatalf("GET /api/dead through %s: total %d, %d listed; want 8 of both partitions:\n%s", m.name, p.Total, len(p.DeadLetters), body)
		}
		for _, d := range p.DeadLetters {
			if d.Owner == nil || *d.Owner != owner[d.Key] || d.InputPartition == nil || int(*d.InputPartition) != d.Partition {
				t.Errorf("through %s: dead letter %s owner %v input partition %v (message partition %d), want owner %s",
					m.name, d.Key, d.Owner, d.InputPartition, d.Partition, owner[d.Key])
			}
		}
		// Paged by 3, filtered: every one once, the total on each page.
		var got []string
		after := ""
		for range 5 {
			resp, body := m.send(t, "GET", "/api/dead?error=poisoned&limit=3&after="+url.QueryEscape(after), "")
			p := decode[deadPage](t, resp, body, 200)
			if p.Total != 8 {
				t.Errorf("through %s: a page's total %d, want 8", m.name, p.Total)
			}
			for _, d := range p.DeadLetters {
				got = append(got, d.Key)
			}
			if after = p.Next; after == "" {
				break
			}
		}
		if slices.Sort(got); len(slices.Compact(got)) != 8 {
			t.Errorf("through %s: pages of 3 listed %v, want the 8 once each", m.name, got)
		}
		resp, body = m.send(t, "GET", "/api/dead?scope=local", "")
		p = decode[deadPage](t, resp, body, 200)
		if p.Total != len(g.local(m)) {
			t.Errorf("scope=local through %s: total %d, want its own %d", m.name, p.Total, len(g.local(m)))
		}
		for _, d := range p.DeadLetters {
			if owner[d.Key] != m.name || d.Owner != nil {
				t.Errorf("scope=local through %s lists %s (owner %s, field %v)", m.name, d.Key, owner[d.Key], d.Owner)
			}
		}
	}
	resp, body := g.a.send(t, "GET", "/api/dead?scope=all", "")
	wantError(t, resp, body, 400, "scope", `"all"`)
	for k, o := range owner {
		if o == "b" {
			resp, body := g.a.send(t, "GET", "/api/dead/"+k, "")
			if d := decode[deadJSON](t, resp, body, 200); d.Key != k {
				t.Errorf("GET /api/dead/%s through a: %s", k, body)
			}
			break
		}
	}
}

// TestGroupBulkRequeue: a dry run through one instance counts the
// selection over both partitions and changes nothing; the requeue
// through it, at a rate, requeues the dead letters of both owners once
// each; its progress, who and selection show through the other
// instance too, in /api/dead/ops; an operation's ID that exists nowhere
// is 404.
func TestGroupBulkRequeue(t *testing.T) {
	g := groupSetup(t)
	g.poison(0, 6)
	auth := bearer(testToken)

	resp, body := g.a.send(t, "POST", "/api/dead/requeue", `{"error": "poisoned", "dry_run": true}`, auth...)
	dry := decode[opJSON](t, resp, body, 200)
	owners := map[string]bool{}
	for _, d := range dry.Sample {
		owners[d.Owner] = true
	}
	if dry.State != "dry-run" || dry.Matched != 6 || len(dry.Sample) != 6 || !owners["a"] || !owners["b"] || dry.ID != "" {
		t.Fatalf("dry run: %s", body)
	}
	if n := len(g.local(g.a)) + len(g.local(g.b)); n != 6 {
		t.Fatalf("after the dry run, %d dead letters, want the 6", n)
	}

	g.cured.Store(true)
	resp, body = g.a.send(t, "POST", "/api/dead/requeue", "error=poisoned&rate=20", auth...)
	started := decode[opJSON](t, resp, body, 202)
	if started.ID == "" || started.Matched != 6 || started.Action != "requeue" || started.Who != "127.0.0.1" ||
		started.Selection["error"] != "poisoned" || resp.Header.Get("Location") != "/api/dead/ops/"+url.PathEscape(started.ID) {
		t.Fatalf("requeue: Location %q, %s", resp.Header.Get("Location"), body)
	}
	op := g.b.waitOp(t, started.ID)
	if op.State != "done" || op.Done != 6 || op.Left != 0 || op.FailedAgain != 0 || op.Via != "a" || op.Who != "127.0.0.1" {
		t.Errorf("the operation as b shows it when over: %+v", op)
	}
	waitFor(t, "the requeued handled", func() bool {
		return len(g.local(g.a))+len(g.local(g.b)) == 0
	})
	for i := range 6 {
		if n := g.handledCount(fmt.Sprintf("poison-%d", i)); n != 1 {
			t.Errorf("poison-%d handled %d times, want once", i, n)
		}
	}
	for _, m := range []*member{g.a, g.b} {
		resp, body := m.send(t, "GET", "/api/dead/ops", "")
		ops := decode[struct{ Ops []opJSON }](t, resp, body, 200)
		if len(ops.Ops) == 0 || ops.Ops[0].ID != started.ID || ops.Ops[0].Who != "127.0.0.1" || ops.Ops[0].Matched != 6 {
			t.Errorf("GET /api/dead/ops through %s: %s", m.name, body)
		}
	}
	resp, body = g.b.send(t, "GET", "/api/dead/ops/no-such-op", "")
	wantError(t, resp, body, 404)
	// A selection of none: a dry run counts 0, an operation is 404.
	resp, body = g.a.send(t, "POST", "/api/dead/requeue", `{"key": "nobody", "dry_run": true}`, auth...)
	if dry := decode[opJSON](t, resp, body, 200); dry.Matched != 0 || len(dry.Sample) != 0 {
		t.Errorf("dry run of a selection of none: %s", body)
	}
	resp, body = g.a.send(t, "POST", "/api/dead/requeue", `{"key": "nobody"}`, auth...)
	wantError(t, resp, body, 404, "no dead letter")
}

// TestGroupBulkDiscardAndCancel: a discard of more than one without
// confirm is refused with 400 naming the count, discarding nothing; of
// one it needs none; a slow requeue of dead letters that fail again is
// cancelled through the other instance: canceled, by whom, its failures
// counted as failed again, and what is left stays dead; a single
// discard through the instance that does not own the dead letter is
// carried out by the owner; a confirmed discard takes the rest.
func TestGroupBulkDiscardAndCancel(t *testing.T) {
	g := groupSetup(t)
	g.poison(0, 5)
	auth := bearer(testToken)

	resp, body := g.a.send(t, "POST", "/api/dead/discard", `{"class": "jobs"}`, auth...)
	wantError(t, resp, body, 400, "5 dead letters", "confirm=true", "nothing was discarded")
	if n := len(g.local(g.a)) + len(g.local(g.b)); n != 5 {
		t.Fatalf("a refused discard left %d dead letters, want 5", n)
	}
	resp, body = g.a.send(t, "POST", "/api/dead/discard", `{"key": "poison-0"}`, auth...)
	one := decode[opJSON](t, resp, body, 202)
	if op := g.a.waitOp(t, one.ID); op.Done != 1 || op.Matched != 1 {
		t.Errorf("discard of poison-0: %+v", op)
	}

	// Not cured: each requeued one fails again. At 0.5/s the cancel
	// comes long before the last.
	resp, body = g.a.send(t, "POST", "/api/dead/requeue", `{"rate": 0.5}`, auth...)
	slow := decode[opJSON](t, resp, body, 202)
	g.b.waitKnown(t, slow.ID)
	resp, body = g.b.send(t, "POST", "/api/dead/ops/"+url.PathEscape(slow.ID)+"/cancel", "", auth...)
	canceled := decode[opJSON](t, resp, body, 200)
	if canceled.State != "canceled" || canceled.CanceledBy != "127.0.0.1" {
		t.Errorf("cancel: %s", body)
	}
	op := g.a.waitOp(t, slow.ID)
	if op.State != "canceled" || op.Done+op.Failed >= 4 || op.FailedAgain > op.Done+op.Failed {
		t.Errorf("the canceled operation: %+v", op)
	}
	if n := len(g.local(g.a)) + len(g.local(g.b)); n != 4 {
		t.Fatalf("%d dead letters after the canceled requeue of ones that fail again, want 4", n)
	}
	if len(g.local(g.a)) == 0 {
		t.Fatalf("a holds none of the 4 dead letters left")
	}
	// One of a's, through b: b asks a, and answers with a's outcome.
	key := g.local(g.a)[0].Key
	resp, body = g.b.send(t, "POST", "/api/dead/"+key+"/discard", "", auth...)
	if d := decode[actionJSON](t, resp, body, 200); d.Status != "discarded" {
		t.Errorf("discard of a's %s through b: %s", key, body)
	}
	if slices.ContainsFunc(g.local(g.a), func(dl runtime.DeadLetter) bool { return dl.Key == key }) {
		t.Errorf("a still holds %s after its discard through b", key)
	}
	waitFor(t, "3 dead letters in b's listing", func() bool {
		_, _, total, err := g.b.rt.GroupDeadLetters(context.Background(), runtime.DeadFilter{}, "", 1)
		return err == nil && total == 3
	})
	resp, body = g.a.send(t, "POST", "/api/dead/discard", `{"confirm": true}`, auth...)
	all := decode[opJSON](t, resp, body, 202)
	if op := g.b.waitOp(t, all.ID); op.Done != 3 {
		t.Errorf("confirmed discard: %+v", op)
	}
	if n := len(g.local(g.a)) + len(g.local(g.b)); n != 0 {
		t.Errorf("%d dead letters after the confirmed discard of all", n)
	}
}

// TestBulkRequestsRefused: the bulk endpoints refuse a request without
// the admin token, with bad parameters or an oversized body, each with
// the status and an error naming what is wrong, and start nothing.
func TestBulkRequestsRefused(t *testing.T) {
	g := groupSetup(t)
	g.poison(0, 2)
	auth := bearer(testToken)
	for _, c := range []struct {
		path, body string
		hdr        []string
		status     int
		want       []string
	}{
		{"/api/dead/requeue", `{"class": "jobs"}`, nil, 401, []string{"bearer token"}},
		{"/api/dead/requeue", `{"class": "jobs"}`, bearer("wrong"), 401, []string{"wrong bearer token"}},
		{"/api/dead/requeue", `{"errors": "timeout"}`, auth, 400, []string{`unknown parameter "errors"`}},
		{"/api/dead/requeue", "class=jobs&after=x", auth, 400, []string{`unknown parameter "after"`}},
		{"/api/dead/requeue", `{"rate": -1}`, auth, 400, []string{"rate", `"-1"`}},
		{"/api/dead/requeue", `{"rate": "fast"}`, auth, 400, []string{"rate"}},
		{"/api/dead/requeue", `{"limit": 20001}`, auth, 400, []string{"limit", "20000"}},
		{"/api/dead/requeue", `{"dry_run": "maybe"}`, auth, 400, []string{"dry_run"}},
		{"/api/dead/requeue", `{"since": "yesterday"}`, auth, 400, []string{"since", "RFC 3339"}},
		{"/api/dead/requeue", `{"ids": ["x/y"]}`, auth, 400, []string{"ids", "not a dead letter ID"}},
		{"/api/dead/requeue", `{"ids": ["1a-2"], "class": "jobs"}`, auth, 400, []string{"ids and a filter"}},
		{"/api/dead/requeue", `{"ids": "1a-2"}`, auth, 400, []string{"ids must be an array"}},
		{"/api/dead/requeue", `{"class": ["jobs"]}`, auth, 400, []string{"class must be a string"}},
		{"/api/dead/requeue", `{"class": "jobs"} {}`, auth, 400, []string{"more than one JSON value"}},
		{"/api/dead/requeue", `{"class": `, auth, 400, []string{"want an object of parameters"}},
		{"/api/dead/requeue?class=jobs", `{"dry_run": true}`, auth, 400, []string{"leave the URL's query empty"}},
		{"/api/dead/discard", `{"class": "` + strings.Repeat("x", MaxBodyBytes) + `"}`, auth, 413, []string{"body of"}},
		{"/api/dead/ops/x/cancel", "", nil, 401, []string{"bearer token"}},
	} {
		resp, body := g.a.send(t, "POST", c.path, c.body, c.hdr...)
		wantError(t, resp, body, c.status, c.want...)
	}
	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/api/dead/requeue", "POST"},
		{"PUT", "/api/dead/discard", "POST"},
		{"POST", "/api/dead/ops", "GET, HEAD"},
		{"DELETE", "/api/dead/ops/x", "GET, HEAD"},
		{"GET", "/api/dead/ops/x/cancel", "POST"},
		{"PUT", "/api/dead/1a-2/discard", "POST"},
		{"GET", "/ui/dead/requeue", "POST"},
	} {
		resp, body := g.a.send(t, c.method, c.path, "")
		wantError(t, resp, body, 405, "method "+c.method+" not allowed")
		if got := resp.Header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
	resp, body := g.a.send(t, "GET", "/api/dead/ops", "")
	if ops := decode[struct{ Ops []opJSON }](t, resp, body, 200); len(ops.Ops) != 0 {
		t.Errorf("refused requests started operations: %s", body)
	}
	if n := len(g.local(g.a)) + len(g.local(g.b)); n != 2 {
		t.Errorf("%d dead letters after refused requests, want 2", n)
	}

	// Without a token configured, 403.
	h, err := NewHandler(g.a.rt, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/dead/requeue", "/api/dead/discard", "/api/dead/ops/x/cancel"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", path, strings.NewReader(`{}`)))
		var e errorJSON
		if json.Unmarshal(w.Body.Bytes(), &e); w.Code != 403 || !strings.Contains(e.Error, "no token is configured") {
			t.Errorf("POST %s without a configured token: %d %s", path, w.Code, w.Body)
		}
	}
}

// TestDashboardGroupBulk: the dashboard lists the group's dead letters
// with their owners; its bulk panel's dry run of a search shows the
// count and a sample and changes nothing; the requeue it offers needs an
// admin session, starts the operation of the search at the rate given
// and shows its progress and, in the recent operations, who started it;
// a discard of more than one without confirm is refused.
func TestDashboardGroupBulk(t *testing.T) {
	g := groupSetup(t)
	g.poison(0, 6)
	resp, body := g.a.send(t, "GET", "/", "")
	page := string(body)
	if resp.StatusCode != 200 || !strings.Contains(page, "<th>Owner</th>") || !strings.Contains(page, `id="bulk-form"`) ||
		!strings.Contains(page, `id="no-ops"`) {
		t.Fatalf("dashboard: %d\n%s", resp.StatusCode, body)
	}
	for _, name := range []string{"a", "b"} {
		if !strings.Contains(page, `<td class="owner" title="partition 0">`+name+`</td>`) &&
			!strings.Contains(page, `<td class="owner" title="partition 1">`+name+`</td>`) {
			t.Errorf("the dashboard of a shows no dead letter owned by %s", name)
		}
	}

	resp, body = g.a.send(t, "GET", "/?error=poisoned&bulk=requeue&rate=5&limit=4", "")
	page = string(body)
	for _, want := range []string{`id="preview-count"><b class="num">4</b> dead letters would be requeued at 5/s (limit 4)`,
		`id="preview-sample"`, `<input type="hidden" name="error" value="poisoned">`, `<input type="hidden" name="rate" value="5">`,
		`id="bulk-go" disabled>Requeue 4 now`} {
		if !strings.Contains(page, want) {
			t.Errorf("dry run on the dashboard lacks %s", want)
		}
	}
	if n := strings.Count(page, "<tr><td class=\"mono\">"); n < 4 {
		t.Errorf("dry run sample: %d rows, want 4", n)
	}
	if n := len(g.local(g.a)) + len(g.local(g.b)); n != 6 {
		t.Fatalf("after the dashboard's dry run, %d dead letters, want 6", n)
	}
	resp, body = g.a.send(t, "GET", "/?error=poisoned&bulk=discard", "")
	page = string(body)
	for _, want := range []string{`<b class="num">6</b> dead letters would be discarded.`, `class="bulk-discard" data-count="6"`,
		`<input type="hidden" name="confirm" value="true">`, `action="ui/dead/discard"`} {
		if !strings.Contains(page, want) {
			t.Errorf("discard dry run on the dashboard lacks %s", want)
		}
	}
	resp, body = g.a.send(t, "GET", "/?bulk=requeue&rate=fast", "")
	if page := string(body); !strings.Contains(page, `id="preview-error"`) || !strings.Contains(page, "rate must be") {
		t.Errorf("dry run with a bad rate: %s", body)
	}

	form := "error=poisoned&rate=5&limit=4"
	resp, _ = g.a.send(t, "POST", "/ui/dead/requeue", form)
	if loc := resp.Header.Get("Location"); !strings.Contains(loc, "msg=login-first") {
		t.Errorf("bulk requeue without a session: redirect %q, want login-first", loc)
	}
	cookie := loginAt(t, g.a.srv.URL, testToken)
	resp, _ = g.a.send(t, "POST", "/ui/dead/discard", "error=poisoned", "Cookie", cookie)
	if loc := resp.Header.Get("Location"); !strings.Contains(loc, "msg=confirm-first") || !strings.Contains(loc, "error=poisoned") {
		t.Errorf("bulk discard of 6 without confirm: redirect %q, want confirm-first keeping the search", loc)
	}
	g.cured.Store(true)
	resp, _ = g.a.send(t, "POST", "/ui/dead/requeue", form, "Cookie", cookie)
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusSeeOther || loc.Query().Get("msg") != "op-started" || loc.Query().Get("op") == "" ||
		loc.Query().Get("error") != "poisoned" {
		t.Fatalf("bulk requeue: %d, redirect %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	id := loc.Query().Get("op")
	op := g.b.waitOp(t, id)
	if op.Done != 4 || op.Rate != 5 || op.Limit != 4 {
		t.Errorf("the dashboard's requeue: %+v", op)
	}
	resp, body = g.b.send(t, "GET", "/?"+loc.RawQuery, "Cookie", cookie)
	page = string(body)
	for _, want := range []string{`id="op-state">done<`, `id="op-done">4<`, `id="op-left">0<`, `id="op-` + id + `"`, "<td>127.0.0.1</td><td>a</td>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the operation on b's dashboard lacks %s", want)
		}
	}

	// The 2 left, slowly: the panel has a Cancel button while it runs,
	// and shows who cancelled.
	resp, _ = g.a.send(t, "POST", "/ui/dead/requeue", "rate=0.2", "Cookie", cookie)
	loc, err = url.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Query().Get("op") == "" {
		t.Fatalf("slow requeue: %d, redirect %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	id = loc.Query().Get("op")
	resp, body = g.a.send(t, "GET", "/?"+loc.RawQuery, "Cookie", cookie)
	if page := string(body); !strings.Contains(page, `id="op-cancel"`) || !strings.Contains(page, `action="ui/dead/ops/`+url.PathEscape(id)+`/cancel"`) {
		t.Fatalf("the running operation's panel has no Cancel button:\n%s", body)
	}
	g.b.waitKnown(t, id)
	resp, _ = g.b.send(t, "POST", "/ui/dead/ops/"+url.PathEscape(id)+"/cancel", "", "Cookie", loginAt(t, g.b.srv.URL, testToken))
	if loc := resp.Header.Get("Location"); !strings.Contains(loc, "msg=op-canceled") {
		t.Fatalf("cancel on b's dashboard: %d, redirect %q", resp.StatusCode, loc)
	}
	g.a.waitOp(t, id)
	resp, body = g.a.send(t, "GET", "/?op="+url.QueryEscape(id), "")
	if page := string(body); !strings.Contains(page, `id="op-state">canceled<`) || !strings.Contains(page, "canceled by 127.0.0.1") ||
		strings.Contains(page, `id="op-cancel"`) {
		t.Errorf("the canceled operation's panel:\n%s", body)
	}
}

// loginAt logs in to the dashboard at base with token and returns the
// session cookie.
func loginAt(t *testing.T, base, token string) string {
	t.Helper()
	resp, err := noRedirect.PostForm(base+"/ui/login", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie && c.Value != "" {
			return c.Name + "=" + c.Value
		}
	}
	t.Fatalf("login at %s with %q set no session (redirect %q)", base, token, resp.Header.Get("Location"))
	return ""
}

// TestBulkWithoutChangelog: on a runtime without the changelog (a
// Submit-only one here), GET /api/dead lists its own dead letters with
// itself as owner and no partition, and a bulk requeue runs on it alone.
func TestBulkWithoutChangelog(t *testing.T) {
	b := setup(t, nil)
	jobs := b.poison("jobs", 3)
	b.poison("orders", 1)
	resp, body := b.do("GET", "/api/dead?class=jobs")
	p := decode[deadPage](t, resp, body, 200)
	if p.Total != 3 {
		t.Fatalf("GET /api/dead?class=jobs: %s", body)
	}
	for _, d := range p.DeadLetters {
		if d.Owner == nil || *d.Owner != "billing-7f9c-2" || d.InputPartition == nil || *d.InputPartition != -1 {
			t.Errorf("dead letter %s: owner %v, input partition %v; want this instance and -1", d.Key, d.Owner, d.InputPartition)
		}
	}
	b.cured.Store(true)
	resp, body = b.post("/api/dead/requeue", `{"class": "jobs"}`, append(bearer(testToken), "Content-Type", "application/json")...)
	started := decode[opJSON](t, resp, body, 202)
	var op opJSON
	waitFor(t, "the requeue over", func() bool {
		resp, body := b.do("GET", "/api/dead/ops/"+url.PathEscape(started.ID))
		op = decode[opJSON](t, resp, body, 200)
		return op.State == "done" && op.Unreported == 0
	})
	if op.State != "done" || op.Done != 3 || op.Via != "billing-7f9c-2" {
		t.Errorf("the requeue without the changelog: %+v", op)
	}
	got := map[string]bool{}
	for range jobs {
		select {
		case id := <-b.handled:
			got[id] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("handled %v after the requeue; want the 3 jobs", got)
		}
	}
	if len(got) != 3 {
		t.Errorf("handled %v, want the 3 jobs", got)
	}
	if dls := b.deadLetters(); len(dls) != 1 || dls[0].Message.Class != "orders" {
		t.Errorf("dead letters after the requeue of jobs: %+v", dls)
	}
}

// TestDeadOpsReadToken: with Options.ReadToken set, the operations (whose
// selections can carry message data) need it or the admin token; the
// read token does not start or cancel one, not even a dry run.
func TestDeadOpsReadToken(t *testing.T) {
	b := setup(t, func(o *Options) { o.ReadToken = testReadToken })
	b.poison("jobs", 1)
	for _, path := range []string{"/api/dead/ops", "/api/dead/ops/x"} {
		resp, body := b.do("GET", path)
		wantError(t, resp, body, 401, "missing bearer token")
	}
	resp, body := b.do("GET", "/api/dead/ops", bearer(testReadToken)...)
	decode[struct{ Ops []opJSON }](t, resp, body, 200)
	readJSON := append(bearer(testReadToken), "Content-Type", "application/json")
	for _, path := range []string{"/api/dead/requeue", "/api/dead/discard", "/api/dead/ops/x/cancel"} {
		resp, body := b.post(path, `{"dry_run": true}`, readJSON...)
		wantError(t, resp, body, 401, "read token does not allow this")
	}
	if dls := b.deadLetters(); len(dls) != 1 {
		t.Errorf("%d dead letters after refused requests, want 1", len(dls))
	}
}
