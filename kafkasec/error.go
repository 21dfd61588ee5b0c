package kafkasec

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/segmentio/kafka-go"
)

// ConnectError is a connection to a broker that failed in a way retrying
// cannot fix: the TLS handshake failed on a certificate or was refused by
// the broker, or the SASL authentication was refused. It names the
// broker, the mechanism and the user; it never holds the password.
type ConnectError struct {
	// Broker is the address dialled, host:port.
	Broker string
	// TLS says whether the connection used TLS.
	TLS bool
	// Mechanism is the SASL mechanism's name; empty without SASL.
	Mechanism string
	// User is the SASL user name; empty without SASL or when the
	// mechanism does not tell (see [Username]).
	User string
	// Step is what failed: StepTLSHandshake, StepSASLHandshake or
	// StepSASLAuthentication.
	Step string
	// Reason says in words what went wrong and what to check.
	Reason string
	// Err is the error of the TLS or Kafka client.
	Err error
}

// The steps of a connection a [ConnectError] names.
const (
	StepTLSHandshake       = "TLS handshake"
	StepSASLHandshake      = "SASL handshake"
	StepSASLAuthentication = "SASL authentication"
)

func (e *ConnectError) Error() string {
	return fmt.Sprintf("kafka broker %s (%s): %s failed: %s: %v", e.Broker, e.describe(), e.Step, e.Reason, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// describe says how the connection was made: "TLS, SASL PLAIN, user
// "alice"", "plaintext, no SASL".
func (e *ConnectError) describe() string {
	var b strings.Builder
	if e.TLS {
		b.WriteString("TLS")
	} else {
		b.WriteString("plaintext")
	}
	if e.Mechanism == "" {
		b.WriteString(", no SASL")
		return b.String()
	}
	b.WriteString(", SASL ")
	b.WriteString(e.Mechanism)
	if e.User != "" {
		fmt.Fprintf(&b, ", user %q", e.User)
	}
	return b.String()
}

// mechanismError is an error of the SASL mechanism itself (not of the
// connection): a SCRAM server signature that does not verify, a signer
// without credentials.
type mechanismError struct{ err error }

func (e *mechanismError) Error() string { return e.err.Error() }
func (e *mechanismError) Unwrap() error { return e.err }

// isTLS says whether err is the TLS layer's: a certificate that did not
// verify, an alert from the broker, a broker that does not speak TLS.
func isTLS(err error) bool {
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	op, ok := errors.AsType[*net.OpError](err)
	return ok && op.Op == "remote error"
}

// classify says whether err, met at step of a connection, is one that
// retrying cannot fix, and why.
func classify(err error) (reason string, fatal bool) {
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return "the broker's certificate is not signed by a CA this client trusts (check the CA bundle)", true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return "the broker's certificate is not valid for the name this client connects to (check the broker address, the certificate's names or tls.Config.ServerName)", true
	}
	if ce, ok := errors.AsType[x509.CertificateInvalidError](err); ok {
		if ce.Reason == x509.Expired {
			return "the broker's certificate has expired or is not valid yet", true
		}
		return "the broker's certificate is not valid", true
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return "the broker's certificate did not verify", true
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return "the broker did not answer in TLS (is this a plaintext listener?)", true
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "remote error" {
		// A TLS alert from the broker; crypto/tls does not export the
		// alert's type, only its text.
		if op.Err != nil && op.Err.Error() == "tls: certificate required" {
			return "the broker requires a client certificate and none was sent (set the client certificate and key)", true
		}
		return "the broker refused the TLS handshake (check the client certificate and TLS settings)", true
	}
	if _, ok := errors.AsType[*mechanismError](err); ok {
		return "the SASL mechanism failed", true
	}
	if ke, ok := errors.AsType[kafka.Error](err); ok {
		switch ke {
		case kafka.SASLAuthenticationFailed:
			return "the broker rejected the user name or password", true
		case kafka.UnsupportedSASLMechanism:
			return "the broker does not enable this SASL mechanism", true
		case kafka.IllegalSASLState:
			return "the broker did not expect this SASL exchange", true
		}
	}
	return "", false
}
