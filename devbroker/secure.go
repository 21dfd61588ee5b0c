package devbroker

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff/kafkasec"
)

// SASL mechanism names, as Kafka spells them.
const (
	PLAIN       = "PLAIN"
	SCRAMSHA256 = "SCRAM-SHA-256"
	SCRAMSHA512 = "SCRAM-SHA-512"
)

// User is a SASL user of the broker.
type User struct {
	// Mechanism is PLAIN, SCRAMSHA256 or SCRAMSHA512.
	Mechanism string
	Name      string
	Password  string
}

// internalUser is the user the broker's own connection (the session
// expiry's LeaveGroup) authenticates as.
const internalUser = "devbroker-internal"

// security is how a secured broker's listener and its own connection
// work: external connections get TLS (when configured) and SASL; the
// broker's own connection comes through an in-memory pipe handed to the
// listener, so it needs no certificate, and authenticates as
// internalUser.
type security struct {
	tls        *tls.Config
	mechanisms []string // enabled, in the order of Config.Users
	internal   User

	mu    sync.Mutex
	first *secureListener // the first listener, where wire connects
}

// newSecurity checks cfg's TLS and users and returns the kfake options
// that apply them; nil when the broker is plaintext without SASL.
func newSecurity(cfg Config) (*security, []kfake.Opt, error) {
	if cfg.TLS == nil && len(cfg.Users) == 0 {
		return nil, nil, nil
	}
	s := &security{tls: cfg.TLS}
	var opts []kfake.Opt
	for i, u := range cfg.Users {
		switch u.Mechanism {
		case PLAIN, SCRAMSHA256, SCRAMSHA512:
		default:
			return nil, nil, fmt.Errorf("devbroker: user %d (%q): unknown SASL mechanism %q: want %s, %s or %s", i, u.Name, u.Mechanism, PLAIN, SCRAMSHA256, SCRAMSHA512)
		}
		if u.Name == "" || u.Password == "" {
			return nil, nil, fmt.Errorf("devbroker: user %d: name and password are required", i)
		}
		if u.Name == internalUser {
			return nil, nil, fmt.Errorf("devbroker: user name %q is the broker's own", internalUser)
		}
		if !slices.Contains(s.mechanisms, u.Mechanism) {
			s.mechanisms = append(s.mechanisms, u.Mechanism)
		}
		opts = append(opts, kfake.Superuser(u.Mechanism, u.Name, u.Password))
	}
	if len(cfg.Users) > 0 {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		s.internal = User{Mechanism: s.mechanisms[0], Name: internalUser, Password: hex.EncodeToString(b)}
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser(s.internal.Mechanism, s.internal.Name, s.internal.Password))
	}
	return s, opts, nil
}

// listen is the kfake ListenFn of a secured broker.
func (s *security) listen(ln net.Listener) net.Listener {
	sl := &secureListener{Listener: ln, tls: s.tls, conns: make(chan net.Conn), done: make(chan struct{})}
	go sl.acceptLoop()
	s.mu.Lock()
	if s.first == nil {
		s.first = sl
	}
	s.mu.Unlock()
	return sl
}

// install makes the broker refuse, as Kafka does, the SASL handshake of a
// mechanism no user has: kfake accepts the three it knows and fails the
// authentication later, by closing the connection.
func (s *security) install(c *kfake.Cluster) {
	if len(s.mechanisms) == 0 {
		return
	}
	c.ControlKey(int16(kmsg.SASLHandshake), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.SASLHandshakeRequest)
		if slices.Contains(s.mechanisms, req.Mechanism) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		resp.SupportedMechanisms = slices.Clone(s.mechanisms)
		return resp, nil, true
	})
}

// wire opens the broker's own connection: through an in-memory pipe to
// the first listener, authenticated as the internal user.
func (s *security) wire(ctx context.Context, clientID string) (*wireConn, error) {
	s.mu.Lock()
	sl := s.first
	s.mu.Unlock()
	if sl == nil {
		return nil, errors.New("devbroker: no listener")
	}
	client, server := net.Pipe()
	select {
	case sl.conns <- server:
	case <-sl.done:
		client.Close()
		server.Close()
		return nil, net.ErrClosed
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
	w := &wireConn{conn: client, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID(clientID))}
	if s.internal.Name == "" {
		return w, nil
	}
	if err := w.authenticate(ctx, s.internal); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// authenticate runs the SASL handshake and authentication of u on w.
func (w *wireConn) authenticate(ctx context.Context, u User) error {
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version = 1
	hs.Mechanism = u.Mechanism
	kresp, err := w.request(ctx, hs)
	if err != nil {
		return err
	}
	if code := kresp.(*kmsg.SASLHandshakeResponse).ErrorCode; code != 0 {
		return fmt.Errorf("devbroker: own SASL handshake: %w", kerr.ErrorForCode(code))
	}
	mech, err := kafkasec.Mechanism(u.Mechanism, u.Name, u.Password)
	if err != nil {
		return err
	}
	sess, msg, err := mech.Start(ctx)
	if err != nil {
		return err
	}
	for done := false; !done; {
		req := kmsg.NewPtrSASLAuthenticateRequest()
		req.Version = 1
		req.SASLAuthBytes = msg
		kresp, err := w.request(ctx, req)
		if err != nil {
			return fmt.Errorf("devbroker: own SASL authentication: %w", err)
		}
		resp := kresp.(*kmsg.SASLAuthenticateResponse)
		if resp.ErrorCode != 0 {
			return fmt.Errorf("devbroker: own SASL authentication: %w", kerr.ErrorForCode(resp.ErrorCode))
		}
		if done, msg, err = sess.Next(ctx, resp.SASLAuthBytes); err != nil {
			return fmt.Errorf("devbroker: own SASL authentication: %w", err)
		}
	}
	return nil
}

// secureListener hands kfake the TCP connections of its listener, in TLS
// when configured, and the broker's own in-memory ones.
type secureListener struct {
	net.Listener
	tls   *tls.Config
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *secureListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.once.Do(func() { close(l.done) })
			return
		}
		if l.tls != nil {
			c = tls.Server(c, l.tls)
		}
		select {
		case l.conns <- c:
		case <-l.done:
			c.Close()
			return
		}
	}
}

func (l *secureListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *secureListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.done) })
	return err
}
