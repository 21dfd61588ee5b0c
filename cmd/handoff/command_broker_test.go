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

// brokerCmd is `handoff broker` running in the background for a test.
type brokerCmd struct {
	out  *lineWaiter
	errb testio.SyncBuffer
	done chan int
}

// startBrokerCmd runs `handoff broker args...` until ctx ends and waits
// up to 30 s for its output to match ready (out.match then holds the
// submatches); it fails the test if the command exits or times out first.
func startBrokerCmd(t *testing.T, ctx context.Context, ready string, args ...string) *brokerCmd {
	t.Helper()
	b := &brokerCmd{out: &lineWaiter{re: regexp.MustCompile(ready), ready: make(chan struct{})}, done: make(chan int, 1)}
	root := newRootCmd()
	root.SetOut(b.out)
	root.SetErr(&b.errb)
	go func() {
		b.done <- execute(ctx, root, append([]string{"broker"}, args...))
	}()
	select {
	case <-b.out.ready:
	case code := <-b.done:
		t.Fatalf("broker exited %d: %s", code, b.errb.String())
	case <-time.After(30 * time.Second):
		t.Fatal("broker did not start")
	}
	return b
}

// waitStopped waits up to 30 s for the command to end (after its ctx was
// cancelled) and fails the test unless it exits 0.
func (b *brokerCmd) waitStopped(t *testing.T) {
	t.Helper()
	select {
	case code := <-b.done:
		if code != 0 {
			t.Errorf("exit %d: %s", code, b.errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("broker did not stop on cancel")
	}
}

// produceOnce writes msgs with w (up to 30 s), closes w, and fails the
// test if the write failed; what and addr name the broker in the failure.
func produceOnce(t *testing.T, ctx context.Context, w *kafka.Writer, what, addr string, msgs ...kafka.Message) {
	t.Helper()
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	err := w.WriteMessages(pctx, msgs...)
	pcancel()
	if cerr := devbroker.CloseWriter(w); cerr != nil {
		t.Error(cerr)
	}
	if err != nil {
		t.Fatalf("produce to the %s at %s: %v", what, addr, err)
	}
}

func TestBroker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := startBrokerCmd(t, ctx, `broker listening on (\S+) \(topics a, b, 3 partitions each\); Ctrl-C to stop\n`,
		"--addr", "127.0.0.1:0", "--topics", "a,b", "--partitions", "3")
	w := b.out
	addr := w.match[1]

	produceOnce(t, ctx, devbroker.NewWriter([]string{addr}), "broker", addr,
		kafka.Message{Topic: "a", Key: []byte("k"), Value: []byte("v")}, kafka.Message{Topic: "b", Value: []byte("w")})

	cancel()
	b.waitStopped(t)
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
