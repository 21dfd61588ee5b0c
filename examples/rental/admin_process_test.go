package main

import (
	"context"
	"io"
	"net/http"
	"os"
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

// listening waits for the service to log msg="<what> listening" and
// returns the address.
func (s *service) listening(t *testing.T, what string) string {
	t.Helper()
	re := regexp.MustCompile(`msg="` + what + ` listening" addr=(\S+)`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(s.stderrText()); m != nil {
			return m[1]
		}
		select {
		case <-s.done:
			t.Fatalf("service exited before its %s listened\nstderr:\n%s", what, s.stderrText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s address logged\nstderr:\n%s", what, s.stderrText())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProcessProbesAndTokens runs the real binary with -probes on its own
// port, the admin token from -admin-token-file and the read token from
// $HANDOFF_ADMIN_READ_TOKEN: the probe port serves /livez, /readyz and
// /metrics (with handoff_build_info) and no message endpoint; the admin
// port wants the read token for dead letters, and the admin token (not
// the read one) to mutate. Not parallel: it sets the environment the
// child inherits.
func TestProcessProbesAndTokens(t *testing.T) {
	bin := rentalBinary(t)
	broker := startBroker(t, 1)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envAdminReadToken, "read-secret")
	s := startService(t, bin, "-brokers", broker.Addr(), "-state", filepath.Join(dir, "rental.db"),
		"-probes", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-admin-token-file", tokenFile)
	probes, adminBase := "http://"+s.listening(t, "probe server"), "http://"+s.listening(t, "admin server")
	if code, body := get(probes + "/livez"); code != 200 {
		t.Errorf("/livez: %d %s", code, body)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, _ := get(probes + "/readyz"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz on the probe port never 200\nstderr:\n%s", s.stderrText())
		}
	}
	code, body := get(probes + "/metrics")
	if code != 200 || !regexp.MustCompile(`handoff_build_info\{client="[a-z-]+",go_version="go[0-9.]+[^"]*",version="[0-9.]+"\} 1`).MatchString(body) {
		t.Errorf("/metrics on the probe port: %d, no handoff_build_info\n%.2000s", code, body)
	}
	for _, path := range []string{"/api/dead", "/api/classes", "/"} {
		if code, _ := get(probes + path); code != 404 {
			t.Errorf("probe port %s: %d, want 404", path, code)
		}
	}
	req := func(method, path, token string) int {
		r, _ := http.NewRequest(method, adminBase+path, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/api/dead", "", 401},
		{"GET", "/api/dead", "read-secret", 200},
		{"GET", "/api/dead", "admin-secret", 200},
		{"POST", "/api/dead/99/discard", "read-secret", 401},
		{"POST", "/api/dead/99/discard", "admin-secret", 404}, // authorized; no such dead letter
	} {
		if got := req(c.method, c.path, c.token); got != c.want {
			t.Errorf("%s %s with %q: %d, want %d", c.method, c.path, c.token, got, c.want)
		}
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.wait(t); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, s.stderrText())
	}
	if strings.Contains(s.stderrText(), "admin-secret") || strings.Contains(s.stderrText(), "read-secret") {
		t.Error("a token is in the log")
	}
}
