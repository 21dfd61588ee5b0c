package devbroker

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/handoff-go/handoff/kafkasec"
)

// Secured is a broker that wants mutual TLS and SASL SCRAM-SHA-512 from
// one user, with the files a client needs to reach it: for tests that run
// a real client (a binary, the CLI) against a secured cluster.
type Secured struct {
	*Broker
	// Files are the CA and the certificates; a client trusts
	// Files.CAFile and presents Files.ClientCert and Files.ClientKey.
	Files *TLSFiles
	// User is the broker's one SASL user (mechanism SCRAMSHA512).
	User User
	// PasswordFile holds User.Password and a newline (mode 0600): what a
	// password-file flag reads.
	PasswordFile string
}

// StartSecured writes a CA, a server certificate for 127.0.0.1 and a
// client certificate to dir (created if missing; see [WriteTLSFiles]),
// writes password to dir/password, and starts a broker with cfg, mutual
// TLS and the SCRAM-SHA-512 user name. It replaces cfg.TLS and cfg.Users.
// The caller closes the broker.
func StartSecured(dir string, cfg Config, name, password string) (*Secured, error) {
	files, err := WriteTLSFiles(dir, []string{"127.0.0.1"}, true)
	if err != nil {
		return nil, err
	}
	s := &Secured{Files: files, User: User{Mechanism: SCRAMSHA512, Name: name, Password: password},
		PasswordFile: filepath.Join(dir, "password")}
	if err := os.WriteFile(s.PasswordFile, []byte(password+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("devbroker: %w", err)
	}
	cfg.TLS, cfg.Users = files.Server, []User{s.User}
	if s.Broker, err = Start(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// ClientOptions are the options of a client of s: it trusts the CA,
// presents the client certificate and authenticates as User with
// SCRAM-SHA-512, the password read from PasswordFile.
func (s *Secured) ClientOptions() *kafkasec.Options {
	return &kafkasec.Options{CAFile: s.Files.CAFile, CertFile: s.Files.ClientCert, KeyFile: s.Files.ClientKey,
		Mechanism: "scram-sha-512", Username: s.User.Name, PasswordFile: s.PasswordFile}
}
