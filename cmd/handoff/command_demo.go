package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/handoff-go/handoff/internal/rental"
)

func newDemoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run the rental demo: stop a service mid-load, restart it, count every message",
		Long: `Demo runs the rental reference service on an embedded broker: it produces
12,000 messages over three topics, stops the service mid-load with a drain
too short to finish, restarts it as a new pod on an empty state directory
(what the stop saved comes back from the state changelog) and prints what
happened to every message. It exits 0 only if nothing was lost.`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if code := rental.Demo(cmd.OutOrStdout()); code != 0 {
				return &exitError{code: code, err: fmt.Errorf("demo failed (exit status %d)", code)}
			}
			return nil
		}),
	}
}
