package main

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/admin"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/rental"
	"github.com/handoff-go/handoff/internal/testio"
	"github.com/handoff-go/handoff/runtime"
)

const chromium = "/usr/bin/chromium"

// screenshotPath is where HANDOFF_SCREENSHOT=1 saves the dashboard.
var screenshotPath = filepath.Join("..", "..", "docs", "dashboard.png")

// TestDashboardInBrowser runs the rental classes on an embedded broker
// with one poison message per topic, serves the admin handler, and drives
// the dashboard in headless Chromium: the three class cards show, the
// operator logs in, the bug is fixed (Service.Cure), Requeue is clicked on
// the orders dead letter, and after a reload its row is gone and the
// orders card counts more successes (the dead letter and the message
// parked behind it). The header names the instance and the group. With
// HANDOFF_SCREENSHOT=1 it also runs the handlers slowly under a burst
// with the users handlers hung (a dependency that stopped answering), so
// the cards show queues, consumer lag and users over its drain budget,
// and saves the page to docs/dashboard.png.
func TestDashboardInBrowser(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("needs %s: install the Debian packages chromium and chromium-driver (apt-get install chromium chromium-driver)", chromium)
	}
	if testing.Short() {
		t.Skip("starts a browser")
	}
	shoot := os.Getenv("HANDOFF_SCREENSHOT") == "1"
	work, drain := time.Duration(0), 30*time.Second
	if shoot {
		work, drain = 400*time.Millisecond, 5*time.Second
	}

	broker := startBroker(t, 2)
	const perTopic = 20
	var msgs []kafka.Message
	for _, topic := range rental.Topics() {
		msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(topic + "-bad"), Value: []byte("poison: " + topic)})
		for i := range perTopic {
			msgs = append(msgs, kafka.Message{Topic: topic, Key: fmt.Appendf(nil, "%s-%d", topic, i), Value: []byte("ok")})
		}
	}
	// Parked behind the orders dead letter until it is requeued.
	msgs = append(msgs, kafka.Message{Topic: rental.TopicOrders, Key: []byte("orders-bad"), Value: []byte("after the bad one")})
	produce(t, broker, msgs)

	svc, err := rental.New(rental.Options{Work: work})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	reg := prometheus.NewRegistry()
	classes := svc.Classes()
	// hang, once closed, makes the users handlers wait for unhang (or
	// the stop): the screenshot's hung class.
	hang, unhang := make(chan struct{}), make(chan struct{})
	usersHandler := classes[1].Handler
	classes[1].Handler = func(ctx context.Context, m *handoff.Message) error {
		select {
		case <-hang:
			select {
			case <-unhang:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		default:
		}
		return usersHandler(ctx, m)
	}
	defer func() {
		select {
		case <-unhang:
		default:
			close(unhang)
		}
	}()
	rt, err := runtime.New(runtime.Config{
		Client:  runtime.Client(testio.Client()),
		Brokers: broker.Addrs(), Group: "rental-dashboard", Instance: "rental-6f8d9-2", StatePath: filepath.Join(t.TempDir(), "rental.db"),
		Classes: classes, Registerer: reg, DrainTimeout: drain, HardStopGrace: time.Second,
		CommitInterval: 100 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond, SessionTimeout: 6 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { _, err := rt.Run(context.Background()); ran <- err }()
	defer func() {
		rt.Shutdown(context.Background())
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	const token = "rental-admin-token"
	h, err := admin.NewHandler(rt, admin.Options{Token: token, Gatherer: reg, Refresh: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	// One dead letter per class, and the rest handled.
	deadline := time.Now().Add(60 * time.Second)
	for {
		dls, _, err := rt.DeadLetters("", "", 10)
		if err != nil && !errors.Is(err, runtime.ErrNotRunning) { // not started yet
			t.Fatal(err)
		}
		var ok uint64
		for _, cs := range rt.Stats() {
			ok += cs.Succeeded
		}
		if len(dls) == 3 && ok == 3*perTopic {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d dead letters, %d handled; want 3 and %d", len(dls), ok, 3*perTopic)
		}
		time.Sleep(20 * time.Millisecond)
	}
	orders, _, _ := rt.DeadLetters("orders", "", 1)
	if len(orders) != 1 {
		t.Fatalf("orders dead letters: %+v", orders)
	}
	deadKey := orders[0].Key
	// A message for later, for the delayed table.
	if err := rt.Schedule(context.Background(), "users", &handoff.Message{ID: "welcome-mail-42", Key: []byte("user-42"), Value: []byte("send")},
		time.Now().Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}

	ctx := browser(t)
	do(t, ctx, "load the dashboard", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#class-heartbeats")))
	cards := value(t, ctx, "read the cards", chromedp.Evaluate[[]string](`[...document.querySelectorAll(".card h3")].map(e => e.firstChild.textContent.trim())`))
	if strings.Join(cards, ",") != "orders,users,heartbeats" {
		t.Fatalf("class cards %q, want orders, users, heartbeats", cards)
	}
	disabled := value(t, ctx, "read the Requeue button", chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector("#requeue-%s").disabled`, deadKey)))
	do(t, ctx, "log in",
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#session")),
	)
	if !disabled {
		t.Error("Requeue was enabled before the login")
	}
	names := value(t, ctx, "read the header", chromedp.Evaluate[string](`document.querySelector("#instance").textContent + " " + document.querySelector("#group").textContent`))
	if names != "rental-6f8d9-2 rental-dashboard" {
		t.Errorf("header names %q, want the instance and the group", names)
	}

	if shoot {
		close(hang)
		screenshot(t, ctx, srv.URL, broker, rt)
		close(unhang)
		// The users backlog drains before the pause below, which checks
		// that nothing of users runs.
		deadline := time.Now().Add(60 * time.Second)
		for st := rt.Stats()[1]; st.Queued+st.Running > 0 || st.Lag != 0; st = rt.Stats()[1] {
			if time.Now().After(deadline) {
				t.Fatalf("users backlog did not drain: %+v", st)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// A fresh page without the login's message, so the next #flash is
	// the answer to the click.
	do(t, ctx, "reload", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#class-orders")))
	before := cardCount(t, ctx, "#succeeded-orders")
	svc.Cure()
	do(t, ctx, "click Requeue",
		chromedp.Click(chromedp.CSS(fmt.Sprintf("#requeue-%s", deadKey))),
		chromedp.WaitVisible(chromedp.CSS("#flash")),
	)
	flash := value(t, ctx, "read the message", chromedp.Text(chromedp.CSS("#flash")))
	if !strings.Contains(flash, fmt.Sprintf("Dead letter %s requeued", deadKey)) {
		t.Fatalf("flash after Requeue: %q", flash)
	}
	// Reload until the row is gone and the orders card counts the
	// requeued message and the one parked behind it.
	deadline = time.Now().Add(60 * time.Second)
	for {
		do(t, ctx, "reload", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#class-orders")))
		gone := value(t, ctx, "look for the row", chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector("#dead-%s") === null`, deadKey)))
		after := cardCount(t, ctx, "#succeeded-orders")
		if gone && after >= before+2 {
			t.Logf("orders succeeded %d -> %d; dead letter %s gone from the page", before, after, deadKey)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Requeue: row gone %v, orders succeeded %d -> %d", gone, before, after)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := rt.GetDeadLetter(context.Background(), deadKey); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("dead letter %s after the requeue: %v", deadKey, err)
	}

	// Pause users with a reason: the card says so, a new users message
	// waits; Resume lets it run.
	do(t, ctx, "pause users",
		chromedp.SendKeys(chromedp.CSS("#reason-users"), "CRM maintenance"),
		chromedp.Click(chromedp.CSS("#pause-users")),
		chromedp.WaitVisible(chromedp.CSS("#hold-users")),
	)
	hold := value(t, ctx, "read the users card", chromedp.Text(chromedp.CSS("#hold-users")))
	flash = value(t, ctx, "read the message", chromedp.Text(chromedp.CSS("#flash")))
	state := value(t, ctx, "read the users state", chromedp.Text(chromedp.CSS("#state-users")))
	if !strings.Contains(hold, "paused since") || !strings.Contains(hold, "CRM maintenance") || state != "paused" ||
		!strings.Contains(flash, `Class "users" paused`) {
		t.Fatalf("after Pause: card %q, state %q, flash %q", hold, state, flash)
	}
	users := func() runtime.ClassStats { return rt.Stats()[1] }
	if users().Hold.State != runtime.HoldPaused {
		t.Fatalf("users is %s after Pause", users().Hold.State)
	}
	succeeded := users().Succeeded
	produce(t, broker, []kafka.Message{{Topic: rental.TopicUsers, Key: []byte("user-paused"), Value: []byte("ok")}})
	// The partition's fetch waits: the message stays in Kafka, nothing runs.
	time.Sleep(time.Second)
	if u := users(); u.Succeeded != succeeded || u.Running != 0 {
		t.Fatalf("users ran while paused: %+v", u)
	}
	// The form posts and the page comes back without the card's pause
	// line; until then the old page (and its pause message) is shown.
	do(t, ctx, "resume users",
		chromedp.Click(chromedp.CSS("#resume-users")),
		chromedp.WaitNotPresent(chromedp.CSS("#hold-users")),
		chromedp.WaitVisible(chromedp.CSS("#flash")),
	)
	flash = value(t, ctx, "read the message", chromedp.Text(chromedp.CSS("#flash")))
	if !strings.Contains(flash, `Class "users" resumed`) {
		t.Fatalf("flash after Resume: %q", flash)
	}
	waitUntil := time.Now().Add(30 * time.Second)
	for users().Succeeded <= succeeded {
		if time.Now().After(waitUntil) {
			t.Fatalf("the users message did not run after Resume: %+v", users())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s := users().Hold.State; s != runtime.HoldRunning {
		t.Fatalf("users is %s after Resume", s)
	}
}

// browser starts headless Chromium with a fresh profile; it is closed at
// the end of the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
	})
	return ctx
}

// do runs steps in the browser.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value runs a in the browser and returns its value.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// cardCount reads a number shown on the page.
func cardCount(t *testing.T, ctx context.Context, sel string) uint64 {
	t.Helper()
	s := value(t, ctx, "read "+sel, chromedp.Text(chromedp.CSS(sel)))
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		t.Fatalf("%s shows %q", sel, s)
	}
	return n
}

func produce(t *testing.T, broker *devbroker.Broker, msgs []kafka.Message) {
	t.Helper()
	w := devbroker.NewWriter(broker.Addrs())
	defer devbroker.CloseWriter(w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

// screenshot loads a burst so the cards show work in progress (and the
// hung users class backs up past its drain budget), and saves the page to
// docs/dashboard.png.
func screenshot(t *testing.T, ctx context.Context, url string, broker *devbroker.Broker, rt *runtime.Runtime) {
	t.Helper()
	var msgs []kafka.Message
	for i := range 1500 {
		topic := rental.Topics()[i%3]
		if topic == rental.TopicUsers && i > 180 {
			continue // 60 fill its queue; more would take long to drain after
		}
		msgs = append(msgs, kafka.Message{Topic: topic, Key: fmt.Appendf(nil, "burst-%d", i), Value: []byte("ok")})
	}
	produce(t, broker, msgs)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := rt.Stats()
		// users hung for longer than DrainTimeout: over budget whatever
		// its queue.
		if st[0].Running > 0 && st[1].OverBudget && st[1].LongestRunning > rt.DrainTimeout().Seconds()+1 && st[1].Lag > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no backlog for the screenshot: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	do(t, ctx, "reload for the screenshot", chromedp.Navigate(url+"/"), chromedp.WaitVisible(chromedp.CSS("#class-orders")))
	png := value(t, ctx, "screenshot", chromedp.FullScreenshot(100))
	if err := os.WriteFile(screenshotPath, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s (%d bytes)", screenshotPath, len(png))
}
