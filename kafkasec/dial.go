package kafkasec

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// DefaultDialTimeout bounds one dial with its handshakes when
// Dialer.Timeout is zero.
const DefaultDialTimeout = 10 * time.Second

// Dialer opens connections to brokers with TLS and SASL done. Its
// DialContext fits kafka-go's kafka.Dialer.DialFunc and
// kafka.Transport.Dial (leave their own TLS and SASLMechanism nil): every
// connection a kafka-go reader, consumer group, client or writer opens
// then goes through it, and so is reported alike. The zero value dials
// plaintext without SASL.
type Dialer struct {
	// TLS, if set, wraps every connection in TLS with this configuration.
	// An empty ServerName means the host of the address dialled. Nil
	// means plaintext.
	TLS *tls.Config
	// SASL, if set, authenticates every connection with this mechanism.
	// Nil means no SASL.
	SASL sasl.Mechanism
	// ClientID is the client ID sent with the requests the dial makes.
	// Empty means kafka-go's default.
	ClientID string
	// Timeout bounds one dial with its TLS and SASL handshakes. Zero
	// means DefaultDialTimeout.
	Timeout time.Duration
	// NetDial opens the TCP connection. Nil means a net.Dialer's.
	NetDial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// DialContext connects to addr, does the TLS handshake, authenticates
// with SASL and reads the broker's API versions, and returns the
// connection ready for Kafka requests. It blocks until then, ctx ends or
// Timeout passes. A failure that retrying cannot fix is a
// [*ConnectError]; any other error (refused, unreachable, timed out) may
// pass once the broker is up.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout())
	defer cancel()
	dial := d.NetDial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	raw, err := dial(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("kafka broker %s: dial: %w", addr, err)
	}
	nc := raw
	if d.TLS != nil {
		cfg := d.TLS
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, d.fail(addr, StepTLSHandshake, err)
		}
		nc = tc
	}
	if err := d.handshake(ctx, network, addr, nc); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// timeout is Timeout, or DefaultDialTimeout when it is zero.
func (d *Dialer) timeout() time.Duration {
	if d.Timeout <= 0 {
		return DefaultDialTimeout
	}
	return d.Timeout
}

// bindDeadline makes nc's reads and writes fail once ctx ends or its
// deadline passes; the function it returns undoes that.
func bindDeadline(ctx context.Context, nc net.Conn) (unbind func()) {
	deadline, _ := ctx.Deadline()
	_ = nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		_ = nc.SetDeadline(time.Time{})
	}
}

// handshake authenticates nc with SASL, if set, and reads the broker's
// API versions, through a kafka-go connection on nc that is then
// dropped (it holds no goroutine). A TLS 1.3 broker that wants a client
// certificate says so only now, on the first read.
func (d *Dialer) handshake(ctx context.Context, network, addr string, nc net.Conn) error {
	defer bindDeadline(ctx, nc)()
	kd := &kafka.Dialer{
		ClientID: d.ClientID,
		DialFunc: func(context.Context, string, string) (net.Conn, error) { return nc, nil },
	}
	if d.SASL != nil {
		kd.SASLMechanism = &checked{m: d.SASL}
	}
	kc, err := kd.DialContext(ctx, network, addr)
	if err == nil && d.SASL == nil {
		_, err = kc.ApiVersions()
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("kafka broker %s: %w (%w)", addr, context.Cause(ctx), err)
	}
	return d.fail(addr, StepSASLAuthentication, err)
}

// fail returns a *ConnectError for err when retrying cannot fix it, and
// err with the broker named otherwise.
func (d *Dialer) fail(addr, step string, err error) error {
	reason, fatal := classify(err)
	if !fatal {
		return fmt.Errorf("kafka broker %s: %s: %w", addr, step, err)
	}
	if isTLS(err) {
		step = StepTLSHandshake
	} else if ke, ok := errors.AsType[kafka.Error](err); ok && ke == kafka.UnsupportedSASLMechanism {
		step = StepSASLHandshake
	}
	e := &ConnectError{Broker: addr, TLS: d.TLS != nil, Step: step, Reason: reason, Err: err}
	if d.SASL != nil {
		e.Mechanism = d.SASL.Name()
		e.User = Username(d.SASL)
	}
	return e
}

// Check dials each of brokers in turn until one connection succeeds and
// answers a Metadata request (which a broker refuses on a connection that
// did not authenticate when it wants SASL), closes it and returns nil. It
// returns at once the first [*ConnectError]; when every broker failed
// otherwise, it returns their errors joined.
func (d *Dialer) Check(ctx context.Context, brokers []string) error {
	var errs []error
	for _, b := range brokers {
		err := d.check(ctx, b)
		if err == nil {
			return nil
		}
		if _, ok := errors.AsType[*ConnectError](err); ok {
			return err
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// check dials addr and asks for its metadata.
func (d *Dialer) check(ctx context.Context, addr string) error {
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, d.timeout())
	defer cancel()
	defer bindDeadline(ctx, nc)()
	if _, err := kafka.NewConnWith(nc, kafka.ConnConfig{ClientID: d.ClientID}).Brokers(); err != nil {
		return fmt.Errorf("kafka broker %s: metadata: %w", addr, err)
	}
	return nil
}

// checked is a SASL mechanism whose own errors are marked as such, so
// that they are told apart from the connection's.
type checked struct{ m sasl.Mechanism }

func (c *checked) Name() string { return c.m.Name() }

func (c *checked) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	sm, ir, err := c.m.Start(ctx)
	if err != nil {
		return nil, nil, &mechanismError{err}
	}
	return &checkedSession{sm}, ir, nil
}

type checkedSession struct{ sm sasl.StateMachine }

func (s *checkedSession) Next(ctx context.Context, challenge []byte) (bool, []byte, error) {
	done, resp, err := s.sm.Next(ctx, challenge)
	if err != nil {
		return done, resp, &mechanismError{err}
	}
	return done, resp, nil
}
