package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/snapshot"
)

// TestDeadLetterPublishHangs: with the dead-letter topic's broker reading
// produce requests and never answering, a dead letter's publish holds no
// worker (the message behind two dead letters is handled before any
// publish has given up), and the stop still ends within its budget,
// counting the dead letters it could not publish. The state file keeps
// them all.
func TestDeadLetterPublishHangs(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders", "orders-dlq")
	b.produceValues("orders", "k", "bad-1", "bad-2", "good")
	var held atomic.Int64
	// Produce v13 (franz-go) names the topic by its ID (KIP-516).
	dlqID := b.broker.Cluster().TopicInfo("orders-dlq").TopicID
	b.broker.Cluster().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == "orders-dlq" || tp.TopicID == dlqID {
				b.broker.Cluster().KeepControl()
				held.Add(1)
				return nil, nil, true // read, never answered
			}
		}
		return nil, nil, false
	})
	log, failed := countLogs(t, "dead letter not published; it stays in the state file")
	// failedBeforeGood is how many publishes had given up when the
	// message behind the dead letters ran.
	failedBeforeGood := make(chan int64, 1)
	cfg := b.config(nil, nil)
	cfg.Logger = log
	cfg.DrainTimeout = 200 * time.Millisecond
	cfg.HardStopGrace = 200 * time.Millisecond
	cfg.Classes = []Class{{Name: "orders", Topics: []string{"orders"}, DeadLetterTopic: "orders-dlq", Workers: 1,
		Handler: func(_ context.Context, m *handoff.Message) error {
			if string(m.Value) != "good" {
				return handoff.Permanent(errors.New("cannot parse"))
			}
			failedBeforeGood <- failed.Load()
			return nil
		}}}
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	if n := <-failedBeforeGood; n != 0 {
		t.Errorf("the message behind the dead letters ran after %d publishes gave up: a publish holds its worker", n)
	}
	waitFor(t, "a publish held by the broker", func() bool { return held.Load() > 0 })
	rep, took := timedStop(t, rt, wait)
	// The bound is the stop's own (its margin covers the snapshot, the
	// commit and the leave); a second for the closes after the deadline
	// on a loaded machine.
	if limit := rt.cfg.stopBudget() + time.Second; took > limit {
		t.Errorf("stop took %s with the dead-letter broker hung, budget %s", took, limit)
	}
	if rep.DeadLettered != 2 || rep.Published != 0 || rep.Unpublished != 2 {
		t.Errorf("dead lettered %d, published %d, unpublished %d; want 2, 0, 2", rep.DeadLettered, rep.Published, rep.Unpublished)
	}
	assertCount(t, b.state, snapshot.BucketDead, 2)
	t.Logf("stop with a hung dead-letter broker: %s (budget %s; drain %s, hard stop %s, leave %s)", took.Round(time.Millisecond),
		rt.cfg.stopBudget(), rep.Drain.Round(time.Millisecond), rep.HardStop.Round(time.Millisecond), rep.Leave.Round(time.Millisecond))
}

