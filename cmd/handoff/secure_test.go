package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/kafkasec"
)

// TestReplaySecure: replay through a mutual-TLS listener that wants
// SCRAM-SHA-512, with the files and the password file the flags name; a
// wrong password ends it before anything is sent, naming broker,
// mechanism and user but not the password.
func TestReplaySecure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const pw = "pw-replay-3e9d"
	b, err := devbroker.StartSecured(dir, devbroker.Config{Topics: replayTopics, Partitions: fixPartitions}, "ops", pw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	files, pwFile := b.Files, b.PasswordFile
	wrongFile := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrongFile, []byte("not-"+pw), 0o600); err != nil {
		t.Fatal(err)
	}
	path := stateFile(t)
	before := readState(t, path)
	secFlags := func(pwf string) []string {
		return []string{"--tls-ca", files.CAFile, "--tls-cert", files.ClientCert, "--tls-key", files.ClientKey,
			"--sasl-mechanism", "scram-sha-512", "--sasl-username", "ops", "--sasl-password-file", pwf}
	}

	r := run(t, append([]string{"replay", path, "--brokers", b.Addr(), "--dead", "--topic", "local=submitted"}, secFlags(wrongFile)...)...)
	want := fmt.Sprintf(`handoff: kafka broker %[1]s (TLS, SASL SCRAM-SHA-512, user "ops"): SASL authentication failed: the broker rejected the user name or password: could not successfully authenticate to %[1]s with SASL: [58] SASL Authentication Failed: SASL Authentication failed`, b.Addr())
	if r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("wrong password: exit %d, stderr:\n%s\nwant: %s", r.code, r.stderr, want)
	}
	if strings.Contains(r.stdout+r.stderr, pw) {
		t.Error("the password is in the output")
	}
	if got := readState(t, path); len(got.pending) != len(before.pending) || len(got.dead) != len(before.dead) {
		t.Errorf("after the refused replay: %d pending, %d dead; want %d, %d", len(got.pending), len(got.dead), len(before.pending), len(before.dead))
	}

	r = run(t, append([]string{"replay", path, "--brokers", b.Addr(), "--dead", "--topic", "local=submitted"}, secFlags(pwFile)...)...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	n := len(before.pending) + len(before.dead)
	if !strings.Contains(r.stdout, fmt.Sprintf("replayed %d of %d messages", n, n)) {
		t.Errorf("output:\n%s", r.stdout)
	}
	tc, mech, err := b.ClientOptions().Load()
	if err != nil {
		t.Fatal(err)
	}
	d := &kafka.Dialer{DialFunc: (&kafkasec.Dialer{TLS: tc, SASL: mech}).DialContext}
	checkReplayed(t, readTopicsWith(t, d, b.Addr()), append(records(before.pending), records(before.dead)...))
}

// TestBrokerSecure: handoff broker --tls --tls-client-auth --sasl-user
// writes its CA and certificates to the folder it prints, and a client
// with them and the user's password produces to it.
func TestBrokerSecure(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := filepath.Join(t.TempDir(), "tls")
	b := startBrokerCmd(t, ctx, `broker listening on (\S+) .*\nmutual TLS: CA and certificates in (\S+) .*\nSASL users: alice \(SCRAM-SHA-256\), bob \(PLAIN\)\n`,
		"--addr", "127.0.0.1:0", "--topics", "a", "--partitions", "1",
		"--tls", "--tls-dir", dir, "--tls-client-auth", "--sasl-user", "scram-sha-256:alice:pw-a-1", "--sasl-user", "plain:bob:pw-b-2")
	w := b.out
	addr, printed := w.match[1], w.match[2]
	if printed != dir {
		t.Errorf("printed folder %s, want %s", printed, dir)
	}
	if strings.Contains(w.match[0], "pw-") {
		t.Error("a password is in the output")
	}
	o := kafkasec.Options{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client-key.pem"),
		Mechanism: "scram-sha-256", Username: "alice", LookupEnv: func(string) (string, bool) { return "pw-a-1", true }}
	tc, mech, err := o.Load()
	if err != nil {
		t.Fatal(err)
	}
	produceOnce(t, ctx, devbroker.NewWriterWith(&kafka.Transport{TLS: tc, SASL: mech}, []string{addr}), "secured broker", addr,
		kafka.Message{Topic: "a", Value: []byte("v")})
	cancel()
	b.waitStopped(t)
}
