package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// adminAddr waits for the service to log its admin server's address.
func (s *service) adminAddr(t *testing.T) string {
	t.Helper()
	re := regexp.MustCompile(`msg="admin server listening" addr=(\S+)`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(s.stderrText()); m != nil {
			return m[1]
		}
		select {
		case <-s.done:
			t.Fatalf("service exited before serving the admin endpoints\nstderr:\n%s", s.stderrText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no admin address logged\nstderr:\n%s", s.stderrText())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// get fetches url and returns the status and body; status 0 when the
// request failed.
func get(url string) (int, string) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProcessAdminDuringStop runs the real binary with -admin on a free
// loopback port and a drain that lasts (1s of work per message, 2s of
// drain): after SIGTERM the admin server still answers, /readyz is 503,
// and /metrics shows the finished quiesce phase while the drain is still
// running. The server is down once the process has exited 0.
func TestProcessAdminDuringStop(t *testing.T) {
	t.Parallel() // its own broker, directory and processes
	bin := rentalBinary(t)
	broker := startBroker(t, 2)
	produceSteadily(context.Background(), t, broker.Addrs(), 300)
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects.log")
	s := startService(t, bin, "-brokers", broker.Addr(), "-state", filepath.Join(dir, "rental.db"),
		"-drain-timeout", "2s", "-work", "1s", "-effects", effects, "-admin", "127.0.0.1:0", "-admin-token", "tok")
	base := "http://" + s.adminAddr(t)
	waitLines(t, effects, 1, s)
	if code, body := get(base + "/readyz"); code != 200 {
		t.Fatalf("/readyz while running: %d %s", code, body)
	}
	if code, body := get(base + "/api/classes"); code != 200 || !strings.Contains(body, `"name": "heartbeats"`) {
		t.Fatalf("/api/classes: %d %s", code, body)
	}

	s.cmd.Process.Signal(syscall.SIGTERM)
	const quiesce = `handoff_stop_phase_duration_seconds{phase="quiesce"}`
	var metrics string
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get(base + "/metrics")
		if code == 200 && strings.Contains(body, quiesce) {
			metrics = body
			break
		}
		select {
		case <-s.done:
			t.Fatalf("the service exited before /metrics showed %s\nstderr:\n%s", quiesce, s.stderrText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never showed %s: %d\n%s", quiesce, code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Scraped during the drain: its phase has no duration yet.
	if strings.Contains(metrics, `phase="drain"`) {
		t.Errorf("the scrape came after the drain, not during it")
	}
	if !strings.Contains(metrics, "handoff_ready 0") || !strings.Contains(metrics, "handoff_messages_total{") {
		t.Errorf("metrics during the stop:\n%s", metrics)
	}
	if code, _ := get(base + "/readyz"); code != 503 {
		t.Errorf("/readyz during the stop: %d, want 503", code)
	}

	if code := s.wait(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, s.stderrText())
	}
	rep := s.report(t)
	if !rep.DrainTimedOut || rep.Quiesce <= 0 {
		t.Errorf("report %+v: want a drain cut at its timeout", rep)
	}
	if code, _ := get(base + "/healthz"); code != 0 {
		t.Errorf("the admin server still answers after the exit: %d", code)
	}
	if !strings.Contains(s.stderrText(), "stop complete") {
		t.Errorf("no stop logged:\n%s", s.stderrText())
	}
}

// TestAdminFlagNeedsServiceMode: the demo has no admin server; asking for
// one is a usage error.
func TestAdminFlagNeedsServiceMode(t *testing.T) {
	bin := rentalBinary(t)
	s := startService(t, bin, "-admin", ":0")
	if code := s.wait(t); code != 2 || !strings.Contains(s.stderrText(), "-admin needs service mode") {
		t.Errorf("exit %d, stderr %q", code, s.stderrText())
	}
}
