package main

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/admin"
	"github.com/handoff-go/handoff/internal/rental"
	"github.com/handoff-go/handoff/internal/testio"
	"github.com/handoff-go/handoff/runtime"
)

// deadLettersShot is where HANDOFF_SCREENSHOT=1 saves the dead-letter
// view.
var deadLettersShot = filepath.Join("..", "..", "docs", "dead-letters.png")

// Errors of the orders handler in TestDeadLettersInBrowser.
var (
	errGatewayDown = errors.New("payment gateway: 503 service unavailable")
	errDeclined    = errors.New("payment gateway: card declined")
)

// TestDeadLettersInBrowser runs two rental instances of one group on an
// embedded broker (2 partitions a topic, so each owns some of each
// topic) with failed orders on both instances' partitions and failed
// user messages, and drives instance 0's dashboard in headless
// Chromium: the dead-letter table lists the group's, with the owner of
// each (both instances); the operator logs in and searches the orders
// the payment gateway failed; a dry run of a requeue at 3/s shows their
// count and a sample and changes nothing; after the gateway is fixed,
// the requeue of the search runs (the page refreshing itself while it
// runs) to done: 6 requeued, the 2 declined cards failed again and are
// dead letters again, the 4 others handled once each; the recent
// operations name who ran it through which instance. With
// HANDOFF_SCREENSHOT=1 it saves the page at the end to
// docs/dead-letters.png.
func TestDeadLettersInBrowser(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("needs %s: install the Debian packages chromium and chromium-driver (apt-get install chromium chromium-driver)", chromium)
	}
	if testing.Short() {
		t.Skip("starts a browser")
	}
	broker := startBroker(t, 2)
	// Order keys whose hash puts 3 on each partition: 2 of one
	// partition's are declined cards, which fail again after the fix.
	var orderKeys []string
	var per [2]int
	for i := 1001; len(orderKeys) < 6; i++ {
		k := fmt.Sprintf("order-%d", i)
		p := (&kafka.Hash{}).Balance(kafka.Message{Key: []byte(k)}, 0, 1)
		if per[p] < 3 {
			per[p]++
			orderKeys = append(orderKeys, k)
		}
	}
	declined := map[string]bool{orderKeys[0]: true, orderKeys[1]: true}
	var msgs []kafka.Message
	for _, k := range orderKeys {
		v := "poison: charge EUR 42.00"
		if declined[k] {
			v = "poison: declined card"
		}
		msgs = append(msgs, kafka.Message{Topic: rental.TopicOrders, Key: []byte(k), Value: []byte(v)})
	}
	for _, k := range []string{"user-7", "user-8"} {
		msgs = append(msgs, kafka.Message{Topic: rental.TopicUsers, Key: []byte(k), Value: []byte("poison: bad address")})
	}

	var fixed atomic.Bool
	handled := map[string]*atomic.Int32{}
	for _, k := range orderKeys {
		handled[k] = new(atomic.Int32)
	}
	orders := func(ctx context.Context, m *handoff.Message) error {
		switch v := string(m.Value); {
		case strings.Contains(v, "declined"):
			return handoff.Permanent(errDeclined)
		case strings.Contains(v, "poison") && !fixed.Load():
			return handoff.Permanent(errGatewayDown)
		}
		handled[string(m.Key)].Add(1)
		return nil
	}
	const token = "rental-admin-token"
	var rts [2]*runtime.Runtime
	var srv *httptest.Server
	for i := range rts {
		svc, err := rental.New(rental.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer svc.Close()
		classes := svc.Classes()
		classes[0].Handler = orders
		reg := prometheus.NewRegistry()
		rt, err := runtime.New(runtime.Config{
			Client:  runtime.Client(testio.Client()),
			Brokers: broker.Addrs(), Group: "rental-dead", Instance: fmt.Sprintf("rental-6f8d9-%d", i),
			StatePath: filepath.Join(t.TempDir(), "rental.db"),
			Classes:   classes, Registerer: reg, DrainTimeout: 10 * time.Second, HardStopGrace: time.Second,
			CommitInterval: 100 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond, SessionTimeout: 6 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		rts[i] = rt
		ran := make(chan error, 1)
		go func() { _, err := rt.Run(context.Background()); ran <- err }()
		defer func() {
			rt.Shutdown(context.Background())
			if err := <-ran; err != nil {
				t.Errorf("Run of instance %d: %v", i, err)
			}
		}()
		if i == 0 {
			// The page reloads itself every second while the operation it
			// shows runs (Options.Refresh, 5s, otherwise).
			h, err := admin.NewHandler(rt, admin.Options{Token: token, Gatherer: reg})
			if err != nil {
				t.Fatal(err)
			}
			srv = httptest.NewServer(h)
			defer srv.Close()
		}
		waitTrue(t, fmt.Sprintf("instance %d ready", i), rt.Ready)
	}
	waitTrue(t, "each instance owning one partition of each topic", func() bool {
		for _, rt := range rts {
			for _, cs := range rt.Stats() {
				if cs.Partitions != 1 {
					return false
				}
			}
		}
		return true
	})
	produce(t, broker, msgs)
	waitTrue(t, "8 dead letters in the group's listing of each instance", func() bool {
		for _, rt := range rts {
			if _, _, total, err := rt.GroupDeadLetters(context.Background(), runtime.DeadFilter{}, "", 1); err != nil || total != 8 {
				return false
			}
		}
		return true
	})

	ctx := browser(t)
	do(t, ctx, "load the dashboard", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#dead")))
	owners := value(t, ctx, "read the owners", chromedp.Evaluate[[]string](`[...new Set([...document.querySelectorAll("#dead td.owner")].map(e => e.textContent.trim()))].sort()`))
	if strings.Join(owners, ",") != "rental-6f8d9-0,rental-6f8d9-1" {
		t.Fatalf("owners in the dead-letter table: %q, want both instances", owners)
	}
	do(t, ctx, "log in",
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#session")),
	)
	do(t, ctx, "search the gateway's failures",
		chromedp.SendKeys(chromedp.CSS("#search-class"), "orders"),
		chromedp.SendKeys(chromedp.CSS("#search-error"), "payment gateway"),
		chromedp.Click(chromedp.CSS("#search-submit")),
		chromedp.WaitVisible(chromedp.CSS("#dead-total")),
	)
	if total := value(t, ctx, "read the count", chromedp.Text(chromedp.CSS("#dead-total"))); total != "6 matches" {
		t.Fatalf("search class=orders error=payment gateway: %q, want 6 matches", total)
	}
	do(t, ctx, "dry run a requeue at 3/s",
		chromedp.SendKeys(chromedp.CSS("#bulk-rate"), "3"),
		chromedp.Click(chromedp.CSS("#dry-requeue")),
		chromedp.WaitVisible(chromedp.CSS("#preview-count")),
	)
	preview := value(t, ctx, "read the dry run", chromedp.Text(chromedp.CSS("#preview-count")))
	sample := value(t, ctx, "count the sample", chromedp.Evaluate[int](`document.querySelectorAll("#preview-sample tbody tr").length`))
	if !strings.HasPrefix(preview, "6 dead letters would be requeued at 3/s") || sample != 6 {
		t.Fatalf("dry run: %q with %d sample rows, want 6 at 3/s", preview, sample)
	}
	if n := groupTotal(t, rts[1]); n != 8 {
		t.Fatalf("after the dry run: %d dead letters, want 8", n)
	}

	fixed.Store(true)
	do(t, ctx, "requeue for real",
		chromedp.Click(chromedp.CSS("#bulk-go")),
		chromedp.WaitVisible(chromedp.CSS("#op")),
	)
	flash := value(t, ctx, "read the message", chromedp.Text(chromedp.CSS("#flash")))
	if !strings.Contains(flash, "Operation started") {
		t.Fatalf("flash after the requeue: %q", flash)
	}
	// No navigation from here: the page reloads itself while it runs.
	reloads := pageUntil(t, ctx, "the operation to end",
		`document.querySelector("#op-state") !== null && document.querySelector("#op-state").textContent === "done" &&
			document.querySelector("#op-unreported").textContent === "0"`)
	if reloads == 0 {
		t.Errorf("the page did not reload itself while the operation ran")
	}
	counts := value(t, ctx, "read the progress", chromedp.Evaluate[string](
		`["#op-done", "#op-failed-again", "#op-left"].map(s => document.querySelector(s).textContent).join(" ")`))
	if counts != "6 2 0" {
		t.Errorf("progress when done (done, failed again, left): %s, want 6 2 0", counts)
	}
	for _, k := range orderKeys {
		want := int32(1)
		if declined[k] {
			want = 0
		}
		if n := handled[k].Load(); n != want {
			t.Errorf("order %s handled %d times, want %d", k, n, want)
		}
	}
	if n := groupTotal(t, rts[1]); n != 4 {
		t.Errorf("after the requeue: %d dead letters, want 4 (2 declined cards, 2 users)", n)
	}
	do(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#ops")))
	row := value(t, ctx, "read the recent operations", chromedp.Text(chromedp.CSS("#ops tbody tr")))
	if !strings.Contains(row, "requeue") || !strings.Contains(row, "127.0.0.1") || !strings.Contains(row, "rental-6f8d9-0") ||
		!strings.Contains(row, `error="payment gateway"`) {
		t.Errorf("recent operations: %q, want the requeue by 127.0.0.1 via rental-6f8d9-0 with its selection", row)
	}
	if os.Getenv("HANDOFF_SCREENSHOT") == "1" {
		png := value(t, ctx, "screenshot", chromedp.FullScreenshot(100))
		if err := os.WriteFile(deadLettersShot, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("saved %s (%d bytes)", deadLettersShot, len(png))
	}
}

// pageUntil evaluates expr on the page every 50ms until it is true,
// for at most 60s, across the page's own reloads (an evaluation that a
// reload interrupts is tried again), and returns how many loads of the
// page it saw after the first.
func pageUntil(t *testing.T, ctx context.Context, what, expr string) int {
	t.Helper()
	// Each load of the page gets a new mark.
	const mark = `(window.__load = window.__load || Math.random())`
	loads := map[float64]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for {
		m, err := chromedp.Run(ctx, chromedp.Evaluate[float64](mark))
		if err == nil {
			loads[m] = true
		}
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return len(loads) - 1
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (last error %v)", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// groupTotal counts the group's dead letters as rt lists them.
func groupTotal(t *testing.T, rt *runtime.Runtime) int {
	t.Helper()
	_, _, total, err := rt.GroupDeadLetters(context.Background(), runtime.DeadFilter{}, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// waitTrue polls cond until it holds, for at most 60s.
func waitTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
