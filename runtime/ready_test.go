package runtime

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestReadyUnreachableBroker: with nothing listening at the broker
// address the runtime recovers, but is never ready. Before, readiness
// was set right after the consumer group was made.
func TestReadyUnreachableBroker(t *testing.T) {
	t.Parallel()
	log, rec := recordLogs(t)
	rt, err := newRuntime(Config{Brokers: []string{closedAddr(t)}, Group: "g", StatePath: t.TempDir() + "/s.db", Logger: log,
		Classes: []Class{{Name: "c", Topics: []string{"t"}, Handler: func(context.Context, *handoff.Message) error { return nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "the start's wait for the brokers", func() bool {
		return rec.count("kafka brokers not reachable yet; waiting") > 0 || rec.count("recovery finished") > 0
	})
	// However long one looks: the brokers never answer. Look a while.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if rt.Ready() {
			t.Fatal("ready although no broker can be reached")
		}
	}
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
}

// TestReadyMissingTopic: one of a class's two topics does not exist. The
// class consumes the other, a warning names the missing one, and the
// runtime is not ready. Before, it was ready and said nothing.
func TestReadyMissingTopic(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "here")
	log, rec := recordLogs(t)
	handled := make(chan struct{}, 1)
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		select {
		case handled <- struct{}{}:
		default:
		}
		return nil
	}, func(c *Class) { c.Topics = append(c.Topics, "not-here") })
	cfg.Logger = log
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	b.produce(1)
	select {
	case <-handled:
	case <-time.After(30 * time.Second):
		t.Fatal("the existing topic's message was not handled")
	}
	if rt.Ready() {
		t.Error("ready although topic not-here does not exist")
	}
	named := slices.ContainsFunc(rec.records(slog.LevelWarn), func(r logRecord) bool {
		return r.attrs["topic"] == "not-here" && strings.Contains(r.msg, "does not exist")
	})
	if !named {
		t.Errorf("no warning names topic not-here; warnings: %v", rec.records(slog.LevelWarn))
	}
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
}

// TestNoTopicOfClass: none of a class's topics exists, so Run fails with
// a TopicError naming the class. Before, Run ran, consuming nothing.
func TestNoTopicOfClass(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "exists")
	cfg := b.config(func(context.Context, *handoff.Message) error { return nil }, nil)
	cfg.Classes = append(cfg.Classes, Class{Name: "ghost", Topics: []string{"gone-1", "gone-2"},
		Handler: func(context.Context, *handoff.Message) error { return nil }})
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	type res struct{ err error }
	ch := make(chan res, 1)
	go func() { _, err := rt.Run(context.Background()); ch <- res{err} }()
	select {
	case r := <-ch:
		var te *TopicError
		if !errors.As(r.err, &te) || te.Class != "ghost" || !errors.Is(r.err, ErrNoTopic) {
			t.Fatalf("Run = %v, want a TopicError for class ghost", r.err)
		}
		t.Log(r.err)
	case <-time.After(20 * time.Second):
		rt.Close()
		<-ch
		t.Fatal("Run kept running although none of class ghost's topics exists")
	}
}

// TestWaitForTopics: a class that waits for its topics holds the start
// (not ready) until the topic is created, then consumes it and is ready.
func TestWaitForTopics(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "first")
	log, rec := recordLogs(t)
	handled := make(chan string, 4)
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error { handled <- m.Origin.Topic; return nil }, nil)
	cfg.Logger = log
	cfg.Classes = append(cfg.Classes, Class{Name: "later", Topics: []string{"later"}, WaitForTopics: true,
		Handler: func(ctx context.Context, m *handoff.Message) error { handled <- m.Origin.Topic; return nil }})
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "the wait logged", func() bool { return rec.count("waiting for topics to exist; not ready") > 0 })
	if rt.Ready() {
		t.Fatal("ready while waiting for topic later")
	}
	cl := &kafka.Client{Addr: kafka.TCP(b.broker.Addrs()...), Transport: &kafka.Transport{}}
	defer cl.Transport.(*kafka.Transport).CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: "later", NumPartitions: 1, ReplicationFactor: 1}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ready", rt.Ready)
	b.topics["later"] = 1
	b.produce(1)
	got := map[string]bool{}
	for len(got) < 2 {
		select {
		case tp := <-handled:
			got[tp] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("handled topics %v, want first and later", got)
		}
	}
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
}

// TestReadinessRestores: readiness waits for the restores of the first
// generation's partitions, counted before the generation arrives, in
// either order of join and their ends, and later restores do not take it
// back.
func TestReadinessRestores(t *testing.T) {
	var rd readiness
	rd.beginRestore()
	rd.beginRestore()
	rd.join()
	if rd.settled.Load() {
		t.Fatal("settled with two restores running")
	}
	rd.restored()
	if rd.settled.Load() {
		t.Fatal("settled with one restore running")
	}
	rd.restored()
	if !rd.settled.Load() {
		t.Fatal("not settled once the first generation's restores ended")
	}
	rd.beginRestore() // a later rebalance
	if !rd.settled.Load() {
		t.Fatal("a later restore took the readiness back")
	}

	var fast readiness // the restores end before the generation is told
	fast.beginRestore()
	fast.restored()
	if fast.settled.Load() {
		t.Fatal("settled before the generation arrived")
	}
	fast.join()
	if !fast.settled.Load() {
		t.Fatal("not settled at the join with no restore running")
	}
}
