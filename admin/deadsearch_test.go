package admin

import (
	"fmt"
	"html"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDeadLetterSearch: GET /api/dead filters by each parameter alone
// and combined, pages newest and oldest first with the count of all
// matches, and refuses a bad parameter with a 400 naming it.
func TestDeadLetterSearch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	jobs := b.poison("jobs", 3) // keys key-0..2
	orders := b.poison("orders", 1)
	all := append(slices.Clone(jobs), orders...)
	key := map[string]string{}
	for _, dl := range b.deadLetters() {
		key[dl.Key] = string(dl.Message.Key)
	}
	withKey := func(k string) []string {
		var out []string
		for _, id := range all {
			if key[id] == k {
				out = append(out, id)
			}
		}
		return out
	}
	get := func(query string) deadPageJSON {
		t.Helper()
		resp, body := b.do("GET", "/api/dead?"+query)
		return decode[deadPageJSON](t, resp, body, 200)
	}
	ids := func(p deadPageJSON) []string {
		out := []string{}
		for _, d := range p.DeadLetters {
			out = append(out, d.Key)
		}
		return out
	}
	future := url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))
	past := url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339))
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", all},
		{"class=jobs", jobs},
		{"key=key-0", withKey("key-0")},
		{"key_b64=a2V5LTE%3D", withKey("key-1")}, // key-1
		{"error=poisoned", all},
		{"error=nothing+like+it", nil},
		{"min_attempts=1", all},
		{"min_attempts=2", nil},
		{"topic=orders", nil}, // submitted messages have no origin
		{"partition=0", all},
		{"since=" + past, all},
		{"since=" + future, nil},
		{"until=" + future, all},
		{"until=" + past, nil},
		{"first_since=" + past + "&first_until=" + future, all},
		// all is jobs then orders: the first with key-0 is jobs'.
		{"class=jobs&key=key-0&error=poison&since=" + past + "&until=" + future, withKey("key-0")[:1]},
		{"class=orders&key=key-1", nil},
	} {
		p := get(c.query)
		if got := ids(p); !slices.Equal(got, append([]string{}, c.want...)) || p.Total != len(c.want) || p.Next != "" {
			t.Errorf("%q: %v total %d next %q, want %v total %d", c.query, got, p.Total, p.Next, c.want, len(c.want))
		}
	}
	// Paging, both orders: every dead letter once, in order, total on
	// every page.
	for _, order := range []string{"oldest", "newest"} {
		want := slices.Clone(all)
		if order == "newest" {
			slices.Reverse(want)
		}
		var got []string
		after := ""
		for range 10 {
			p := get(fmt.Sprintf("order=%s&limit=1&after=%s", order, after))
			if p.Total != 4 {
				t.Errorf("%s: total %d on a page, want 4", order, p.Total)
			}
			got = append(got, ids(p)...)
			if after = string(p.Next); after == "" {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s first, by pages of 1: %v, want %v", order, got, want)
		}
	}
	p := get("order=newest&limit=2")
	resp, body := b.do("GET", "/api/dead?order=oldest&after="+string(p.Next))
	wantError(t, resp, body, 400, "after")

	for _, c := range []struct {
		query string
		want  []string
	}{
		{"partition=x", []string{"partition", `"x"`}},
		{"partition=-1", []string{"partition", `"-1"`}},
		{"min_attempts=many", []string{"min_attempts", `"many"`}},
		{"min_attempts=-2", []string{"min_attempts"}},
		{"since=yesterday", []string{"since", "RFC 3339", `"yesterday"`}},
		{"until=2026-13-01", []string{"until", "RFC 3339"}},
		{"first_since=x", []string{"first_since"}},
		{"first_until=x", []string{"first_until"}},
		{"order=up", []string{"order", "newest or oldest", `"up"`}},
		{"key=a&key_b64=YQ%3D%3D", []string{"key", "key_b64"}},
		{"key_b64=%21%21", []string{"key_b64", "base64"}},
	} {
		resp, body := b.do("GET", "/api/dead?"+c.query)
		wantError(t, resp, body, 400, c.want...)
	}
}

