package admin

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/handoff-go/handoff/runtime"
)

// deadFilterParams are the query parameters of a dead letter search, on
// GET /api/dead and the dashboard, in the order they are checked.
var deadFilterParams = []string{"class", "topic", "partition", "key", "key_b64", "error", "min_attempts",
	"since", "until", "first_since", "first_until", "order"}

// parseDeadFilter reads a dead letter search from q: class, topic,
// partition (an integer >= 0), key (text) or key_b64 (standard base64,
// for a binary key; not both), error (a substring of the last error),
// min_attempts (an integer >= 0), since, until, first_since, first_until
// (RFC 3339) and order (newest or oldest; default oldest). An absent or
// empty parameter does not filter. The error names the bad parameter.
func parseDeadFilter(q url.Values) (runtime.DeadFilter, error) {
	f := runtime.DeadFilter{Class: q.Get("class"), Topic: q.Get("topic"), ErrorContains: q.Get("error")}
	if s := q.Get("partition"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return f, fmt.Errorf("admin: partition must be an integer >= 0, got %q", s)
		}
		f.Partition = &n
	}
	key, keyB64 := q.Get("key"), q.Get("key_b64")
	switch {
	case key != "" && keyB64 != "":
		return f, fmt.Errorf("admin: key and key_b64 are two forms of one key: give one")
	case key != "":
		f.Key = []byte(key)
	case keyB64 != "":
		b, err := base64.StdEncoding.DecodeString(keyB64)
		if err != nil {
			return f, fmt.Errorf("admin: key_b64 must be standard base64, got %q: %v", keyB64, err)
		}
		f.Key = b
	}
	if s := q.Get("min_attempts"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return f, fmt.Errorf("admin: min_attempts must be an integer >= 0, got %q", s)
		}
		f.MinAttempts = n
	}
	for _, t := range []struct {
		name string
		to   *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}, {"first_since", &f.FirstSince}, {"first_until", &f.FirstUntil}} {
		if s := q.Get(t.name); s != "" {
			v, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return f, fmt.Errorf("admin: %s must be an RFC 3339 time (2026-12-07T10:00:00Z), got %q", t.name, s)
			}
			*t.to = v
		}
	}
	switch s := q.Get("order"); s {
	case "", "oldest":
	case "newest":
		f.Newest = true
	default:
		return f, fmt.Errorf("admin: order must be newest or oldest, got %q", s)
	}
	return f, nil
}

// deadFilterQuery returns the search parameters of q (those
// parseDeadFilter reads, as given; empty ones left out), for the
// dashboard's form and its next page link.
func deadFilterQuery(q url.Values) url.Values {
	out := url.Values{}
	for _, p := range deadFilterParams {
		if v := q.Get(p); v != "" {
			out.Set(p, v)
		}
	}
	return out
}
