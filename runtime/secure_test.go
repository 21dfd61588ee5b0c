package runtime

import (
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/testio"
	"github.com/handoff-go/handoff/kafkasec"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, made for one test.
type testPKI struct {
	ca             *devbroker.CA
	server, client *devbroker.Issued
}

func newPKI(t *testing.T, hosts ...string) *testPKI {
	t.Helper()
	ca, err := devbroker.NewCA("handoff test CA")
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1"}
	}
	server, err := ca.Issue(devbroker.Leaf{Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(devbroker.Leaf{Client: true})
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{ca: ca, server: server, client: client}
}

// serverTLS is the broker's TLS configuration; mutual requires a client
// certificate signed by the CA.
func (p *testPKI) serverTLS(mutual bool) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{p.server.TLS}, MinVersion: tls.VersionTLS12}
	if mutual {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = p.ca.Pool()
	}
	return c
}

// clientTLS trusts the CA and, with cert, presents the client certificate.
func (p *testPKI) clientTLS(cert bool) *tls.Config {
	c := &tls.Config{RootCAs: p.ca.Pool(), MinVersion: tls.VersionTLS12}
	if cert {
		c.Certificates = []tls.Certificate{p.client.TLS}
	}
	return c
}

func mechanism(t *testing.T, name, user, password string) sasl.Mechanism {
	t.Helper()
	m, err := kafkasec.Mechanism(name, user, password)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// setupSecure is setup with a secured broker; the bundle's own clients
// use clientTLS and mech.
func setupSecure(t *testing.T, bc devbroker.Config, clientTLS *tls.Config, mech sasl.Mechanism) *bundle {
	t.Helper()
	b, err := devbroker.Start(bc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	tp := map[string]int{}
	for _, tt := range bc.Topics {
		tp[tt] = bc.Partitions
	}
	return &bundle{
		t: t, broker: b, topics: tp,
		state:     filepath.Join(t.TempDir(), "state.db"),
		group:     "g-" + t.Name(),
		handled:   map[string]int{},
		transport: func() *kafka.Transport { return &kafka.Transport{TLS: clientTLS, SASL: mech} },
	}
}

// logBuffer is a logger that keeps every line, debug included.
type logBuffer struct{ testio.SyncBuffer }

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestSecureConsume: through a TLS listener, SASL PLAIN, SCRAM-SHA-256,
// SCRAM-SHA-512 and mutual TLS with SCRAM together, a class consumes,
// its dead letters are published to its DeadLetterTopic, and a second
// class consumes them; every offset is committed.
func TestSecureConsume(t *testing.T) {
	pki := newPKI(t)
	const pw = "pw-consume-7f3a"
	cases := []struct {
		name    string
		tls     bool
		mutual  bool
		mech    string
		brokerM string
	}{
		{name: "tls", tls: true},
		{name: "plain", mech: "plain", brokerM: devbroker.PLAIN},
		{name: "scram-sha-256", mech: "scram-sha-256", brokerM: devbroker.SCRAMSHA256},
		{name: "scram-sha-512", mech: "scram-sha-512", brokerM: devbroker.SCRAMSHA512},
		{name: "mtls+scram-sha-512", tls: true, mutual: true, mech: "scram-sha-512", brokerM: devbroker.SCRAMSHA512},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bc := devbroker.Config{Topics: []string{"orders", "orders-dlq"}, Partitions: 2}
			var clientTLS *tls.Config
			var mech sasl.Mechanism
			if tc.tls {
				bc.TLS = pki.serverTLS(tc.mutual)
				clientTLS = pki.clientTLS(tc.mutual)
			}
			if tc.mech != "" {
				bc.Users = []devbroker.User{{Mechanism: tc.brokerM, Name: "alice", Password: pw}}
				mech = mechanism(t, tc.mech, "alice", pw)
			}
			b := setupSecure(t, bc, clientTLS, mech)
			var values []string
			for i := range 20 {
				if i%5 == 4 {
					values = append(values, fmt.Sprintf("poison-%d", i))
				} else {
					values = append(values, fmt.Sprintf("v-%d", i))
				}
			}
			b.produceValues("orders", "k", values...)

			var mu sync.Mutex
			good, dead := 0, 0
			logs := &logBuffer{}
			cfg := Config{
				Brokers: b.broker.Addrs(), Group: b.group, StatePath: b.state,
				TLS: clientTLS, SASL: mech, ClientID: "secure-test",
				CommitInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second, FetchMaxWait: 100 * time.Millisecond,
				Logger: logs.logger(),
				Classes: []Class{
					{Name: "orders", Topics: []string{"orders"}, DeadLetterTopic: "orders-dlq", Workers: 2,
						Handler: func(ctx context.Context, m *handoff.Message) error {
							if strings.HasPrefix(string(m.Value), "poison") {
								return handoff.Permanent(errors.New("poison"))
							}
							mu.Lock()
							good++
							mu.Unlock()
							return nil
						}},
					{Name: "dead", Topics: []string{"orders-dlq"}, Workers: 1,
						Handler: func(ctx context.Context, m *handoff.Message) error {
							mu.Lock()
							dead++
							mu.Unlock()
							return nil
						}},
				},
			}
			rt, wait := startNew(t, cfg)
			waitFor(t, "16 handled and 4 dead letters consumed", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return good == 16 && dead == 4
			})
			waitFor(t, "24 offsets committed", func() bool { return b.committed() == 24 })
			if err := rt.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			rep, err := wait()
			if err != nil {
				t.Fatal(err)
			}
			if rep.Published != 4 || rep.DeadLettered != 4 {
				t.Errorf("published %d, dead-lettered %d; want 4, 4", rep.Published, rep.DeadLettered)
			}
			if got := b.committed(); got != 24 {
				t.Errorf("committed %d, want 24", got)
			}
			if n := rt.kafka.cfg.conn.authErrs[0].Load() + rt.kafka.cfg.conn.authErrs[1].Load() + rt.kafka.cfg.conn.authErrs[2].Load(); n != 0 {
				t.Errorf("%d auth errors counted", n)
			}
			if strings.Contains(logs.String(), pw) {
				t.Error("the password appears in the logs")
			}
		})
	}
}

