package main

import (
	"fmt"
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
	)
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run an embedded Kafka-protocol broker for local development until Ctrl-C",
		Long: `Broker runs a single-node, in-memory broker that speaks the Kafka wire
protocol (franz-go's kfake), so a service, kcat or any Kafka client can
talk to it. It creates --topics at start (topics are not created on first
use) and keeps nothing when it stops: for development and tests only.`,
		Args: noArgs,
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
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			b, err := devbroker.Start(devbroker.Config{Addr: addr, Topics: clean, Partitions: partitions})
			if err != nil {
				return err
			}
			defer b.Close()
			out := cmd.OutOrStdout()
			what := "no topics"
			if len(clean) > 0 {
				what = fmt.Sprintf("topics %s, %d partitions each", strings.Join(clean, ", "), partitions)
			}
			fmt.Fprintf(out, "broker listening on %s (%s); Ctrl-C to stop\n", strings.Join(b.Addrs(), ","), what)
			<-ctx.Done()
			b.Close()
			fmt.Fprintln(out, "broker stopped")
			return nil
		}),
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:9092", "listen address, host:port (port 0: any free port)")
	cmd.Flags().StringSliceVar(&topics, "topics", nil, "topics to create, comma-separated")
	cmd.Flags().IntVar(&partitions, "partitions", 4, "partitions per topic")
	return cmd
}
