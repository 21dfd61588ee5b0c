package kafkasec

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/segmentio/kafka-go/sasl"
)

// PasswordEnv is the environment variable [Options.Load] reads the SASL
// password from when no password file is given.
const PasswordEnv = "KAFKA_SASL_PASSWORD"

// Options are the connection security settings as a command line gives
// them. The zero value is plaintext without SASL.
type Options struct {
	// CAFile is a PEM bundle of the CAs that sign the brokers'
	// certificates. It turns TLS on; empty means the system's roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and its key, PEM,
	// for mutual TLS. Both or neither; they turn TLS on.
	CertFile, KeyFile string
	// TLS turns TLS on with the system's roots (or CAFile's).
	TLS bool
	// Mechanism is the SASL mechanism: plain, scram-sha-256 or
	// scram-sha-512. Empty means no SASL.
	Mechanism string
	// Username is the SASL user. Required with Mechanism.
	Username string
	// PasswordFile holds the SASL password (one trailing newline is
	// dropped). Empty means the environment variable PasswordEnv.
	PasswordFile string
	// LookupEnv reads the environment. Nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
}

// AddFlags registers the options on fs as -tls-ca, -tls-cert, -tls-key,
// -tls, -sasl-mechanism, -sasl-username and -sasl-password-file. (A
// cobra command adds them with Flags().AddGoFlagSet.)
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.CAFile, "tls-ca", o.CAFile, "PEM CA bundle to verify the Kafka brokers' certificates; turns TLS on")
	fs.StringVar(&o.CertFile, "tls-cert", o.CertFile, "PEM client certificate for mutual TLS (with -tls-key); turns TLS on")
	fs.StringVar(&o.KeyFile, "tls-key", o.KeyFile, "PEM key of the client certificate (with -tls-cert); turns TLS on")
	fs.BoolVar(&o.TLS, "tls", o.TLS, "connect to the Kafka brokers with TLS, verified with the system's roots")
	fs.StringVar(&o.Mechanism, "sasl-mechanism", o.Mechanism, "SASL mechanism: plain, scram-sha-256 or scram-sha-512 (none when empty)")
	fs.StringVar(&o.Username, "sasl-username", o.Username, "SASL user name")
	fs.StringVar(&o.PasswordFile, "sasl-password-file", o.PasswordFile, "file holding the SASL password (else $"+PasswordEnv+")")
}

// TLSOn reports whether the options ask for TLS.
func (o *Options) TLSOn() bool {
	return o.TLS || o.CAFile != "" || o.CertFile != "" || o.KeyFile != ""
}

// Load reads the files the options name and returns the TLS
// configuration (nil for plaintext) and the SASL mechanism (nil for
// none). Every problem is reported at once, naming the flag and the file;
// the password is never part of an error.
func (o *Options) Load() (*tls.Config, sasl.Mechanism, error) {
	var errs []error
	cfg, err := o.tlsConfig()
	if err != nil {
		errs = append(errs, err)
	}
	mech, err := o.mechanism()
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return cfg, mech, nil
}

func (o *Options) tlsConfig() (*tls.Config, error) {
	if !o.TLSOn() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	var errs []error
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("kafkasec: -tls-ca: %w", err))
		default:
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("kafkasec: -tls-ca %s: no PEM certificate in it", o.CAFile))
			}
			cfg.RootCAs = pool
		}
	}
	switch {
	case o.CertFile != "" && o.KeyFile == "":
		errs = append(errs, fmt.Errorf("kafkasec: -tls-cert %s needs -tls-key", o.CertFile))
	case o.CertFile == "" && o.KeyFile != "":
		errs = append(errs, fmt.Errorf("kafkasec: -tls-key %s needs -tls-cert", o.KeyFile))
	case o.CertFile != "":
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("kafkasec: -tls-cert %s, -tls-key %s: %w", o.CertFile, o.KeyFile, err))
		} else {
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	return cfg, errors.Join(errs...)
}

func (o *Options) mechanism() (sasl.Mechanism, error) {
	if o.Mechanism == "" {
		if o.Username != "" || o.PasswordFile != "" {
			return nil, errors.New("kafkasec: -sasl-username and -sasl-password-file need -sasl-mechanism")
		}
		return nil, nil
	}
	if o.Username == "" {
		return nil, fmt.Errorf("kafkasec: -sasl-mechanism %s needs -sasl-username", o.Mechanism)
	}
	var password string
	if o.PasswordFile != "" {
		b, err := os.ReadFile(o.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("kafkasec: -sasl-password-file: %w", err)
		}
		password = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if password == "" {
			return nil, fmt.Errorf("kafkasec: -sasl-password-file %s is empty", o.PasswordFile)
		}
	} else {
		lookup := o.LookupEnv
		if lookup == nil {
			lookup = os.LookupEnv
		}
		p, ok := lookup(PasswordEnv)
		if !ok || p == "" {
			return nil, fmt.Errorf("kafkasec: -sasl-mechanism %s: no password: give -sasl-password-file or set $%s", o.Mechanism, PasswordEnv)
		}
		password = p
	}
	return Mechanism(o.Mechanism, o.Username, password)
}
