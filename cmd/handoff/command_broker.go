package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/devbroker"
)

func newBrokerCmd() *cobra.Command {
	var (
		addr       string
		topics     []string
		partitions int
		tlsOn      bool
		tlsDir     string
		clientAuth bool
		users      []string
	)
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run an embedded Kafka-protocol broker for local development until Ctrl-C",
		Long:  brokerLong,
		Args:  noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if partitions <= 0 {
				return usagef("--partitions must be > 0, got %d", partitions)
			}
			var clean []string
			for _, t := range topics {
				if t = strings.TrimSpace(t); t != "" {
					clean = append(clean, t)
				}
			}
			cfg := devbroker.Config{Addr: addr, Topics: clean, Partitions: partitions}
			for _, u := range users {
				user, err := parseUser(u)
				if err != nil {
					return err
				}
				cfg.Users = append(cfg.Users, user)
			}
			if (tlsDir != "" || clientAuth) && !tlsOn {
				return usagef("--tls-dir and --tls-client-auth need --tls")
			}
			var files *devbroker.TLSFiles
			if tlsOn {
				var err error
				if files, err = brokerTLS(addr, tlsDir, clientAuth); err != nil {
					return err
				}
				cfg.TLS = files.Server
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			b, err := devbroker.Start(cfg)
			if err != nil {
				return err
			}
			defer b.Close()
			out := cmd.OutOrStdout()
			printBrokerStarted(out, b.Addrs(), &cfg, files, clientAuth)
			<-ctx.Done()
			b.Close()
			fmt.Fprintln(out, "broker stopped")
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "addr", "127.0.0.1:9092", "listen address, host:port (port 0: any free port)")
	fl.StringSliceVar(&topics, "topics", nil, "topics to create, comma-separated")
	fl.IntVar(&partitions, "partitions", 4, "partitions per topic")
	fl.BoolVar(&tlsOn, "tls", false, "serve TLS only, with a throwaway CA and certificates written to --tls-dir")
	fl.StringVar(&tlsDir, "tls-dir", "", "folder for the CA and certificates of --tls (a new temporary folder when empty)")
	fl.BoolVar(&clientAuth, "tls-client-auth", false, "with --tls, require a client certificate signed by the CA (mutual TLS)")
	fl.StringArrayVar(&users, "sasl-user", nil, "MECHANISM:NAME:PASSWORD: a SASL user (plain, scram-sha-256, scram-sha-512); repeatable")
	return cmd
}

// brokerTLS writes a throwaway CA, a server certificate for the host of
// addr, localhost and 127.0.0.1, and a client certificate to dir (a new
// temporary folder when empty), and returns the files.
func brokerTLS(addr, dir string, clientAuth bool) (*devbroker.TLSFiles, error) {
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "handoff-broker-tls-"); err != nil {
			return nil, err
		}
	}
	hosts := []string{"localhost", "127.0.0.1"}
	if h, _, err := net.SplitHostPort(addr); err == nil && h != "" && h != "localhost" && h != "127.0.0.1" {
		hosts = append(hosts, h)
	}
	return devbroker.WriteTLSFiles(dir, hosts, clientAuth)
}

// printBrokerStarted prints where the broker started with cfg listens
// (addrs), its topics, how to connect with TLS when files is not nil
// (clientAuth: with a client certificate) and its SASL users.
func printBrokerStarted(out io.Writer, addrs []string, cfg *devbroker.Config, files *devbroker.TLSFiles, clientAuth bool) {
	what := "no topics"
	if len(cfg.Topics) > 0 {
		what = fmt.Sprintf("topics %s, %d partitions each", strings.Join(cfg.Topics, ", "), cfg.Partitions)
	}
	fmt.Fprintf(out, "broker listening on %s (%s); Ctrl-C to stop\n", strings.Join(addrs, ","), what)
	if files != nil {
		mode := "TLS"
		connect := "--tls-ca " + files.CAFile
		if clientAuth {
			mode = "mutual TLS"
			connect += " --tls-cert " + files.ClientCert + " --tls-key " + files.ClientKey
		}
		fmt.Fprintf(out, "%s: CA and certificates in %s (ca.pem, server.pem, server-key.pem, client.pem, client-key.pem); connect with %s\n",
			mode, files.Dir, connect)
	}
	if len(cfg.Users) > 0 {
		var parts []string
		for _, u := range cfg.Users {
			parts = append(parts, fmt.Sprintf("%s (%s)", u.Name, u.Mechanism))
		}
		fmt.Fprintf(out, "SASL users: %s\n", strings.Join(parts, ", "))
	}
}

// brokerLong is the long help of 'broker'.
const brokerLong = `Broker runs a single-node, in-memory broker that speaks the Kafka wire
protocol (franz-go's kfake), so a service, kcat or any Kafka client can
talk to it. It creates --topics at start (topics are not created on first
use) and keeps nothing when it stops: for development and tests only.

With --tls it serves TLS only, with a throwaway CA and a server
certificate for the listen host, localhost and 127.0.0.1, written with a
client certificate to --tls-dir (a new temporary folder when empty) as
ca.pem, server.pem, server-key.pem, client.pem and client-key.pem; it
prints the folder. --tls-client-auth also requires a client certificate
signed by that CA (mutual TLS).

With --sasl-user MECHANISM:NAME:PASSWORD (repeatable; plain,
scram-sha-256 or scram-sha-512) clients must authenticate as one of the
users; only the mechanisms of the users are enabled. The passwords are
for a local broker: they are not printed.`

// parseUser parses --sasl-user's MECHANISM:NAME:PASSWORD.
func parseUser(s string) (devbroker.User, error) {
	mech, rest, ok1 := strings.Cut(s, ":")
	name, password, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || name == "" || password == "" {
		return devbroker.User{}, usagef("--sasl-user %s:...: want MECHANISM:NAME:PASSWORD", mech)
	}
	switch strings.ToLower(mech) {
	case "plain":
		mech = devbroker.PLAIN
	case "scram-sha-256":
		mech = devbroker.SCRAMSHA256
	case "scram-sha-512":
		mech = devbroker.SCRAMSHA512
	default:
		return devbroker.User{}, usagef("--sasl-user: unknown mechanism %q: want plain, scram-sha-256 or scram-sha-512", mech)
	}
	return devbroker.User{Mechanism: mech, Name: name, Password: password}, nil
}