// TestDashboardDeadSearch: the dashboard's search form keeps the search,
// shows its matches, newest first when asked, and their count; its next
// page link keeps the search; a bad parameter shows its error instead of
// the table.
func TestDashboardDeadSearch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	jobs := b.poison("jobs", 3)
	orders := b.poison("orders", 1)

	resp, body := b.do("GET", "/?class=jobs&error=poisoned&order=newest")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	page := string(body)
	for _, want := range []string{`id="dead-search"`, `id="search-class" placeholder="class" value="jobs"`,
		`id="search-error" placeholder="error contains" value="poisoned"`, `<option value="newest" selected>`,
		`<p class="note" id="dead-total">3 matches</p>`} {
		if !strings.Contains(page, want) {
			t.Errorf("dashboard lacks %s", want)
		}
	}
	for _, k := range jobs {
		if !strings.Contains(page, `id="dead-`+k+`"`) {
			t.Errorf("dead letter %s of jobs not shown", k)
		}
	}
	if strings.Contains(page, `id="dead-`+orders[0]+`"`) {
		t.Errorf("dead letter %s of orders shown in a search of jobs", orders[0])
	}
	// Newest first: the last saved comes first.
	if i, j := strings.Index(page, `id="dead-`+jobs[2]+`"`), strings.Index(page, `id="dead-`+jobs[0]+`"`); i < 0 || j < 0 || i > j {
		t.Errorf("newest first: %s at %d, %s at %d", jobs[2], i, jobs[0], j)
	}

	resp, body = b.do("GET", "/?key=key-2")
	if page := string(body); resp.StatusCode != 200 || !strings.Contains(page, `id="dead-total">1 match</p>`) || !strings.Contains(page, `id="dead-`+keyOf(b, "key-2")+`"`) {
		t.Errorf("search by key: %d %s", resp.StatusCode, body)
	}
	resp, body = b.do("GET", "/?error=nowhere")
	if page := string(body); resp.StatusCode != 200 || !strings.Contains(page, `id="no-dead">No dead letters match.`) {
		t.Errorf("search with no match: %d %s", resp.StatusCode, body)
	}
	// Over a page (pageDead): the next page link keeps the search.
	more := b.poison("jobs", pageDead)
	resp, body = b.do("GET", "/?class=jobs&order=newest")
	m := regexp.MustCompile(`href="([^"]*)" id="dead-next"`).FindSubmatch(body)
	if resp.StatusCode != 200 || m == nil || !strings.Contains(string(body), fmt.Sprintf(`id="dead-total">%d matches`, 3+pageDead)) {
		t.Fatalf("a search over a page: %d, link %q", resp.StatusCode, m)
	}
	next := html.UnescapeString(string(m[1]))
	if !strings.Contains(next, "class=jobs") || !strings.Contains(next, "order=newest") || !strings.Contains(next, "after=") {
		t.Errorf("next page link %q drops the search", next)
	}
	resp, body = b.do("GET", "/"+next)
	page = string(body)
	if resp.StatusCode != 200 || strings.Contains(page, `id="dead-next"`) || strings.Contains(page, `id="dead-`+more[len(more)-1]+`"`) ||
		!strings.Contains(page, `id="dead-`+jobs[0]+`"`) || strings.Contains(page, `id="dead-`+orders[0]+`"`) {
		t.Errorf("the next page of newest jobs should hold the oldest jobs only: %d %s", resp.StatusCode, body)
	}
	if got := strings.Count(page, `<tr id="dead-`); got != 3 {
		t.Errorf("next page has %d rows, want 3", got)
	}

	resp, body = b.do("GET", "/?since=monday")
	if page := string(body); resp.StatusCode != 200 || !strings.Contains(page, `id="dead-error"`) || !strings.Contains(page, "since must be an RFC 3339 time") {
		t.Errorf("bad since: %d %s", resp.StatusCode, body)
	}
}

// keyOf returns the ID of the dead letter whose message key is k.
func keyOf(b *bundle, k string) string {
	for _, dl := range b.deadLetters() {
		if string(dl.Message.Key) == k {
			return dl.Key
		}
	}
	b.t.Fatalf("no dead letter with key %s", k)
	return ""
}