// TestSecureFailFast: what retrying cannot fix ends Run before the join,
// with an error naming the broker, the TLS and SASL settings, the user
// and what failed, and never the password, in the error or any log line.
func TestSecureFailFast(t *testing.T) {
	pki := newPKI(t)
	otherCA, err := devbroker.NewCA("other test CA")
	if err != nil {
		t.Fatal(err)
	}
	wrongName := newPKI(t, "kafka.example.internal", "10.0.0.7")
	var expired *devbroker.Issued
	expired, err = pki.ca.Issue(devbroker.Leaf{Hosts: []string{"127.0.0.1"}, NotAfter: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	const pw = "pw-failfast-91c2"
	alice := func(m string) []devbroker.User { return []devbroker.User{{Mechanism: m, Name: "alice", Password: pw}} }
	cases := []struct {
		name      string
		serverTLS *tls.Config
		users     []devbroker.User
		clientTLS *tls.Config
		mech      sasl.Mechanism
		step      string
		want      string // the error, %[1]s the broker's address
	}{
		{
			name: "wrong password", users: alice(devbroker.SCRAMSHA256),
			mech: mechanism(t, "scram-sha-256", "alice", pw+"-wrong"), step: "SASL authentication",
			want: `runtime: kafka broker %[1]s (plaintext, SASL SCRAM-SHA-256, user "alice"): SASL authentication failed: the broker rejected the user name or password: could not successfully authenticate to %[1]s with SASL: [58] SASL Authentication Failed: SASL Authentication failed`,
		},
		{
			name: "unknown user", users: alice(devbroker.PLAIN),
			mech: mechanism(t, "plain", "mallory", pw), step: "SASL authentication",
			want: `runtime: kafka broker %[1]s (plaintext, SASL PLAIN, user "mallory"): SASL authentication failed: the broker rejected the user name or password: could not successfully authenticate to %[1]s with SASL: [58] SASL Authentication Failed: SASL Authentication failed`,
		},
		{
			name: "mechanism not enabled", users: alice(devbroker.PLAIN),
			mech: mechanism(t, "scram-sha-512", "alice", pw), step: "SASL handshake",
			want: `runtime: kafka broker %[1]s (plaintext, SASL SCRAM-SHA-512, user "alice"): SASL handshake failed: the broker does not enable this SASL mechanism: could not successfully authenticate to %[1]s with SASL: SASL handshake failed: [33] Unsupported SASL Mechanism: the broker does not support the requested SASL mechanism`,
		},
		{
			name: "unknown authority", serverTLS: pki.serverTLS(false), clientTLS: &tls.Config{RootCAs: otherCA.Pool()}, step: "TLS handshake",
			want: `runtime: kafka broker %[1]s (TLS, no SASL): TLS handshake failed: the broker's certificate is not signed by a CA this client trusts (check the CA bundle): tls: failed to verify certificate: x509: certificate signed by unknown authority`,
		},
		{
			name: "server name mismatch", serverTLS: wrongName.serverTLS(false), clientTLS: wrongName.clientTLS(false), step: "TLS handshake",
			want: `runtime: kafka broker %[1]s (TLS, no SASL): TLS handshake failed: the broker's certificate is not valid for the name this client connects to (check the broker address, the certificate's names or tls.Config.ServerName): tls: failed to verify certificate: x509: certificate is valid for 10.0.0.7, not 127.0.0.1`,
		},
		{
			name:      "expired certificate",
			serverTLS: &tls.Config{Certificates: []tls.Certificate{expired.TLS}}, clientTLS: pki.clientTLS(false), step: "TLS handshake",
			want: `runtime: kafka broker %[1]s (TLS, no SASL): TLS handshake failed: the broker's certificate has expired or is not valid yet: tls: failed to verify certificate: x509: certificate has expired or is not yet valid: current time`,
		},
		{
			name: "client certificate required", serverTLS: pki.serverTLS(true), clientTLS: pki.clientTLS(false),
			users: alice(devbroker.SCRAMSHA512), mech: mechanism(t, "scram-sha-512", "alice", pw), step: "TLS handshake",
			want: `runtime: kafka broker %[1]s (TLS, SASL SCRAM-SHA-512, user "alice"): TLS handshake failed: the broker requires a client certificate and none was sent (set the client certificate and key): could not successfully authenticate to %[1]s with SASL: SASL handshake failed: remote error: tls: certificate required`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := devbroker.Start(devbroker.Config{Topics: []string{"orders"}, Partitions: 1, TLS: tc.serverTLS, Users: tc.users})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Close)
			logs := &logBuffer{}
			rt, err := newRuntime(Config{
				Brokers: b.Addrs(), Group: "g", StatePath: filepath.Join(t.TempDir(), "state.db"),
				TLS: tc.clientTLS, SASL: tc.mech, Logger: logs.logger(),
				Classes: []Class{{Name: "orders", Topics: []string{"orders"}, Handler: func(context.Context, *handoff.Message) error { return nil }}},
			})
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			_, err = start(t, rt, context.Background())()
			took := time.Since(began)
			t.Logf("Run returned after %s: %v", took.Round(time.Millisecond), err)
			if err == nil {
				t.Fatal("Run returned no error")
			}
			want := fmt.Sprintf(tc.want, b.Addr())
			if got := err.Error(); !strings.HasPrefix(got, want) {
				t.Errorf("error\n got: %s\nwant: %s", got, want)
			}
			ce, ok := errors.AsType[*kafkasec.ConnectError](err)
			if !ok {
				t.Fatalf("error is no *kafkasec.ConnectError: %T", err)
			}
			if ce.Broker != b.Addr() || ce.Step != tc.step {
				t.Errorf("broker %q, step %q; want %q, %q", ce.Broker, ce.Step, b.Addr(), tc.step)
			}
			if tc.mech != nil && ce.Mechanism != tc.mech.Name() {
				t.Errorf("mechanism %q, want %q", ce.Mechanism, tc.mech.Name())
			}
			if strings.Contains(err.Error(), pw) || strings.Contains(logs.String(), pw) {
				t.Errorf("the password appears in the error or the logs:\n%s", logs.String())
			}
			if took > 30*time.Second {
				t.Errorf("Run took %s to fail", took)
			}
		})
	}
}

