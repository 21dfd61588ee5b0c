package devbroker_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"

	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/kafkasec"
)

// A broker that wants TLS and SCRAM-SHA-256, with a throwaway CA: a
// client with the CA and the password connects, one with a wrong
// password gets an error naming the broker, the mechanism and the user.
func ExampleStart_secured() {
	dir, err := os.MkdirTemp("", "devbroker-tls-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	files, err := devbroker.WriteTLSFiles(dir, []string{"127.0.0.1"}, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	broker, err := devbroker.Start(devbroker.Config{Topics: []string{"orders"}, TLS: files.Server,
		Users: []devbroker.User{{Mechanism: devbroker.SCRAMSHA256, Name: "alice", Password: "s3cret"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer broker.Close()

	clientTLS := &tls.Config{RootCAs: files.CA.Pool()}
	for _, password := range []string{"s3cret", "wrong"} {
		mech, err := kafkasec.Mechanism("scram-sha-256", "alice", password)
		if err != nil {
			fmt.Println(err)
			return
		}
		err = (&kafkasec.Dialer{TLS: clientTLS, SASL: mech}).Check(context.Background(), broker.Addrs())
		var ce *kafkasec.ConnectError
		switch {
		case err == nil:
			fmt.Println("connected")
		case errors.As(err, &ce):
			fmt.Printf("%s failed for user %q with %s: %s\n", ce.Step, ce.User, ce.Mechanism, ce.Reason)
		default:
			fmt.Println(err)
		}
	}
	// Output:
	// connected
	// SASL authentication failed for user "alice" with SCRAM-SHA-256: the broker rejected the user name or password
}
