package devbroker

import (
	"context"
	"crypto/tls"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestSecureOwnConnection: on a broker with TLS and SASL users, the
// broker's own connection (the session expiry's) gets through without a
// certificate and authenticated as its internal user, while a client
// that does not authenticate is refused, and a handshake for a mechanism
// no user has is answered UNSUPPORTED_SASL_MECHANISM with the enabled ones.
func TestSecureOwnConnection(t *testing.T) {
	t.Parallel()
	files, err := WriteTLSFiles(t.TempDir(), []string{"127.0.0.1"}, true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Start(Config{Topics: []string{"t"}, Partitions: 1, TLS: files.Server,
		Users: []User{{Mechanism: SCRAMSHA256, Name: "alice", Password: "pw-1"}, {Mechanism: PLAIN, Name: "bob", Password: "pw-2"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	own, err := b.wire(ctx, "own")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if _, err := own.request(ctx, kmsg.NewPtrMetadataRequest()); err != nil {
		t.Fatalf("the broker's own connection: %v", err)
	}

	// A client with the right certificate that skips SASL is refused.
	pool := files.CA.Pool()
	cert, err := tls.LoadX509KeyPair(files.ClientCert, files.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", b.Addr(), &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	w := &wireConn{conn: conn, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("anon"))}
	defer w.Close()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version = 1
	hs.Mechanism = SCRAMSHA512
	kresp, err := w.request(ctx, hs)
	if err != nil {
		t.Fatal(err)
	}
	resp := kresp.(*kmsg.SASLHandshakeResponse)
	if resp.ErrorCode != kerr.UnsupportedSaslMechanism.Code || len(resp.SupportedMechanisms) != 2 ||
		resp.SupportedMechanisms[0] != SCRAMSHA256 || resp.SupportedMechanisms[1] != PLAIN {
		t.Errorf("handshake for %s: error %d, mechanisms %v", SCRAMSHA512, resp.ErrorCode, resp.SupportedMechanisms)
	}
	if _, err := w.request(ctx, kmsg.NewPtrMetadataRequest()); err == nil {
		t.Error("an unauthenticated Metadata request was answered")
	}
}

// TestStartSecured: the files StartSecured writes let a client through
// the mutual TLS and authenticate as its user, and the password file
// holds the password.
func TestStartSecured(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := StartSecured(dir, Config{Topics: []string{"t"}, Partitions: 1}, "carol", "pw-3")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if b, err := os.ReadFile(s.PasswordFile); err != nil || string(b) != "pw-3\n" {
		t.Errorf("password file %s: %q, %v", s.PasswordFile, b, err)
	}
	tc, _, err := s.ClientOptions().Load()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := tls.Dial("tcp", s.Addr(), tc)
	if err != nil {
		t.Fatal(err)
	}
	w := &wireConn{conn: conn, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("carol"))}
	defer w.Close()
	if err := w.authenticate(ctx, User{Mechanism: SCRAMSHA512, Name: "carol", Password: "pw-3"}); err != nil {
		t.Fatalf("authenticate as carol: %v", err)
	}
	if _, err := w.request(ctx, kmsg.NewPtrMetadataRequest()); err != nil {
		t.Fatalf("metadata after authenticating: %v", err)
	}
}