// TestDeadLetterPublishQueueFull: when the publish queue is full, a dead
// letter's publish is dropped and counted, never waited for, with one
// warning per run of drops.
func TestDeadLetterPublishQueueFull(t *testing.T) {
	t.Parallel()
	log, warned := countLogs(t, "dead-letter publish queue full; dead letters are not published until it empties, they stay in the state file")
	rt, err := newRuntime(Config{Brokers: []string{"127.0.0.1:9"}, Group: "g", StatePath: filepath.Join(t.TempDir(), "s.db"), Logger: log,
		Classes: []Class{{Name: "orders", Topics: []string{"orders"}, DeadLetterTopic: "orders-dlq",
			Handler: func(context.Context, *handoff.Message) error { return nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	// A publisher whose goroutine never runs: its queue of 2 only fills.
	rt.dlq = newPublisher(rt.publisherConfig(), nil)
	rt.dlq.queue = make(chan deadPublish, 2)
	c := rt.classes.byName["orders"]
	dead := func(id string) { rt.dlq.publish(c, snapshot.Record{Message: handoff.Message{ID: id}}) }
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		dead(id)
	}
	if n, w := rt.tally.total(evUnpublished), warned.Load(); n != 3 || w != 1 {
		t.Errorf("unpublished %d, warnings %d; want 3, 1", n, w)
	}
	<-rt.dlq.queue
	dead("f") // queued: the run of drops is over
	dead("g") // dropped: a new run
	if n, w := rt.tally.total(evUnpublished), warned.Load(); n != 4 || w != 2 {
		t.Errorf("unpublished %d, warnings %d; want 4, 2", n, w)
	}
}

// fakeWriter is a kclient.Writer in memory: it acknowledges every record,
// or, when hang is set, answers nothing until its write's context ends.
type fakeWriter struct {
	hang   bool
	mu     sync.Mutex
	recs   []kclient.OutRecord
	closed bool
}

func (w *fakeWriter) Write(ctx context.Context, recs []kclient.OutRecord) []error {
	errs := make([]error, len(recs))
	if w.hang {
		<-ctx.Done()
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	}
	w.mu.Lock()
	w.recs = append(w.recs, recs...)
	w.mu.Unlock()
	return errs
}

func (w *fakeWriter) Close() error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	return nil
}

// TestPublisherWithoutRuntime builds the dead-letter publisher from its
// config and a writer, without a Runtime or a broker: what it is handed
// is written with the handoff headers and counted published; against a
// writer that never answers, the close abandons the rest at its deadline
// and counts it unpublished.
func TestPublisherWithoutRuntime(t *testing.T) {
	t.Parallel()
	for _, hang := range []bool{false, true} {
		t.Run(fmt.Sprintf("hang=%v", hang), func(t *testing.T) {
			t.Parallel()
			c := &class{cfg: Class{Name: "orders", DeadLetterTopic: "orders-dlq"}}
			tl := &tally{classes: []*class{c}}
			w := &fakeWriter{hang: hang}
			p := newPublisher(publisherConfig{log: slog.New(slog.DiscardHandler), tally: tl}, w)
			p.start(context.Background())
			for i := range 3 {
				p.publish(c, snapshot.Record{Message: handoff.Message{ID: fmt.Sprint(i), Key: []byte("k")}, Err: "boom"})
			}
			p.close(time.Now().Add(200 * time.Millisecond))
			counts := map[event]uint64{evPublished: tl.total(evPublished), evUnpublished: tl.total(evUnpublished)}
			if hang {
				if counts[evUnpublished] != 3 || counts[evPublished] != 0 || p.abandoned != 3 {
					t.Errorf("counts %v, abandoned %d; want 3 unpublished and abandoned", counts, p.abandoned)
				}
			} else {
				if counts[evPublished] != 3 || counts[evUnpublished] != 0 {
					t.Errorf("counts %v; want 3 published", counts)
				}
				if len(w.recs) != 3 || w.recs[0].Topic != "orders-dlq" || string(headerValue(w.recs[0].Headers, HeaderError)) != "boom" {
					t.Errorf("written %+v", w.recs)
				}
			}
			if !w.closed {
				t.Error("the writer was not closed")
			}
		})
	}
}

// headerValue returns the value of the first header named key, nil for
// none.
func headerValue(hs []handoff.Header, key string) []byte {
	for _, h := range hs {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// TestPublishHeadersFuncPanics: a PublishHeadersFunc that panics does not
// crash the process (it runs on the publisher's goroutine, where nothing
// could recover it): the dead letter is published with the headers the
// runtime made, the panic is logged, and the next dead letters are
// published as usual.
func TestPublishHeadersFuncPanics(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders", "orders-dlq")
	b.produceValues("orders", "k", "bad-1", "bad-2")
	log, panicked := countLogs(t, "PublishHeadersFunc panicked; the dead letter is published with the headers the runtime made")
	cfg := b.config(nil, nil)
	cfg.Logger = log
	cfg.PublishHeadersFunc = func(m *handoff.Message, hs []handoff.Header) []handoff.Header {
		if string(m.Value) == "bad-1" {
			panic("tracer not set up")
		}
		return append(hs[:len(hs):len(hs)], handoff.Header{Key: "traced", Value: []byte("yes")})
	}
	cfg.Classes = []Class{{Name: "orders", Topics: []string{"orders"}, DeadLetterTopic: "orders-dlq", Workers: 1,
		Handler: func(context.Context, *handoff.Message) error { return handoff.Permanent(errors.New("cannot parse")) }}}
	rt, wait := startNew(t, cfg)
	waitFor(t, "both dead letters published", func() bool { return len(readRaw(t, b.broker.Addr(), "orders-dlq")) == 2 })
	rep := shutdownAndWait(t, rt, wait)
	for _, r := range readRaw(t, b.broker.Addr(), "orders-dlq") {
		traced := slices.ContainsFunc(r.headers, func(h kafka.Header) bool { return h.Key == "traced" })
		if want := string(r.value) == "bad-2"; traced != want {
			t.Errorf("dead letter %q published with the func's header: %v, want %v", r.value, traced, want)
		}
	}
	if rep.DeadLettered != 2 || rep.Published != 2 || rep.Unpublished != 0 {
		t.Errorf("dead lettered %d, published %d, unpublished %d; want 2, 2, 0", rep.DeadLettered, rep.Published, rep.Unpublished)
	}
	if n := panicked.Load(); n != 1 {
		t.Errorf("%d panics logged, want 1", n)
	}
}

// TestDeadLetterOfOldRecordPublished: a dead letter of a record an hour
// old is published to its DeadLetterTopic, as one of a fresh record is,
// and the published record keeps the original record's timestamp as its
// Kafka timestamp. (franz-go's RecordDeliveryTimeout is measured from a
// record's timestamp: with it, such a dead letter failed at once as
// timed out.)
func TestDeadLetterOfOldRecordPublished(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders", "orders-dlq")
	old := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC()
	w := b.writer()
	err := w.WriteMessages(context.Background(),
		kafka.Message{Topic: "orders", Key: []byte("k"), Value: []byte("bad-old"), Time: old},
		kafka.Message{Topic: "orders", Key: []byte("k"), Value: []byte("bad-new")})
	devbroker.CloseWriter(w)
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config(nil, nil)
	cfg.Classes = []Class{{Name: "orders", Topics: []string{"orders"}, DeadLetterTopic: "orders-dlq", Workers: 1,
		Handler: func(context.Context, *handoff.Message) error { return handoff.Permanent(errors.New("cannot parse")) }}}
	rt, wait := startNew(t, cfg)
	waitFor(t, "both publishes to end", func() bool {
		return rt.tally.total(evPublished)+rt.tally.total(evUnpublished) == 2
	})
	rep := shutdownAndWait(t, rt, wait)
	if rep.DeadLettered != 2 || rep.Published != 2 || rep.Unpublished != 0 {
		t.Errorf("dead lettered %d, published %d, unpublished %d; want 2, 2, 0", rep.DeadLettered, rep.Published, rep.Unpublished)
	}
	assertCount(t, b.state, snapshot.BucketDead, 2)
	recs := readRaw(t, b.broker.Addr(), "orders-dlq")
	if len(recs) != 2 {
		t.Fatalf("the dead-letter topic holds %d records, want 2", len(recs))
	}
	for _, r := range recs {
		switch string(r.value) {
		case "bad-old":
			if !r.time.Equal(old) {
				t.Errorf("the dead letter of the hour-old record is published with timestamp %s, want the record's %s", r.time, old)
			}
			t.Logf("dead letter of a record %s old published at offset %d of orders-dlq with timestamp %s", time.Since(old).Round(time.Second), r.offset, r.time)
		case "bad-new":
			if d := time.Since(r.time); d < 0 || d > 10*time.Minute {
				t.Errorf("the dead letter of the fresh record is published with timestamp %s", r.time)
			}
		default:
			t.Errorf("unexpected dead letter %q", r.value)
		}
	}
}
