package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/handoff-go/handoff/internal/rental"
	"github.com/handoff-go/handoff/internal/testio"
	"github.com/handoff-go/handoff/runtime"
)

// TestShareFlag: -share heartbeats,users makes those classes share
// classes of <group>.<class>, retrying in place only; orders (ordered),
// an unknown class and an empty name are refused, and rental exits 2 for
// them, or for -share in the demo.
func TestShareFlag(t *testing.T) {
	var f shareFlag
	if err := f.Set("heartbeats,users"); err != nil {
		t.Fatal(err)
	}
	if got := f.String(); got != "heartbeats,users" {
		t.Errorf("String() = %q", got)
	}
	h, err := rental.New(rental.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	classes, err := withShare(h.Classes(), "rental", f)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		want := ""
		if c.Name != "orders" {
			want = "rental." + c.Name
		}
		if c.ShareGroup != want || want != "" && c.Retry.Redeliveries != 0 {
			t.Errorf("class %s: ShareGroup %q, Redeliveries %d; want %q and 0", c.Name, c.ShareGroup, c.Retry.Redeliveries, want)
		}
	}
	for _, tc := range []struct{ share, want string }{{"orders", `"orders" is ordered`}, {"bookings", `no class "bookings"`}} {
		var f shareFlag
		if err := f.Set(tc.share); err != nil {
			t.Fatal(err)
		}
		if _, err := withShare(h.Classes(), "rental", f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("-share %s: error %v, want %q", tc.share, err, tc.want)
		}
	}
	if err := f.Set("users,"); err == nil {
		t.Error("-share users,: no error")
	}
	for _, args := range [][]string{
		{"-brokers", "127.0.0.1:1", "-share", "orders"},
		{"-brokers", "127.0.0.1:1", "-share", "bookings"},
		{"-brokers", "127.0.0.1:1", "-share", "users", "-client", "kafka-go"},
		{"-share", "users"}, // the demo has no share class
	} {
		if code := run(args); code != 2 {
			t.Errorf("rental %s: exit %d, want 2", strings.Join(args, " "), code)
		}
	}
}

// TestProcessShareRolling: three instances of the binary with -share
// heartbeats,users (orders stays on the consumer group) under a steady
// producer, each restarted once in turn (a rolling deploy): every
// produced message is handled, none lost; the duplicates are counted.
func TestProcessShareRolling(t *testing.T) {
	if testio.Client() != string(runtime.ClientFranzGo) {
		t.Skipf("franz-go only (this run is for %s): share groups need franz-go", testio.Client())
	}
	bin := rentalBinary(t)
	broker := startBroker(t, 2)
	dir := t.TempDir()
	args := func(i int) []string {
		return []string{"-brokers", broker.Addr(), "-group", "rental-share", "-state", filepath.Join(dir, fmt.Sprintf("i%d.db", i)),
			"-drain-timeout", "5s", "-work", "2ms", "-effects", filepath.Join(dir, fmt.Sprintf("effects-%d.log", i)),
			"-share", "heartbeats,users", "-instance", fmt.Sprintf("i%d", i)}
	}
	const total = 6000
	produced := make(chan []string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { produced <- produceSteadily(ctx, t, broker.Addrs(), total) }()
	var svcs [3]*service
	for i := range svcs {
		svcs[i] = startService(t, bin, args(i)...)
	}
	lines := func() int {
		n := 0
		for i := range svcs {
			_, l := readEffects(t, filepath.Join(dir, fmt.Sprintf("effects-%d.log", i)))
			n += l
		}
		return n
	}
	var released int
	for i := range svcs {
		waitFor(t, fmt.Sprintf("%d lines before restart %d", (i+1)*total/5, i), func() bool { return lines() >= (i+1)*total/5 })
		svcs[i].stopOK(t, fmt.Sprintf("instance %d", i))
		released += svcs[i].report(t).ShareReleased
		svcs[i] = startService(t, bin, args(i)...)
	}
	keys := <-produced
	seen := map[string]int{}
	waitFor(t, "every message handled", func() bool {
		seen = map[string]int{}
		for i := range svcs {
			s, _ := readEffects(t, filepath.Join(dir, fmt.Sprintf("effects-%d.log", i)))
			for k, n := range s {
				seen[k] += n
			}
		}
		for _, k := range keys {
			if seen[k] == 0 {
				return false
			}
		}
		return true
	})
	for i := range svcs {
		svcs[i].stopOK(t, fmt.Sprintf("instance %d at the end", i))
		released += svcs[i].report(t).ShareReleased
	}
	dups := map[string]int{}
	for i, k := range keys {
		if seen[k] > 1 {
			dups[rental.Topics()[i%3]] += seen[k] - 1
		}
	}
	t.Logf("produced %d, lost %d, duplicates by topic %v, released by the stops %d", len(keys), lostOf(seen, nil, keys), dups, released)
	if lost := lostOf(seen, nil, keys); lost > 0 {
		t.Fatalf("lost %d", lost)
	}
}

// waitFor polls cond for up to two minutes, failing the test with what.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond) // the poll interval: the processes write the files
	}
}
