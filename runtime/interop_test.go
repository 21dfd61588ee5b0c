package runtime

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestKcatInterop: records produced by an independent client (kcat, on
// librdkafka) with keys and headers are consumed and committed by the
// runtime, and kcat reads the group's commit back.
func TestKcatInterop(t *testing.T) {
	t.Parallel()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat not installed (Debian package kcat); .ci/run installs it")
	}
	b := setup(t, 2, "orders")
	var lines []string
	for i := range 50 {
		lines = append(lines, fmt.Sprintf("key-%d:value-%d", i%5, i))
	}
	cmd := exec.Command(kcat, "-P", "-b", b.broker.Addr(), "-t", "orders", "-K:", "-H", "origin=kcat")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat produce: %v\n%s", err, out)
	}
	var n atomic.Int64
	all := make(chan struct{})
	rt, err := New(b.config(func(_ context.Context, m *handoff.Message) error {
		if !strings.HasPrefix(string(m.Key), "key-") || len(m.Headers) != 1 || m.Headers[0].Key != "origin" || string(m.Headers[0].Value) != "kcat" {
			t.Errorf("message from kcat: key %q headers %v", m.Key, m.Headers)
		}
		if n.Add(1) == 50 {
			close(all)
		}
		return nil
	}, func(c *Class) { c.Ordered = true }))
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatalf("handled %d of 50", n.Load())
	}
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if got := b.committed(); got != 50 {
		t.Errorf("committed %d, want 50", got)
	}
	// kcat, as a member of the same group, finds nothing left to read.
	out, err := exec.Command(kcat, "-C", "-b", b.broker.Addr(), "-G", b.group, "orders", "-e", "-q", "-o", "stored",
		"-X", "auto.offset.reset=earliest").CombinedOutput()
	if err != nil {
		t.Fatalf("kcat consume: %v\n%s", err, out)
	}
	if strings.TrimSpace(string(out)) != "" {
		t.Errorf("kcat in the same group read records past the commit:\n%s", out)
	}
}
