// Command rental is handoff's reference service: a rental platform's
// Kafka consumer with three message classes, each in its own pool.
//
//   - orders: order status changes, ordered per order key;
//   - users: user messages;
//   - heartbeats: device heartbeats, many and cheap.
//
// With no flags it runs a self-contained demo on an embedded broker: it
// produces a burst, stops the service mid-load, restarts it and shows
// that nothing was lost. With -brokers it is a real service that runs
// until SIGTERM or SIGINT (a second signal skips the rest of the drain).
//
// Service flags:
//
//	-brokers host:port[,host:port]  external Kafka; service mode starts when given
//	-group NAME                     consumer group (default rental)
//	-state PATH                     bbolt state file (default rental.db)
//	-drain-timeout DURATION         bounded drain at stop (default 30s)
//	-work DURATION                  simulated work per message (default 0)
//	-effects PATH                   append "<topic> <partition> <offset> <key>" per handled message
//	-fail-rate FRACTION             fraction of handler attempts that fail recoverably (default 0)
//
// Exit status: 0 after a clean stop; 1 when the stop could not save or
// commit safely; 2 for bad flags or a start failure.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/handoff-go/handoff/examples/rental/rental"
	"github.com/handoff-go/handoff/runtime"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("rental", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "external Kafka brokers, host:port[,host:port]; service mode starts when given")
	group := fs.String("group", "rental", "consumer group")
	state := fs.String("state", "rental.db", "bbolt state file")
	drain := fs.Duration("drain-timeout", 30*time.Second, "how long the stop drains the pools")
	work := fs.Duration("work", 0, "simulated work per message")
	effects := fs.String("effects", "", "append one line \"<topic> <partition> <offset> <key>\" per handled message")
	failRate := fs.Float64("fail-rate", 0, "fraction of handler attempts that fail recoverably (retried, then dead-lettered)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "rental: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *brokers == "" {
		return rental.Demo(os.Stdout)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	return serve(log, serviceConfig{
		brokers: strings.Split(*brokers, ","), group: *group, state: *state,
		drain: *drain, work: *work, effects: *effects, failRate: *failRate,
	})
}

type serviceConfig struct {
	brokers  []string
	group    string
	state    string
	drain    time.Duration
	work     time.Duration
	effects  string
	failRate float64
}

// serve runs the service until a signal and prints the stop report as
// one JSON line on stdout.
func serve(log *slog.Logger, sc serviceConfig) int {
	h, err := rental.New(rental.Options{Work: sc.work, EffectsPath: sc.effects, FailRate: sc.failRate})
	if err != nil {
		log.Error("bad options", "err", err)
		return 2
	}
	defer h.Close()
	rt, err := runtime.New(runtime.Config{
		Brokers:      sc.brokers,
		Group:        sc.group,
		StatePath:    sc.state,
		DrainTimeout: sc.drain,
		Classes:      h.Classes(),
		Logger:       log,
	})
	if err != nil {
		log.Error("bad configuration", "err", err)
		return 2
	}
	stop := runtime.HandleSignals(rt)
	defer stop()
	rep, err := rt.Run(context.Background())
	if rep != nil {
		line, _ := json.Marshal(rep)
		fmt.Printf("report %s\n", line)
	}
	if err != nil {
		log.Error("stop was not clean", "err", err)
		return 1
	}
	return 0
}
