package main

import (
	"strings"
	"testing"

	"github.com/handoff-go/handoff/internal/rental"
	"github.com/handoff-go/handoff/runtime"
)

// TestRateLimitFlag: -rate-limit orders=50,users=20 sets those classes'
// RateLimit and no other's; a bad value is an error naming it, and
// rental exits 2 for it as for every bad flag, or for a class it does
// not have.
func TestRateLimitFlag(t *testing.T) {
	var f rateLimitFlag
	if err := f.Set("orders=50,users=20"); err != nil {
		t.Fatal(err)
	}
	if got := f.String(); got != "orders=50,users=20" {
		t.Errorf("String() = %q", got)
	}
	h, err := rental.New(rental.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	classes, err := withRateLimits(h.Classes(), f)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]runtime.RateLimit{"orders": {PerSecond: 50}, "users": {PerSecond: 20}}
	for _, c := range classes {
		if c.RateLimit != want[c.Name] {
			t.Errorf("class %s: RateLimit %+v, want %+v", c.Name, c.RateLimit, want[c.Name])
		}
	}
	if _, err := withRateLimits(h.Classes(), rateLimitFlag{"bookings": 5}); err == nil || !strings.Contains(err.Error(), `"bookings"`) {
		t.Errorf("an unknown class: error %v, want one naming it", err)
	}

	for _, bad := range []string{"orders", "orders=", "=5", "orders=x", "orders=0", "orders=-3", "orders=NaN", "orders=+Inf", "orders=50,users", "orders=50,orders=60"} {
		var f rateLimitFlag
		err := f.Set(bad)
		if err == nil {
			t.Errorf("Set(%q): no error", bad)
			continue
		}
		if part := bad[strings.LastIndex(bad, ",")+1:]; !strings.Contains(err.Error(), part) {
			t.Errorf("Set(%q): error %q does not name %q", bad, err, part)
		}
	}
	for _, args := range [][]string{
		{"-brokers", "127.0.0.1:1", "-rate-limit", "orders=fast"},
		{"-brokers", "127.0.0.1:1", "-rate-limit", "bookings=5"},
		{"-rate-limit", "orders=5"}, // the demo takes no limits
	} {
		if code := run(args); code != 2 {
			t.Errorf("rental %s: exit %d, want 2", strings.Join(args, " "), code)
		}
	}
}
