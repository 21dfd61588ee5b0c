// Command rental is handoff's reference service: a rental platform's
// Kafka consumer with three message classes, each in its own pool.
//
//   - orders: order status changes, ordered per order key;
//   - users: user messages;
//   - heartbeats: device heartbeats, many and cheap: a batch class.
//
// With no flags it runs a self-contained demo on an embedded broker: it
// produces a burst, stops the service mid-load, restarts it as a new pod
// on an empty state directory (the saved messages come back from the
// state changelog) and shows that nothing was lost. With -brokers it is a real service that runs
// until SIGTERM or SIGINT (a second signal skips the rest of the drain).
//
// Service flags:
//
//	-brokers host:port[,host:port]  external Kafka; service mode starts when given
//	-group NAME                     consumer group (default rental)
//	-state PATH                     bbolt state file (default rental.db)
//	-local-state-only               keep state in the state file only, no changelog topic: the state
//	                                directory must survive restarts (default false: the changelog is on)
//	-drain-timeout DURATION         bounded drain at stop (default 30s)
//	-isolation LEVEL                read_committed (default: no record of an aborted or open transaction)
//	                                or read_uncommitted (every record)
//	-work DURATION                  simulated work per message, per batch for heartbeats (default 0)
//	-work-jitter DURATION           each message's work drawn uniformly from [work-D, work+D], clamped at 0 (default 0)
//	-effects PATH                   append "<topic> <partition> <offset> <key>" per handled message
//	-fail-rate FRACTION             fraction of handler attempts that fail recoverably (default 0)
//	-admin ADDR                     serve the admin endpoints and dashboard on ADDR (no host: 127.0.0.1); off by default
//	-admin-token TOKEN              token for the admin endpoints that requeue or discard; none means read-only
//	-admin-token-file FILE          the admin token from FILE instead (else the environment variable HANDOFF_ADMIN_TOKEN)
//	-admin-read-token-file FILE     token the endpoints that show messages require (else HANDOFF_ADMIN_READ_TOKEN); none means open
//	-probes ADDR                    serve /livez, /healthz, /readyz and /metrics alone on ADDR (no host: 127.0.0.1); off by default
//	-rename-class OLD=NEW           give class OLD's saved messages to class NEW; repeatable
//	-tls-ca FILE                    PEM CA bundle to verify the brokers; turns TLS on
//	-tls-cert FILE, -tls-key FILE   client certificate and key, for mutual TLS; turn TLS on
//	-tls                            TLS with the system's roots
//	-sasl-mechanism NAME            plain, scram-sha-256 or scram-sha-512
//	-sasl-username NAME             SASL user
//	-sasl-password-file FILE        SASL password (else the environment variable KAFKA_SASL_PASSWORD)
//	-outage CLASS:START:DURATION    from START after the start, for DURATION, every attempt of CLASS fails recoverably
//	                                (a simulated database outage; repeatable)
//	-stop-policy snapshot|redeliver what the stop does with unfinished Kafka messages: save them (snapshot, the
//	                                default) or leave them to the partition's next owner (redeliver)
//	-client franz-go|kafka-go       Kafka client library (default franz-go: cooperative rebalancing, and static
//	                                membership with -instance)
//	-rate-limit CLASS=N[,CLASS=N]   start at most N messages a second of CLASS (runtime.Class.RateLimit), across
//	                                its workers; its fetch alone waits meanwhile (default: no limit)
//	-share CLASS[,CLASS]            run those classes on Kafka share groups, <group>.<class> (Kafka 4.2+,
//	                                franz-go): each record goes to one instance whatever the partition count;
//	                                the class retries in place only; orders (ordered) cannot
//	-instance NAME                  this instance's name, stable across restarts and unique in the group (a
//	                                StatefulSet pod's name); with franz-go the static group.instance.id; empty
//	                                means the hostname
//	-group-protocol classic|consumer
//	                                consumer group protocol (default classic); consumer is KIP-848's, the broker
//	                                assigning: franz-go only, Kafka 4.0+ brokers with it enabled
//
// Topics: the service consumes orders, users and heartbeats, which must
// exist (a missing one is a start failure). Unless -local-state-only is
// set, each has a compacted state changelog, <group>.orders.handoff-changelog
// and so on, with as many partitions as its input topic; the service
// creates a missing one at start where the ACLs allow (topic create and
// describe-configs), else the start fails naming the topic to create.
// The group's dead letters stay in the state (list them with -admin or
// `handoff dead list`); rental publishes none to a dead-letter topic.
//
// Exit status: 0 after a clean stop; 1 when the stop could not save or
// commit safely; 2 for bad flags or a start failure (the service started
// nothing: the state file is locked by another process, corrupt,
// unwritable or of another group, no topic of a class exists, or the
// brokers refused the connection), logged as "start failed" with the
// error on one line, and no report. A TLS handshake or SASL authentication the brokers refuse is a
// start failure: one line on stderr names the broker, the mechanism and
// the user (never the password), within seconds.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/segmentio/kafka-go/sasl"

	"github.com/handoff-go/handoff/admin"
	"github.com/handoff-go/handoff/internal/rental"
	"github.com/handoff-go/handoff/kafkasec"
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
	localOnly := fs.Bool("local-state-only", false, "keep state in the state file only, no changelog topic: the state directory must survive restarts")
	drain := fs.Duration("drain-timeout", 30*time.Second, "how long the stop drains the pools")
	work := fs.Duration("work", 0, "simulated work per message")
	workJitter := fs.Duration("work-jitter", 0, "spread of the simulated work: each message's is drawn uniformly from [work-D, work+D], clamped at 0")
	effects := fs.String("effects", "", "append one line \"<topic> <partition> <offset> <key>\" per handled message")
	failRate := fs.Float64("fail-rate", 0, "fraction of handler attempts that fail recoverably (retried, then dead-lettered)")
	adminAddr := fs.String("admin", "", "serve the admin endpoints and dashboard on `ADDR` (host:port; no host means 127.0.0.1); off when empty")
	adminToken := fs.String("admin-token", "", "`TOKEN` the admin endpoints that requeue or discard dead letters require; none means they are disabled")
	var sec kafkasec.Options
	sec.AddFlags(fs)
	var outages outageFlag
	fs.Var(&outages, "outage", "from START after the service started (`CLASS:START:DURATION`), for DURATION, every handler attempt of CLASS fails recoverably (a simulated database outage, e.g. orders:5s:20s); repeatable")
	var stopPolicy stopPolicyFlag
	fs.Var(&stopPolicy, "stop-policy", "what the stop does with unfinished Kafka messages: snapshot (save them) or redeliver (leave them to the partition's next owner)")
	var isolation isolationFlag
	fs.Var(&isolation, "isolation", "which records of transactional producers are handled: `read_committed` (the default: committed transactions' only, once committed) or read_uncommitted (every record)")
	var client clientFlag
	fs.Var(&client, "client", "Kafka client library: `franz-go` (the default: static membership with -instance, cooperative rebalancing) or kafka-go")
	var rateLimits rateLimitFlag
	fs.Var(&rateLimits, "rate-limit", "start at most N messages a second of each class named (`CLASS=N[,CLASS=N]`, e.g. orders=50,users=20), across its workers; the class's own fetch waits meanwhile, no other's; none when not given")
	var share shareFlag
	fs.Var(&share, "share", "run the classes named (`CLASS[,CLASS]`, e.g. heartbeats,users) on Kafka share groups <group>.<class> (Kafka 4.2+, franz-go): each record goes to one instance whatever the partition count; a shared class retries in place only; orders, ordered, cannot")
	var ops opsFlags
	ops.add(fs)
	var groupProtocol groupProtocolFlag
	fs.Var(&groupProtocol, "group-protocol", "consumer group protocol: `classic` (the default: the members assign) or consumer (KIP-848: the broker assigns; -client franz-go and Kafka 4.0+ brokers with it enabled)")
	instance := fs.String("instance", "", "this instance's `NAME`, stable across restarts and unique in the group (the state file records it; with -client franz-go it is the static group.instance.id); empty means the hostname")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "rental: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *brokers == "" {
		if *adminAddr != "" {
			fmt.Fprintln(os.Stderr, "rental: -admin needs service mode (-brokers)")
			return 2
		}
		if ops.probes != "" {
			fmt.Fprintln(os.Stderr, "rental: -probes needs service mode (-brokers)")
			return 2
		}
		if len(rateLimits) > 0 {
			fmt.Fprintln(os.Stderr, "rental: -rate-limit needs service mode (-brokers)")
			return 2
		}
		if len(share) > 0 {
			fmt.Fprintln(os.Stderr, "rental: -share needs service mode (-brokers)")
			return 2
		}
		if sec.TLSOn() || sec.Mechanism != "" {
			fmt.Fprintln(os.Stderr, "rental: -tls-* and -sasl-* need service mode (-brokers)")
			return 2
		}
		return rental.Demo(os.Stdout)
	}
	tlsConfig, mech, err := sec.Load()
	if err != nil {
		fmt.Fprintf(os.Stderr, "rental: %v\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 2
	}
	token, readToken, err := ops.tokens(*adminToken, os.LookupEnv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rental: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	return serve(log, serviceConfig{
		brokers: strings.Split(*brokers, ","), group: *group, state: *state, localOnly: *localOnly,
		drain: *drain, work: *work, workJitter: *workJitter, effects: *effects, failRate: *failRate,
		admin: *adminAddr, adminToken: token, adminReadToken: readToken, probes: ops.probes, renames: ops.renames,
		stopPolicy: stopPolicy.p, outages: outages, rateLimits: rateLimits, share: share,
		tls: tlsConfig, sasl: mech,
		client: client.c, instance: *instance, isolation: isolation.l,
		groupProtocol: groupProtocol.p,
	})
}

type serviceConfig struct {
	brokers []string
	group   string
	state   string
	// localOnly keeps the state in the state file alone: no changelog
	// topic (runtime.Config.LocalStateOnly).
	localOnly  bool
	drain      time.Duration
	work       time.Duration
	workJitter time.Duration
	effects    string
	failRate   float64
	// admin is the admin server's address; empty means none.
	admin          string
	adminToken     string
	adminReadToken string // "" means reading needs no token
	// probes is the probe listener's address; empty means none.
	probes string
	// renames maps old class names to the classes now handling them.
	renames map[string]string

	stopPolicy runtime.StopPolicy
	outages    []rental.Outage
	// rateLimits is each limited class's messages a second.
	rateLimits rateLimitFlag
	// share names the classes run on share groups.
	share shareFlag

	// tls and sasl secure the connections to the brokers; nil means
	// plaintext, no SASL.
	tls  *tls.Config
	sasl sasl.Mechanism

	client   runtime.Client // "" means franz-go
	instance string         // "" means the hostname
	// isolation is runtime.Config.IsolationLevel; zero is read_committed.
	isolation runtime.IsolationLevel
	// groupProtocol is runtime.Config.GroupProtocol; "" means classic.
	groupProtocol runtime.GroupProtocol
}

// serve runs the service until a signal and prints the stop report as
// one JSON line on stdout; after a start failure, only the error.
func serve(log *slog.Logger, sc serviceConfig) int {
	h, err := rental.New(rental.Options{Work: sc.work, WorkJitter: sc.workJitter, EffectsPath: sc.effects, FailRate: sc.failRate,
		Outages: sc.outages})
	if err != nil {
		log.Error("bad options", "err", err)
		return 2
	}
	defer h.Close()
	defer logOutages(log, h, sc.outages)()
	classes, err := withRateLimits(withStopPolicy(h.Classes(), sc.stopPolicy), sc.rateLimits)
	if err == nil {
		classes, err = withShare(classes, sc.group, sc.share)
	}
	if err != nil {
		log.Error("bad options", "err", err)
		return 2
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rt, err := runtime.New(runtime.Config{
		Brokers:        sc.brokers,
		Group:          sc.group,
		StatePath:      sc.state,
		LocalStateOnly: sc.localOnly,
		DrainTimeout:   sc.drain,
		Classes:        classes,
		Logger:         log,
		Registerer:     reg,
		TLS:            sc.tls,
		SASL:           sc.sasl,
		Client:         sc.client,
		Instance:       sc.instance,
		ClassRenames:   sc.renames,
		IsolationLevel: sc.isolation,
		GroupProtocol:  sc.groupProtocol,
	})
	if err != nil {
		log.Error("bad configuration", "err", err)
		return 2
	}
	stopAdmin, stopProbes := func() {}, func() {}
	if sc.admin != "" {
		if stopAdmin, err = serveAdmin(log, rt, reg, sc); err != nil {
			log.Error("admin server not started", "err", err)
			return 2
		}
	}
	if sc.probes != "" {
		if stopProbes, err = serveProbes(log, rt, reg, sc.probes); err != nil {
			stopAdmin()
			log.Error("probe server not started", "err", err)
			return 2
		}
	}
	stop := runtime.HandleSignals(rt)
	defer stop()
	rep, err := rt.Run(context.Background())
	// They served through the stop; Run has returned. Both shut down at
	// once: each may take admin.ShutdownTimeout.
	var down sync.WaitGroup
	down.Go(stopAdmin)
	down.Go(stopProbes)
	down.Wait()
	if rep != nil && !errors.Is(err, runtime.ErrStart) {
		// A failed start ran nothing to report: its error is printed
		// below, once.
		line, _ := json.Marshal(rep)
		fmt.Printf("report %s\n", line)
	}
	if ce, ok := errors.AsType[*kafkasec.ConnectError](err); ok {
		// A start failure: the brokers refused the TLS handshake or
		// the authentication.
		fmt.Fprintf(os.Stderr, "rental: %v\n", ce)
		return 2
	}
	if errors.Is(err, runtime.ErrStart) {
		// The state file is locked, corrupt or another group's, a class
		// has no topic, or the recovery failed: nothing was fetched.
		log.Error("start failed", "err", err)
		return 2
	}
	if err != nil {
		log.Error("stop was not clean", "err", err)
		return 1
	}
	return 0
}

// serveAdmin starts the admin server on sc.admin and returns the function
// that shuts it down and waits for it.
func serveAdmin(log *slog.Logger, rt *runtime.Runtime, reg *prometheus.Registry, sc serviceConfig) (func(), error) {
	h, err := admin.NewHandler(rt, admin.Options{Token: sc.adminToken, ReadToken: sc.adminReadToken, Gatherer: reg, Logger: log})
	if err != nil {
		return nil, err
	}
	ln, err := admin.Listen(sc.admin)
	if err != nil {
		return nil, err
	}
	log.Info("admin server listening", "addr", ln.Addr().String(), "token", sc.adminToken != "", "read_token", sc.adminReadToken != "")
	return serveOn(log, ln, h), nil
}

// serveProbes starts the probe server (probes and metrics only) on addr
// and returns the function that shuts it down and waits for it.
func serveProbes(log *slog.Logger, rt *runtime.Runtime, reg *prometheus.Registry, addr string) (func(), error) {
	h, err := admin.NewProbeHandler(rt, admin.Options{Gatherer: reg, Logger: log})
	if err != nil {
		return nil, err
	}
	ln, err := admin.Listen(addr)
	if err != nil {
		return nil, err
	}
	log.Info("probe server listening", "addr", ln.Addr().String())
	return serveOn(log, ln, h), nil
}

// serveOn serves h on ln in the background and returns the function that
// shuts it down and waits for it.
func serveOn(log *slog.Logger, ln net.Listener, h http.Handler) func() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := admin.Serve(ctx, ln, h); err != nil {
			log.Warn("admin server stopped with an error", "addr", ln.Addr().String(), "err", err)
		}
	})
	return func() { cancel(); wg.Wait() }
}
