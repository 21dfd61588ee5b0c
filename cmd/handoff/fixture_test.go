package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/testio"
	"github.com/handoff-go/handoff/runtime"
	"github.com/handoff-go/handoff/snapshot"
)

// The fixture is the state file of a stopped service, made by the real
// runtime: two Kafka classes whose "poison" messages fail permanently
// (dead letters) and whose other messages block until the stop (pending:
// interrupted and unstarted), and a Submit-only class whose messages have
// no origin topic. It is built once; each test copies it.
const (
	fixPartitions = 2
	fixPoison     = 6 // poison messages per topic
	fixNormal     = 20
	fixLocal      = 3 // submitted messages of class "local"
)

var fixTopics = []string{"orders", "users"}

var fixture struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// stateFile returns a fresh copy of the fixture's state file.
func stateFile(t *testing.T) string {
	t.Helper()
	fixture.once.Do(func() {
		fixture.dir, fixture.err = os.MkdirTemp("", "handoff-cli-fixture-")
		if fixture.err == nil {
			fixture.path = filepath.Join(fixture.dir, "state.db")
			fixture.err = buildFixture(fixture.path)
		}
	})
	if fixture.err != nil {
		t.Fatalf("build the fixture state file: %v", fixture.err)
	}
	return copyFile(t, fixture.path)
}

// fixHeaders are the headers of the fixture's i-th message of topic.
func fixHeaders(topic string, i int) []kafka.Header {
	return []kafka.Header{
		{Key: "trace-id", Value: fmt.Appendf(nil, "%s-%d", topic, i)},
		{Key: "bin", Value: []byte{0, 1, 0xfe, 0xff}},
	}
}

func buildFixture(path string) (err error) {
	b, err := devbroker.Start(devbroker.Config{Topics: fixTopics, Partitions: fixPartitions})
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	produce := func(poison bool, n int) error {
		w := devbroker.NewWriter(b.Addrs())
		defer devbroker.CloseWriter(w)
		var msgs []kafka.Message
		for _, topic := range fixTopics {
			for i := range n {
				v := fmt.Sprintf("%s-%d", topic, i)
				if poison {
					v = "poison-" + v
				}
				msgs = append(msgs, kafka.Message{Topic: topic, Key: fmt.Appendf(nil, "k-%d", i%5), Value: []byte(v), Headers: fixHeaders(topic, i)})
			}
		}
		return w.WriteMessages(ctx, msgs...)
	}

	failed := make(chan struct{}, 100)
	blocked := make(chan struct{}, 100)
	handler := func(hctx context.Context, m *handoff.Message) error {
		if strings.HasPrefix(string(m.Value), "poison-") {
			failed <- struct{}{}
			return handoff.Permanent(fmt.Errorf("bad value %q", m.Value))
		}
		blocked <- struct{}{}
		<-hctx.Done()
		return context.Cause(hctx)
	}
	cfg := runtime.Config{
		Client:         runtime.Client(testio.Client()), // the run's client (TestMain)
		Brokers:        b.Addrs(),
		Group:          "fixture",
		StatePath:      path,
		DrainTimeout:   10 * time.Millisecond,
		HardStopGrace:  5 * time.Second,
		CommitInterval: 100 * time.Millisecond,
		SessionTimeout: 6 * time.Second,
		FetchMaxWait:   100 * time.Millisecond,
		Logger:         slog.New(slog.DiscardHandler),
		Classes: []runtime.Class{
			{Name: "orders", Topics: []string{"orders"}, Handler: handler, Workers: 2, QueueSize: 4},
			{Name: "users", Topics: []string{"users"}, Handler: handler, Workers: 2, QueueSize: 4},
			{Name: "local", Handler: handler, Workers: 1, QueueSize: fixLocal},
		},
	}
	rt, err := runtime.New(cfg)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() {
		_, err := rt.Run(runCtx)
		done <- err
	}()
	wait := func(ch chan struct{}, n int, what string) error {
		for range n {
			select {
			case <-ch:
			case err := <-done:
				return fmt.Errorf("runtime stopped waiting for %s: %v", what, err)
			case <-ctx.Done():
				return fmt.Errorf("timed out waiting for %s", what)
			}
		}
		return nil
	}

	// Poison first, so that every class makes its dead letters before
	// its workers block.
	if err := produce(true, fixPoison); err != nil {
		return err
	}
	if err := wait(failed, fixPoison*len(fixTopics), "the dead letters"); err != nil {
		return err
	}
	for i := range fixLocal {
		m := &handoff.Message{ID: fmt.Sprintf("local-%d", i), Key: []byte("local"), Value: fmt.Appendf(nil, "submitted %d", i)}
		if err := rt.Submit(ctx, "local", m); err != nil {
			return err
		}
	}
	if err := produce(false, fixNormal); err != nil {
		return err
	}
	// Every worker blocked: two per Kafka class, one for local.
	if err := wait(blocked, 2*len(fixTopics)+1, "the workers to block"); err != nil {
		return err
	}
	stop()
	select {
	case err = <-done:
	case <-ctx.Done():
		return errors.New("runtime did not stop")
	}
	if err != nil {
		return err
	}

	st, err := snapshot.Open(path, snapshot.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	pending, dead, err := loadRecords(st)
	if err != nil {
		return err
	}
	if len(dead) != fixPoison*len(fixTopics) || len(pending) < 2*len(fixTopics)+fixLocal {
		return fmt.Errorf("fixture has %d dead letters and %d pending records", len(dead), len(pending))
	}
	return nil
}

// fileState is what a state file holds, read with the snapshot API.
type fileState struct {
	pending map[uint64]snapshot.Record
	dead    map[uint64]snapshot.Record
	// deadID is each dead letter's ID, by its key; keyOf the reverse.
	deadID map[uint64]string
	keyOf  map[string]uint64
}

func readState(t *testing.T, path string) fileState {
	t.Helper()
	st, err := snapshot.Open(path, snapshot.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pending, dead, err := loadRecords(st)
	if err != nil {
		t.Fatal(err)
	}
	fs := fileState{pending: map[uint64]snapshot.Record{}, dead: map[uint64]snapshot.Record{}}
	for _, e := range pending {
		fs.pending[e.Key] = e.Record
	}
	fs.deadID, fs.keyOf = map[uint64]string{}, map[string]uint64{}
	for _, e := range dead {
		fs.dead[e.Key] = e.Record
		if e.IDErr != nil {
			t.Fatalf("dead letter %d: %v", e.Key, e.IDErr)
		}
		fs.deadID[e.Key], fs.keyOf[e.ID.String()] = e.ID.String(), e.Key
	}
	return fs
}

// loadRecords reads every pending record and every dead letter of st,
// with their IDs. A record that does not decode is an error.
func loadRecords(st *snapshot.State) (pending []snapshot.Entry, dead []snapshot.DeadEntry, err error) {
	bad, err := st.Walk(snapshot.Walk{Pending: func(e *snapshot.Entry) { pending = append(pending, *e) }})
	if err != nil || len(bad) > 0 {
		return nil, nil, fmt.Errorf("load pending: %v %w", bad, err)
	}
	l, err := st.ListDead(snapshot.DeadQuery{Limit: math.MaxInt})
	if err != nil || len(l.Undecodable) > 0 {
		return nil, nil, fmt.Errorf("load dead: %v %w", l.Undecodable, err)
	}
	return pending, l.Page, nil
}

// classes counts records per class.
func classes(recs map[uint64]snapshot.Record) map[string]int {
	m := map[string]int{}
	for _, r := range recs {
		m[r.Message.Class]++
	}
	return m
}
