package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/rental"
)

// TestProcessSecure runs the real binary against an embedded broker that
// wants mutual TLS and SCRAM-SHA-512, with -tls-ca, -tls-cert, -tls-key,
// -sasl-mechanism, -sasl-username and -sasl-password-file: SIGTERM twice
// under load and a run to the end lose nothing. A wrong password (from
// $KAFKA_SASL_PASSWORD) and a CA the broker's certificate is not signed
// by each end the start: exit 2 within seconds, one line naming the
// broker, the mechanism and the user, and the password nowhere.
func TestProcessSecure(t *testing.T) {
	bin := rentalBinary(t)
	dir := t.TempDir()
	const pw = "pw-rental-c4e8"
	broker, err := devbroker.StartSecured(filepath.Join(dir, "tls"), devbroker.Config{Topics: rental.Topics(), Partitions: 4}, "rental", pw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	files, pwFile := broker.Files, broker.PasswordFile
	effects := filepath.Join(dir, "effects.log")
	tlsFlags := []string{"-tls-ca", files.CAFile, "-tls-cert", files.ClientCert, "-tls-key", files.ClientKey}
	base := []string{"-brokers", broker.Addr(), "-group", "rental-secure", "-state", filepath.Join(dir, "rental.db"),
		"-drain-timeout", "100ms", "-effects", effects, "-sasl-mechanism", "scram-sha-512", "-sasl-username", "rental"}

	// Refused starts first: nothing is handled.
	refused := []struct {
		name string
		args []string
		env  string
		want string // %s: the broker
	}{
		{"wrong password", append(append([]string(nil), tlsFlags...), base...), "KAFKA_SASL_PASSWORD=not-" + pw,
			`rental: kafka broker %s (TLS, SASL SCRAM-SHA-512, user "rental"): SASL authentication failed: the broker rejected the user name or password: `},
		{"untrusted CA", append([]string{"-tls-cert", files.ClientCert, "-tls-key", files.ClientKey, "-sasl-password-file", pwFile}, base...), "",
			`rental: kafka broker %s (TLS, SASL SCRAM-SHA-512, user "rental"): TLS handshake failed: the broker's certificate is not signed by a CA this client trusts (check the CA bundle): `},
	}
	for _, r := range refused {
		began := time.Now()
		s := startServiceEnv(t, bin, r.env, r.args...)
		code := s.wait(t)
		took := time.Since(began)
		stderr := s.stderrText()
		t.Logf("%s: exit %d after %s: %s", r.name, code, took.Round(time.Millisecond), lineWith(stderr, "rental: kafka broker"))
		if code != 2 {
			t.Errorf("%s: exit %d, want 2\nstderr:\n%s", r.name, code, stderr)
		}
		if n := strings.Count(stderr, fmt.Sprintf(r.want, broker.Addr())); n != 1 {
			t.Errorf("%s: %d lines %q in stderr:\n%s", r.name, n, fmt.Sprintf(r.want, broker.Addr()), stderr)
		}
		if strings.Contains(stderr+s.stdout.String(), pw) {
			t.Errorf("%s: the password is in the output", r.name)
		}
		if took > 30*time.Second {
			t.Errorf("%s: took %s", r.name, took)
		}
	}
	if _, lines := readEffects(t, effects); lines != 0 {
		t.Fatalf("refused starts handled %d messages", lines)
	}

	tc, mech, err := broker.ClientOptions().Load()
	if err != nil {
		t.Fatal(err)
	}
	const total = 4000
	produced := make(chan []string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		produced <- produceSteadilyWith(ctx, t, devbroker.NewWriterWith(&kafka.Transport{TLS: tc, SASL: mech}, broker.Addrs()), total)
	}()
	args := append(append(append([]string(nil), tlsFlags...), base...), "-sasl-password-file", pwFile, "-work", "5ms")
	began := time.Now()
	for round := range 2 {
		s := startService(t, bin, args...)
		_, before := readEffects(t, effects)
		waitLines(t, effects, before+400, s)
		s.stopOK(t, fmt.Sprintf("round %d, SIGTERM", round))
		rep := s.report(t)
		seen, lines := readEffects(t, effects)
		t.Logf("%s SIGTERM round %d: snapshotted %d, re-pushed at start %d, stop %s; effects %d lines, %d unique",
			time.Since(began).Round(time.Millisecond), round, rep.Snapshotted, rep.Repushed, rep.Stop, lines, len(seen))
	}
	keys := <-produced
	s := startService(t, bin, args...)
	waitHandled(t, effects, keys, s, 90*time.Second, "")
	s.stopOK(t, "final stop")
	seen, lines := readEffects(t, effects)
	dead := deadKeys(t, filepath.Join(dir, "rental.db"))
	lost := lostOf(seen, dead, keys)
	t.Logf("secured (mutual TLS, SCRAM-SHA-512): produced %d, handled %d unique, dead letters %d, lost %d, duplicates %d (after 2 SIGTERM)",
		len(keys), len(seen), len(dead), lost, lines-len(seen))
	if lost != 0 {
		t.Errorf("lost %d messages", lost)
	}
	if strings.Contains(s.stderrText(), pw) {
		t.Error("the password is in the logs")
	}
}

// startServiceEnv is startService with env (NAME=VALUE) added to the
// environment, when not empty.
func startServiceEnv(t *testing.T, bin, env string, args ...string) *service {
	t.Helper()
	if env == "" {
		return startService(t, bin, args...)
	}
	name, value, _ := strings.Cut(env, "=")
	t.Setenv(name, value)
	return startService(t, bin, args...)
}

// lineWith returns the first line of text containing sub.
func lineWith(text, sub string) string {
	for l := range strings.Lines(text) {
		if strings.Contains(l, sub) {
			return strings.TrimRight(l, "\r\n")
		}
	}
	return ""
}
