package main

import (
	"flag"

	"github.com/handoff-go/handoff/kafkasec"
)

// secFlags returns o's flags (--tls-ca, --tls-cert, --tls-key, --tls,
// --sasl-mechanism, --sasl-username, --sasl-password-file) for a cobra
// command's AddGoFlagSet.
func secFlags(o *kafkasec.Options) *flag.FlagSet {
	fs := flag.NewFlagSet("kafka security", flag.ContinueOnError)
	o.AddFlags(fs)
	return fs
}
