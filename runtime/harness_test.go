package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/testio"
)

func TestMain(m *testing.M) {
	// Every test runs for kafka-go, then for franz-go (conform_test.go).
	goleak.VerifyTestMain(testio.BothClients(m),
		// kafka-go's package-level connection pool for the default
		// transport keeps an idle reaper per address.
		goleak.IgnoreAnyFunction("github.com/segmentio/kafka-go.(*connPool).discover"),
	)
}

// bundle is one test's embedded broker, state file and counters.
type bundle struct {
	t      *testing.T
	broker *devbroker.Broker
	topics map[string]int // topic -> partitions
	state  string
	group  string
	// protocol is the group protocol of config's Configs: the run's
	// (testio.Protocol), or the one setupProtocol was given.
	protocol GroupProtocol
	// transport, when set, returns the transport the test's own clients
	// reach a secured broker with; nil means plaintext.
	transport func() *kafka.Transport

	mu      sync.Mutex
	handled map[string]int // message ID -> times handled to success
	order   []string       // IDs in handling order
}

func setup(t *testing.T, partitions int, topics ...string) *bundle {
	t.Helper()
	b, err := devbroker.Start(devbroker.Config{Topics: topics, Partitions: partitions, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	tp := map[string]int{}
	for _, tt := range topics {
		tp[tt] = partitions
	}
	bd := &bundle{
		t: t, broker: b, topics: tp,
		state:    filepath.Join(t.TempDir(), "state.db"),
		group:    "g-" + t.Name(),
		handled:  map[string]int{},
		protocol: GroupProtocol(testio.Protocol()),
	}
	if bd.protocol == GroupProtocolConsumer {
		testio.ConsumerGroupTimers(t, b.Addrs())
	}
	return bd
}

// setupProtocol is setup for a test that runs once per group protocol
// (forEachProtocol): the bundle's configs join with protocol p, and
// under the consumer protocol the broker's session timeout and heartbeat
// interval are the tests' (testio.ConsumerGroupTimers).
func setupProtocol(t *testing.T, p GroupProtocol, partitions int, topics ...string) *bundle {
	t.Helper()
	b := setup(t, partitions, topics...)
	if p == GroupProtocolConsumer && b.protocol != p {
		testio.ConsumerGroupTimers(t, b.broker.Addrs())
	}
	b.protocol = p
	return b
}

// classicOnly skips a test of the classic protocol's join (JoinGroup,
// SyncGroup, a group in PreparingRebalance) when this run's group
// protocol is the consumer one (testio.ProtocolEnv): it has no such
// join. why says what the test checks.
func classicOnly(t *testing.T, why string) {
	t.Helper()
	if p := testio.Protocol(); p != testio.Classic {
		t.Skipf("classic group protocol only (this run's is %s): %s", p, why)
	}
}

// forEachProtocol runs test as a parallel subtest per group protocol of
// this run's client (testio.Protocols): classic and consumer (KIP-848)
// on franz-go, classic on kafka-go.
func forEachProtocol(t *testing.T, test func(t *testing.T, p GroupProtocol)) {
	for _, p := range testio.Protocols() {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			test(t, GroupProtocol(p))
		})
	}
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("HANDOFF_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// config returns a Config for the bundle with one class per topic, named
// after it.
func (b *bundle) config(h handoff.HandlerFunc, mod func(*Class)) Config {
	cfg := Config{
		Brokers:        b.broker.Addrs(),
		Group:          b.group,
		StatePath:      b.state,
		CommitInterval: 100 * time.Millisecond,
		SessionTimeout: 6 * time.Second,
		FetchMaxWait:   100 * time.Millisecond,
		Logger:         testLogger(b.t),
		Client:         testClient(),
		GroupProtocol:  b.protocol,
	}
	for topic := range b.topics {
		c := Class{Name: topic, Topics: []string{topic}, Handler: h, Workers: 4, QueueSize: 32}
		if mod != nil {
			mod(&c)
		}
		cfg.Classes = append(cfg.Classes, c)
	}
	return cfg
}

// record notes a successful handling of m.
func (b *bundle) record(m *handoff.Message) {
	b.mu.Lock()
	b.handled[m.ID]++
	b.order = append(b.order, m.ID)
	b.mu.Unlock()
}

func (b *bundle) counts() (unique, total int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.handled {
		unique++
		total += n
	}
	return unique, total
}

// writer returns a producer to the bundle's broker; close it with
// devbroker.CloseWriter.
func (b *bundle) writer() *kafka.Writer {
	if b.transport != nil {
		return devbroker.NewWriterWith(b.transport(), b.broker.Addrs())
	}
	return devbroker.NewWriter(b.broker.Addrs())
}

// produce writes n records to each topic, keys spread over 13 values.
func (b *bundle) produce(n int) int {
	b.t.Helper()
	w := b.writer()
	defer devbroker.CloseWriter(w)
	var msgs []kafka.Message
	for topic := range b.topics {
		for i := range n {
			msgs = append(msgs, kafka.Message{Topic: topic, Key: fmt.Appendf(nil, "key-%d", i%13), Value: fmt.Appendf(nil, "%s-%d", topic, i)})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		b.t.Fatal(err)
	}
	return len(msgs)
}

// produceValues writes one record per value to topic, all with key (so
// one partition, in this order), and returns how many.
func (b *bundle) produceValues(topic, key string, values ...string) int {
	b.t.Helper()
	w := b.writer()
	defer devbroker.CloseWriter(w)
	msgs := make([]kafka.Message, len(values))
	for i, v := range values {
		msgs[i] = kafka.Message{Topic: topic, Key: []byte(key), Value: []byte(v)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		b.t.Fatal(err)
	}
	return len(msgs)
}

// committed sums the group's committed offsets over all partitions: with
// topics that start empty it is the number of committed messages.
func (b *bundle) committed() int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o := devbroker.NewOffsets(b.broker.Addrs())
	if b.transport != nil {
		o = devbroker.NewOffsetsWith(b.transport(), b.broker.Addrs())
	}
	defer o.Close()
	off, err := o.Committed(ctx, b.group, b.topics)
	if err != nil {
		b.t.Fatal(err)
	}
	return devbroker.Sum(off)
}

// waitFor polls cond until it holds or 30s pass. Polling here waits on
// an outside system (the broker and the handlers), not on a timer. Call
// it from the test's (or benchmark's) own goroutine: it may Fatal.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // the poll interval, not a wait for an event
	}
}

// instance runs, in the background, another instance of the bundle's
// group named name, on a state file of its own, and returns it and the
// function that waits for its Run.
func (b *bundle) instance(name string, cfg Config) (*Runtime, func() (*Report, error)) {
	b.t.Helper()
	cfg.Instance = name
	cfg.StatePath = filepath.Join(b.t.TempDir(), name+".db")
	rt, err := newRuntime(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	return rt, start(b.t, rt, context.Background())
}

// start runs rt in the background and returns a function that waits for
// Run's result.
func start(t *testing.T, rt *Runtime, ctx context.Context) func() (*Report, error) {
	t.Helper()
	type res struct {
		rep *Report
		err error
	}
	ch := make(chan res, 1)
	go func() {
		rep, err := rt.Run(ctx)
		ch <- res{rep, err}
	}()
	return func() (*Report, error) {
		select {
		case r := <-ch:
			return r.rep, r.err
		case <-time.After(60 * time.Second):
			t.Fatal("Run did not return")
			return nil, nil
		}
	}
}

// stopUnderLoad runs a runtime on the bundle whose handlers block after
// the first 40 messages, stops it once every pool has its 4 workers
// blocked and its queue of 32 full, and returns the stop's report and a
// function that unblocks the handlers still blocked. mod adjusts each
// class.
func (b *bundle) stopUnderLoad(mod func(*Class)) (*Report, func()) {
	b.t.Helper()
	return b.stopUnderLoadWith(mod, nil)
}

// stopUnderLoadWith is stopUnderLoad with cfgMod, when set, adjusting the
// config.
func (b *bundle) stopUnderLoadWith(mod func(*Class), cfgMod func(*Config)) (*Report, func()) {
	b.t.Helper()
	release := make(chan struct{})
	var started atomic.Int64
	slow := func(ctx context.Context, m *handoff.Message) error {
		if started.Add(1) > 40 {
			select { // later messages wait for the stop
			case <-release:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		b.record(m)
		return nil
	}
	cfg := b.config(slow, mod)
	cfg.DrainTimeout = 50 * time.Millisecond
	cfg.HardStopGrace = 2 * time.Second
	if cfgMod != nil {
		cfgMod(&cfg)
	}
	rt, err := newRuntime(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait := start(b.t, rt, ctx)
	// Full, and every handler running is one that waits: a handler of
	// the first 40 still returning would let its worker start a queued
	// message after this look, one unstarted fewer at the stop (63 of
	// 64 once in about 15 CI runs).
	waitFor(b.t, "pools full", func() bool {
		running := int64(0)
		for _, c := range rt.classes.order {
			s := c.pool.Stats()
			if s.Running < 4 || s.Queued < 32 {
				return false
			}
			running += int64(s.Running)
		}
		return started.Load()-40 == running
	})
	cancel()
	rep, err := wait()
	if err != nil {
		b.t.Fatal(err)
	}
	return rep, func() { close(release) }
}

// runUntil runs a fresh runtime on the bundle until it has handled want
// messages, stops it and returns its report.
func (b *bundle) runUntil(want int64, mod func(*Class)) *Report {
	b.t.Helper()
	return b.runUntilWith(want, mod, nil)
}

// runUntilWith is runUntil with cfgMod, when set, adjusting the config.
func (b *bundle) runUntilWith(want int64, mod func(*Class), cfgMod func(*Config)) *Report {
	b.t.Helper()
	var n atomic.Int64
	all := make(chan struct{})
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		b.record(m)
		if n.Add(1) == want {
			close(all)
		}
		return nil
	}, mod)
	if cfgMod != nil {
		cfgMod(&cfg)
	}
	rt, err := newRuntime(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	wait := start(b.t, rt, context.Background())
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		b.t.Fatalf("run handled %d of %d", n.Load(), want)
	}
	rt.Shutdown(context.Background())
	rep, err := wait()
	if err != nil {
		b.t.Fatal(err)
	}
	return rep
}

// countLogs returns a logger for a test that counts the records logged
// with message msg.
func countLogs(t *testing.T, msg string) (*slog.Logger, *atomic.Int64) {
	n := new(atomic.Int64)
	return slog.New(logCounter{testLogger(t).Handler(), msg, n}), n
}

// logCounter is the handler of countLogs.
type logCounter struct {
	slog.Handler
	msg string
	n   *atomic.Int64
}

func (h logCounter) Enabled(context.Context, slog.Level) bool { return true }

func (h logCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h logCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return logCounter{h.Handler.WithAttrs(as), h.msg, h.n}
}

func (h logCounter) WithGroup(name string) slog.Handler {
	return logCounter{h.Handler.WithGroup(name), h.msg, h.n}
}

// startNew builds a runtime from cfg with newRuntime (failing the test
// on its error) and runs it in the background as start does.
func startNew(t *testing.T, cfg Config) (*Runtime, func() (*Report, error)) {
	t.Helper()
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rt, start(t, rt, context.Background())
}

// startWithCancel is startNew with a context the test cancels to stop
// Run; the test's cleanup cancels it too.
func startWithCancel(t *testing.T, cfg Config) (*Runtime, context.CancelFunc, func() (*Report, error)) {
	t.Helper()
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return rt, cancel, start(t, rt, ctx)
}

// waitClosed blocks until done is closed; after 30s it fails the test
// with what stuck returns (called only then).
func waitClosed(t *testing.T, done <-chan struct{}, stuck func() string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal(stuck())
	}
}

// stopAndWait shuts rt down, not checking Shutdown's error, and returns
// Run's report, failing the test on Run's error.
func stopAndWait(t *testing.T, rt *Runtime, wait func() (*Report, error)) *Report {
	t.Helper()
	rt.Shutdown(context.Background())
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// shutdownAndWait is stopAndWait failing the test on Shutdown's error
// too.
func shutdownAndWait(t *testing.T, rt *Runtime, wait func() (*Report, error)) *Report {
	t.Helper()
	if err := rt.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// timedStop is stopAndWait that also returns how long the stop took,
// from the Shutdown call to Run's return.
func timedStop(t *testing.T, rt *Runtime, wait func() (*Report, error)) (*Report, time.Duration) {
	t.Helper()
	begin := time.Now()
	rt.Shutdown(context.Background())
	rep, err := wait()
	took := time.Since(begin)
	if err != nil {
		t.Fatal(err)
	}
	return rep, took
}
