package kafkasec

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Mechanisms are the SASL mechanism names [Mechanism] knows, as the
// command line spells them.
var mechanisms = []string{"plain", "scram-sha-256", "scram-sha-512"}

// Mechanism returns kafka-go's SASL mechanism called name (plain,
// scram-sha-256 or scram-sha-512, in any case) for user and password.
// Both must be non-empty.
func Mechanism(name, user, password string) (sasl.Mechanism, error) {
	if user == "" {
		return nil, fmt.Errorf("kafkasec: SASL %s: empty user name", name)
	}
	if password == "" {
		return nil, fmt.Errorf("kafkasec: SASL %s as user %q: empty password", name, user)
	}
	switch strings.ToLower(name) {
	case "plain":
		return plain.Mechanism{Username: user, Password: password}, nil
	case "scram-sha-256", "scram-sha-512":
		algo := scram.SHA256
		if strings.HasSuffix(strings.ToLower(name), "512") {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, user, password)
		if err != nil {
			return nil, fmt.Errorf("kafkasec: SASL %s as user %q: %w", name, user, err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("kafkasec: unknown SASL mechanism %q: want one of %s", name, strings.Join(mechanisms, ", "))
}

// CheckMechanism reports what can be told wrong about m without
// connecting: no name; for kafka-go's PLAIN an empty user name or
// password, for its SCRAM an empty user name. Other mechanisms pass
// when they have a name.
func CheckMechanism(m sasl.Mechanism) error {
	if m.Name() == "" {
		return errors.New("kafkasec: SASL mechanism has no name")
	}
	var password string
	switch m := m.(type) {
	case plain.Mechanism:
		password = m.Password
	case *plain.Mechanism:
		password = m.Password
	default:
		if !isKafkaGoSCRAM(m) {
			return nil
		}
		password = "-"
	}
	if Username(m) == "" {
		return fmt.Errorf("kafkasec: SASL %s has an empty user name", m.Name())
	}
	if password == "" {
		return fmt.Errorf("kafkasec: SASL %s as user %q has an empty password", m.Name(), Username(m))
	}
	return nil
}

// Username returns the user m authenticates as, or "" when it cannot
// tell: the Username method of a mechanism that has one, the Username
// field of kafka-go's PLAIN mechanism, and the user of kafka-go's SCRAM
// mechanism (read from its first message, which it builds without I/O).
// It never returns the password.
func Username(m sasl.Mechanism) string {
	switch m := m.(type) {
	case nil:
		return ""
	case interface{ Username() string }:
		return m.Username()
	case plain.Mechanism:
		return m.Username
	case *plain.Mechanism:
		return m.Username
	}
	if !isKafkaGoSCRAM(m) {
		return ""
	}
	_, first, err := m.Start(context.Background())
	if err != nil {
		return ""
	}
	return scramUser(string(first))
}

// isKafkaGoSCRAM says whether m is the mechanism of kafka-go's
// sasl/scram package, whose Start does no I/O.
func isKafkaGoSCRAM(m sasl.Mechanism) bool {
	t := reflect.TypeOf(m)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath() == "github.com/segmentio/kafka-go/sasl/scram"
}

// scramUser returns the user of a SCRAM client-first message,
// "n,,n=user,r=nonce" (RFC 5802), unescaped.
func scramUser(first string) string {
	for _, attr := range strings.Split(first, ",") {
		if u, ok := strings.CutPrefix(attr, "n="); ok {
			return strings.NewReplacer("=2C", ",", "=3D", "=").Replace(u)
		}
	}
	return ""
}