// TestConnectWaitsWithBackoff: brokers that refuse connections are
// waited for with one warning per attempt, 1s, 2s, 4s, 8s apart (up to
// 30s), until the context ends; then connect returns nil.
func TestConnectWaitsWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logger, warned := countLogs(t, "kafka brokers not reachable yet; waiting")
		rt, err := newRuntime(Config{
			Brokers: []string{"127.0.0.1:1"}, Group: "g", StatePath: filepath.Join(t.TempDir(), "state.db"), Logger: logger,
			Classes: []Class{{Name: "orders", Topics: []string{"orders"}, Handler: func(context.Context, *handoff.Message) error { return nil }}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var dials []time.Duration
		began := time.Now()
		rt.kafka.cfg.conn.sec.NetDial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials = append(dials, time.Since(began))
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := rt.kafka.cfg.conn.connect(ctx); err != nil {
			t.Fatalf("connect: %v", err)
		}
		want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second, 15 * time.Second}
		if !slices.Equal(dials, want) {
			t.Errorf("dialled at %v, want %v", dials, want)
		}
		if n := warned.Load(); n != int64(len(want)) {
			t.Errorf("%d warnings, want %d", n, len(want))
		}
	})
}

// TestSecureWaitsForBroker: a secured broker that is not up when Run
// starts is waited for; once it is, the class consumes through it.
func TestSecureWaitsForBroker(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const pw = "pw-wait-55d0"
	mech := mechanism(t, "scram-sha-512", "alice", pw)
	var handled atomic.Int64
	logger, warned := countLogs(t, "kafka brokers not reachable yet; waiting")
	rt, err := newRuntime(Config{
		Brokers: []string{addr}, Group: "g", StatePath: filepath.Join(t.TempDir(), "state.db"), SASL: mech, Logger: logger,
		CommitInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second, FetchMaxWait: 100 * time.Millisecond,
		Classes: []Class{{Name: "orders", Topics: []string{"orders"},
			Handler: func(context.Context, *handoff.Message) error { handled.Add(1); return nil }}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "a warning that the broker is not reachable", func() bool { return warned.Load() > 0 })
	b := setupSecure(t, devbroker.Config{Addr: addr, Topics: []string{"orders"}, Partitions: 2,
		Users: []devbroker.User{{Mechanism: devbroker.SCRAMSHA512, Name: "alice", Password: pw}}}, nil, mech)
	b.produceValues("orders", "k", "a", "b", "c")
	waitFor(t, "3 handled", func() bool { return handled.Load() == 3 })
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d warnings while waiting", warned.Load())
}

// TestSecureCredentialsRotated: when the user's password changes while
// an instance runs, the connections it opens from then on fail: each is
// counted in handoff_kafka_auth_errors_total and logged (at most once per
// 10s), and the instance keeps running.
func TestSecureCredentialsRotated(t *testing.T) {
	t.Parallel()
	const pw1, pw2 = "pw-old-0a11", "pw-new-0b22"
	old := mechanism(t, "scram-sha-256", "alice", pw1)
	b := setupSecure(t, devbroker.Config{Topics: []string{"orders"}, Partitions: 4,
		Users: []devbroker.User{{Mechanism: devbroker.SCRAMSHA256, Name: "alice", Password: pw1}}}, nil, old)
	reg := prometheus.NewRegistry()
	logs := &logBuffer{}
	var handled atomic.Int64
	cfg := b.config(func(context.Context, *handoff.Message) error { handled.Add(1); return nil }, nil)
	cfg.SASL, cfg.Logger, cfg.Registerer = old, logs.logger(), reg
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	b.produce(20)
	waitFor(t, "20 handled", func() bool { return handled.Load() == 20 })

	// Rotate alice's password, then make the group rebalance: the first
	// instance's new partition readers dial with the old one.
	salt := []byte("0123456789abcdef")
	salted, err := pbkdf2.Key(sha256.New, pw2, salt, 4096, sha256.Size)
	if err != nil {
		t.Fatal(err)
	}
	tr := b.transport()
	defer tr.CloseIdleConnections()
	resp, err := (&kafka.Client{Addr: kafka.TCP(b.broker.Addr()), Transport: tr}).AlterUserScramCredentials(context.Background(),
		&kafka.AlterUserScramCredentialsRequest{Upsertions: []kafka.UserScramCredentialsUpsertion{{
			Name: "alice", Mechanism: kafka.ScramMechanismSha256, Iterations: 4096, Salt: salt, SaltedPassword: salted}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Results {
		if r.Error != nil {
			t.Fatal(r.Error)
		}
	}
	cfg2 := cfg
	cfg2.SASL, cfg2.Registerer, cfg2.Logger = mechanism(t, "scram-sha-256", "alice", pw2), nil, testLogger(t)
	rt2, wait2 := b.instance("second", cfg2)
	waitFor(t, "a failed connection counted", func() bool { return rt.kafka.cfg.conn.authErrs[2].Load() > 0 })

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var counted float64
	for _, mf := range mfs {
		if mf.GetName() != "handoff_kafka_auth_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "step" && l.GetValue() == "sasl_authentication" {
					counted = m.GetCounter().GetValue()
				}
			}
		}
	}
	if counted < 1 {
		t.Errorf("handoff_kafka_auth_errors_total{step=\"sasl_authentication\"} = %v, want >= 1", counted)
	}
	if !strings.Contains(logs.String(), "kafka connection failed in a way retrying cannot fix") {
		t.Errorf("no log line for the failed connection:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), pw1) || strings.Contains(logs.String(), pw2) {
		t.Error("a password appears in the logs")
	}
	rt2.Shutdown(context.Background())
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Logf("first instance: %v", err)
	}
	if _, err := wait2(); err != nil {
		t.Logf("second instance: %v", err)
	}
}

// TestSecureConfigValidated: New reports what it can tell wrong about
// TLS and SASL without connecting.
func TestSecureConfigValidated(t *testing.T) {
	pki := newPKI(t)
	noKey := pki.client.TLS
	noKey.PrivateKey = nil
	emptyUser, err := scram.Mechanism(scram.SHA256, "", "pw")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"client certificate without key", func(c *Config) { c.TLS = &tls.Config{Certificates: []tls.Certificate{noKey}} },
			"runtime: invalid config: TLS.Certificates[0] has no private key (a client certificate needs its key)"},
		{"PLAIN without user", func(c *Config) { c.SASL = plain.Mechanism{Password: "pw"} },
			"runtime: invalid config: kafkasec: SASL PLAIN has an empty user name"},
		{"PLAIN without password", func(c *Config) { c.SASL = plain.Mechanism{Username: "alice"} },
			`runtime: invalid config: kafkasec: SASL PLAIN as user "alice" has an empty password`},
		{"SCRAM without user", func(c *Config) { c.SASL = emptyUser },
			"runtime: invalid config: kafkasec: SASL SCRAM-SHA-256 has an empty user name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Brokers: []string{"127.0.0.1:9092"}, Group: "g", StatePath: "x.db",
				Classes: []Class{{Name: "orders", Topics: []string{"orders"}, Handler: func(context.Context, *handoff.Message) error { return nil }}}}
			tc.mod(&cfg)
			_, err := newRuntime(cfg)
			if err == nil || err.Error() != tc.want || !errors.Is(err, ErrConfig) {
				t.Errorf("New: %v\nwant: %s", err, tc.want)
			}
		})
	}
}

