package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/handoff-go/handoff/kafkasec"
)

// closedHint is logged with a broker that closed the connection it had
// accepted: what a listener that wants TLS or SASL does with a client
// that does not use them.
const closedHint = "the broker closed the connection: if its listener wants TLS or SASL, configure them (Config.TLS, Config.SASL)"

// Backoff of the start's wait for brokers that are not up yet.
const (
	connectBackoffMin = time.Second
	connectBackoffMax = 30 * time.Second
)

// connSteps are the values of handoff_kafka_auth_errors_total's step
// label, in the order of connection.authErrs.
var connSteps = [...]string{"tls_handshake", "sasl_handshake", "sasl_authentication"}

// connection is how the runtime reaches the brokers: every connection
// it opens (consumer group, partition readers, commits, dead-letter
// writer) goes through dial when TLS or SASL is configured, so that a
// failure retrying cannot fix is logged and counted wherever it happens.
// It also makes the start's check of the brokers (checkBrokers).
type connection struct {
	brokers []string
	log     *slog.Logger
	sec     *kafkasec.Dialer
	// secure is whether TLS or SASL is configured; without either, the
	// client dials by itself, as it always did.
	secure bool

	// authErrs counts the *kafkasec.ConnectError of the dials, by step
	// (connSteps).
	authErrs [len(connSteps)]atomic.Int64
	// A run of such failures is logged once per authLogEvery, with how
	// many there were since the last line.
	logMu    sync.Mutex
	lastLog  time.Time
	sinceLog int
}

// authLogEvery is how often a run of failed connections is logged.
const authLogEvery = 10 * time.Second

// newConnection returns the connection of cfg's brokers, TLS and SASL,
// logging to log.
func newConnection(cfg *Config, log *slog.Logger) *connection {
	c := &connection{brokers: cfg.Brokers, log: log,
		sec:    &kafkasec.Dialer{TLS: cfg.TLS, SASL: cfg.SASL, ClientID: cfg.ClientID},
		secure: cfg.TLS != nil || cfg.SASL != nil}
	return c
}

// dial is the Dial of every connection of a secured runtime.
func (c *connection) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	nc, err := c.sec.DialContext(ctx, network, addr)
	if ce, ok := errors.AsType[*kafkasec.ConnectError](err); ok {
		c.failed(ce)
	}
	return nc, err
}

// clientDial is the client's Dial (kclient.Config): dial when TLS or SASL
// is configured, nil (the client dials by itself) otherwise.
func (c *connection) clientDial() func(context.Context, string, string) (net.Conn, error) {
	if c.secure {
		return c.dial
	}
	return nil
}

// failed counts a connection failure that retrying cannot fix and logs
// it, once per authLogEvery for a run of them.
func (c *connection) failed(err *kafkasec.ConnectError) {
	c.authErrs[stepIndex(err.Step)].Add(1)
	c.logMu.Lock()
	c.sinceLog++
	now := time.Now()
	if !c.lastLog.IsZero() && now.Sub(c.lastLog) < authLogEvery {
		c.logMu.Unlock()
		return
	}
	n := c.sinceLog
	c.sinceLog, c.lastLog = 0, now
	c.logMu.Unlock()
	c.log.Error("kafka connection failed in a way retrying cannot fix; kafka-go keeps retrying, fix the credentials or certificates",
		"broker", err.Broker, "mechanism", err.Mechanism, "user", err.User, "step", err.Step, "repeats", n, "err", err)
}

// refused counts err when it is a failure that retrying cannot fix (a
// *kafkasec.ConnectError) and returns it as Run's error; nil otherwise.
// The start's checks use it; dial counts through failed, which logs too.
func (c *connection) refused(err error) error {
	ce, ok := errors.AsType[*kafkasec.ConnectError](err)
	if !ok {
		return nil
	}
	c.authErrs[stepIndex(ce.Step)].Add(1)
	return fmt.Errorf("runtime: %w", err)
}

func stepIndex(step string) int {
	switch step {
	case kafkasec.StepTLSHandshake:
		return 0
	case kafkasec.StepSASLHandshake:
		return 1
	}
	return 2
}

// baseDial is what a wrapping dial (the dead-letter writer's) calls.
func (c *connection) baseDial() func(context.Context, string, string) (net.Conn, error) {
	if c.secure {
		return c.dial
	}
	return (&net.Dialer{}).DialContext
}

// checkBrokers is the start's check of the brokers, before the recovery
// and the join: when consuming (topics to consume) it is connect; when
// only publishing (a DeadLetterTopic) it is one attempt whose failure to
// reach the brokers is only logged (publishing is best effort), while a
// refused TLS handshake or SASL authentication still ends the start.
func (c *connection) checkBrokers(ctx context.Context, consuming, publishing bool) error {
	switch {
	case consuming:
		return c.connect(ctx)
	case publishing:
		err := c.sec.Check(ctx, c.brokers)
		if refused := c.refused(err); refused != nil {
			return refused
		}
		if err != nil && ctx.Err() == nil {
			c.log.Warn("kafka brokers not reachable; dead letters are published once they are", "brokers", strings.Join(c.brokers, ","), "err", err)
		}
	}
	return nil
}

// connect is the start's check that the brokers can be reached and
// authenticated to, before the group is joined. A failure that retrying
// cannot fix (TLS handshake, SASL mechanism or credentials; see
// [kafkasec.ConnectError]) is returned at once. Brokers that cannot be
// reached are waited for, with one log line per attempt and a backoff
// from 1s to 30s between attempts, until they answer or ctx ends; then
// connect returns nil (the caller sees ctx's end).
func (c *connection) connect(ctx context.Context) error {
	backoff := connectBackoffMin
	started := time.Now()
	for attempt := 1; ; attempt++ {
		err := c.sec.Check(ctx, c.brokers)
		if err == nil {
			if attempt > 1 {
				c.log.Info("kafka brokers reachable", "attempts", attempt, "waited", time.Since(started).Round(time.Millisecond))
			}
			return nil
		}
		if refused := c.refused(err); refused != nil {
			return refused
		}
		if ctx.Err() != nil {
			return nil
		}
		attrs := []any{"brokers", strings.Join(c.brokers, ","), "attempt", attempt, "retry_in", backoff, "err", err}
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			attrs = append(attrs, "hint", closedHint)
		}
		c.log.Warn("kafka brokers not reachable yet; waiting", attrs...)
		if !sleep(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, connectBackoffMax)
	}
}
