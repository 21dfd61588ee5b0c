package kafkasec_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/kafkasec"
)

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOptionsLoad(t *testing.T) {
	dir := t.TempDir()
	ca, err := devbroker.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(devbroker.Leaf{Client: true})
	if err != nil {
		t.Fatal(err)
	}
	caFile := writeFile(t, dir, "ca.pem", ca.PEM)
	cert, key, err := client.WriteFiles(dir, "client")
	if err != nil {
		t.Fatal(err)
	}
	pwFile := writeFile(t, dir, "pw", []byte("s3cret-file\n"))
	noEnv := func(string) (string, bool) { return "", false }

	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var o kafkasec.Options
	o.AddFlags(fs)
	if err := fs.Parse([]string{"-tls-ca", caFile, "-tls-cert", cert, "-tls-key", key,
		"-sasl-mechanism", "scram-sha-512", "-sasl-username", "alice", "-sasl-password-file", pwFile}); err != nil {
		t.Fatal(err)
	}
	o.LookupEnv = noEnv
	tc, mech, err := o.Load()
	if err != nil {
		t.Fatal(err)
	}
	if tc == nil || tc.RootCAs == nil || len(tc.Certificates) != 1 {
		t.Errorf("TLS config %+v: want RootCAs and one certificate", tc)
	}
	if mech.Name() != "SCRAM-SHA-512" || kafkasec.Username(mech) != "alice" {
		t.Errorf("mechanism %s as %q", mech.Name(), kafkasec.Username(mech))
	}

	env := kafkasec.Options{Mechanism: "PLAIN", Username: "bob", LookupEnv: func(k string) (string, bool) {
		return "s3cret-env", k == kafkasec.PasswordEnv
	}}
	tc, mech, err = env.Load()
	if err != nil || tc != nil || mech.Name() != "PLAIN" || kafkasec.Username(mech) != "bob" {
		t.Errorf("env password: %v, %v, %v", tc, mech, err)
	}
	if tc, _, err := (&kafkasec.Options{TLS: true}).Load(); err != nil || tc == nil || tc.RootCAs != nil {
		t.Errorf("-tls: %v, %v; want a config with the system roots", tc, err)
	}

	bad := []struct {
		o    kafkasec.Options
		want string
	}{
		{kafkasec.Options{Mechanism: "plain", Username: "bob", LookupEnv: noEnv},
			"kafkasec: -sasl-mechanism plain: no password: give -sasl-password-file or set $KAFKA_SASL_PASSWORD"},
		{kafkasec.Options{Mechanism: "plain", LookupEnv: noEnv}, "kafkasec: -sasl-mechanism plain needs -sasl-username"},
		{kafkasec.Options{Username: "bob"}, "kafkasec: -sasl-username and -sasl-password-file need -sasl-mechanism"},
		{kafkasec.Options{Mechanism: "gssapi", Username: "bob", PasswordFile: pwFile},
			`kafkasec: unknown SASL mechanism "gssapi": want one of plain, scram-sha-256, scram-sha-512`},
		{kafkasec.Options{CertFile: cert}, "kafkasec: -tls-cert " + cert + " needs -tls-key"},
		{kafkasec.Options{CAFile: pwFile}, "kafkasec: -tls-ca " + pwFile + ": no PEM certificate in it"},
		{kafkasec.Options{Mechanism: "plain", Username: "bob", PasswordFile: writeFile(t, dir, "empty", []byte("\n"))},
			"kafkasec: -sasl-password-file " + filepath.Join(dir, "empty") + " is empty"},
	}
	for _, b := range bad {
		_, _, err := b.o.Load()
		if err == nil || err.Error() != b.want {
			t.Errorf("Load(%+v): %v\nwant: %s", b.o, err, b.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the password is in the error: %v", err)
		}
	}
}

func TestUsername(t *testing.T) {
	for _, name := range []string{"plain", "scram-sha-256", "scram-sha-512"} {
		m, err := kafkasec.Mechanism(name, "a,b=c", "pw")
		if err != nil {
			t.Fatal(err)
		}
		if got := kafkasec.Username(m); got != "a,b=c" {
			t.Errorf("%s: Username = %q", name, got)
		}
	}
}

// Options turn a service's command line into the runtime's TLS and SASL
// settings.
func ExampleOptions() {
	var o kafkasec.Options
	fs := flag.NewFlagSet("service", flag.ExitOnError)
	o.AddFlags(fs)
	_ = fs.Parse([]string{"-tls", "-sasl-mechanism", "scram-sha-256", "-sasl-username", "orders-svc"})
	o.LookupEnv = func(string) (string, bool) { return "from $KAFKA_SASL_PASSWORD", true } // os.LookupEnv when nil
	tlsConfig, mech, err := o.Load()
	if err != nil {
		fmt.Println(err)
		return
	}
	// cfg := runtime.Config{TLS: tlsConfig, SASL: mech, ...}
	fmt.Println(tlsConfig != nil, mech.Name(), kafkasec.Username(mech))
	// Output: true SCRAM-SHA-256 orders-svc
}