// TestConnectHintsAtSecurity: a broker that closes the connections of a
// client without TLS or SASL is waited for (it may be a proxy in front of
// a broker not up yet), and the warning says what may be missing.
func TestConnectHintsAtSecurity(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  devbroker.Config
	}{
		{"TLS listener", devbroker.Config{TLS: newPKI(t).serverTLS(false)}},
		{"SASL listener", devbroker.Config{Users: []devbroker.User{{Mechanism: devbroker.PLAIN, Name: "alice", Password: "pw"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.Topics, tc.cfg.Partitions = []string{"orders"}, 1
			b, err := devbroker.Start(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Close)
			logs := &logBuffer{}
			rt, err := newRuntime(Config{
				Brokers: b.Addrs(), Group: "g", StatePath: filepath.Join(t.TempDir(), "state.db"), Logger: logs.logger(),
				Classes: []Class{{Name: "orders", Topics: []string{"orders"}, Handler: func(context.Context, *handoff.Message) error { return nil }}},
			})
			if err != nil {
				t.Fatal(err)
			}
			wait := start(t, rt, context.Background())
			waitFor(t, "the hint", func() bool { return strings.Contains(logs.String(), "hint=\"the broker closed the connection") })
			rt.Shutdown(context.Background())
			if _, err := wait(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
