package main

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/testio"
)

// lineWaiter records what is written and closes ready once a line
// matching re has been.
type lineWaiter struct {
	re    *regexp.Regexp
	mu    sync.Mutex
	buf   strings.Builder
	match []string
	ready chan struct{}
}

func (w *lineWaiter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.match == nil {
		if m := w.re.FindStringSubmatch(w.buf.String()); m != nil {
			w.match = m
			close(w.ready)
		}
	}
	return len(p), nil
}

func TestBroker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &lineWaiter{re: regexp.MustCompile(`broker listening on (\S+) \(topics a, b, 3 partitions each\); Ctrl-C to stop\n`), ready: make(chan struct{})}
	root := newRootCmd()
	root.SetOut(w)
	var errb testio.SyncBuffer
	root.SetErr(&errb)
	done := make(chan int, 1)
	go func() {
		done <- execute(ctx, root, []string{"broker", "--addr", "127.0.0.1:0", "--topics", "a,b", "--partitions", "3"})
	}()
	select {
	case <-w.ready:
	case code := <-done:
		t.Fatalf("broker exited %d: %s", code, errb.String())
	case <-time.After(30 * time.Second):
		t.Fatal("broker did not start")
	}
	addr := w.match[1]

	pw := devbroker.NewWriter([]string{addr})
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	err := pw.WriteMessages(pctx, kafka.Message{Topic: "a", Key: []byte("k"), Value: []byte("v")}, kafka.Message{Topic: "b", Value: []byte("w")})
	pcancel()
	if err := devbroker.CloseWriter(pw); err != nil {
		t.Error(err)
	}
	if err != nil {
		t.Fatalf("produce to the broker at %s: %v", addr, err)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d: %s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("broker did not stop on cancel")
	}
	w.mu.Lock()
	out := w.buf.String()
	w.mu.Unlock()
	if !strings.HasSuffix(out, "broker stopped\n") {
		t.Errorf("output: %q", out)
	}
}

func TestBrokerAddrInUse(t *testing.T) {
	t.Parallel()
	b, err := devbroker.Start(devbroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := run(t, "broker", "--addr", b.Addr())
	if r.code != exitFailure || !strings.Contains(r.stderr, "address already in use") {
		t.Errorf("exit %d: %q", r.code, r.stderr)
	}
}
