package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// replayTopics are the topics of a replay test's broker: the fixture's,
// and "submitted" for the class that has none.
var replayTopics = []string{"orders", "users", "submitted"}

func startBroker(t testing.TB) *devbroker.Broker {
	t.Helper()
	b, err := devbroker.Start(devbroker.Config{Topics: replayTopics, Partitions: fixPartitions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// readTopics returns every message on the broker's replay topics, read
// from the start of each partition up to its end.
func readTopics(t testing.TB, addr string) []kafka.Message {
	t.Helper()
	return readTopicsWith(t, kafka.DefaultDialer, addr)
}

// readTopicsWith is readTopics through dialer d.
func readTopicsWith(t testing.TB, d *kafka.Dialer, addr string) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var all []kafka.Message
	for _, topic := range replayTopics {
		for p := range fixPartitions {
			conn, err := d.DialLeader(ctx, "tcp", addr, topic, p)
			if err != nil {
				t.Fatal(err)
			}
			first, last, err := conn.ReadOffsets()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Seek(first, kafka.SeekAbsolute); err != nil {
				t.Fatal(err)
			}
			for off := first; off < last; {
				conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				batch := conn.ReadBatch(1, 10<<20)
				for {
					m, err := batch.ReadMessage()
					if err != nil {
						break
					}
					all = append(all, m)
					off = m.Offset + 1
				}
				if err := batch.Close(); err != nil && !errors.Is(err, io.EOF) {
					t.Fatalf("read %s/%d: %v", topic, p, err)
				}
			}
			conn.Close()
		}
	}
	return all
}

// checkReplayed fails t unless msgs holds each of recs exactly once, on
// its origin topic and partition (or topic "submitted" for those without
// one), with its key, value and headers plus handoff-replayed-from, and
// nothing else.
func checkReplayed(t *testing.T, msgs []kafka.Message, recs []snapshot.Record) {
	t.Helper()
	byID := map[string][]kafka.Message{}
	for _, m := range msgs {
		n := len(m.Headers)
		if n == 0 || m.Headers[n-1].Key != headerReplayedFrom {
			t.Errorf("message without %s last: %s/%d/%d headers %v", headerReplayedFrom, m.Topic, m.Partition, m.Offset, m.Headers)
			continue
		}
		id := string(m.Headers[n-1].Value)
		byID[id] = append(byID[id], m)
	}
	for _, r := range recs {
		ms := byID[r.Message.ID]
		delete(byID, r.Message.ID)
		if len(ms) != 1 {
			t.Errorf("message %s arrived %d times", r.Message.ID, len(ms))
			continue
		}
		m := ms[0]
		topic, partition := r.Message.Origin.Topic, r.Message.Origin.Partition
		if topic == "" {
			topic, partition = "submitted", m.Partition
		}
		if m.Topic != topic || m.Partition != partition {
			t.Errorf("message %s on %s/%d, want %s/%d", r.Message.ID, m.Topic, m.Partition, topic, partition)
		}
		if string(m.Key) != string(r.Message.Key) || string(m.Value) != string(r.Message.Value) {
			t.Errorf("message %s: key %q value %q, want %q %q", r.Message.ID, m.Key, m.Value, r.Message.Key, r.Message.Value)
		}
		var got []string
		for _, h := range m.Headers[:len(m.Headers)-1] {
			got = append(got, h.Key+"="+string(h.Value))
		}
		var want []string
		for _, h := range r.Message.Headers {
			want = append(want, h.Key+"="+string(h.Value))
		}
		if !slices.Equal(got, want) {
			t.Errorf("message %s headers %q, want %q", r.Message.ID, got, want)
		}
	}
	for id, ms := range byID {
		t.Errorf("unexpected message %s (%d times)", id, len(ms))
	}
}

func records(m map[uint64]snapshot.Record) []snapshot.Record {
	var out []snapshot.Record
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

func TestReplay(t *testing.T) {
	t.Parallel()
	path := stateFile(t)
	before := readState(t, path)
	b := startBroker(t)
	var withOrigin, local []snapshot.Record
	for _, r := range records(before.pending) {
		if r.Message.Origin.IsKafka() {
			withOrigin = append(withOrigin, r)
		} else {
			local = append(local, r)
		}
	}
	if len(local) != fixLocal {
		t.Fatalf("fixture has %d pending records without origin, want %d", len(local), fixLocal)
	}

	// Pending only: those without a topic are skipped and stay.
	r := run(t, "replay", path, "--brokers", b.Addr(), "--batch", "4")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("replayed %d of %d pending messages from %s\n", len(withOrigin), len(withOrigin), path),
		fmt.Sprintf("skipped %d messages with no origin topic (class local %d): they were submitted in-process; map their class with --topic CLASS=TOPIC to replay them\n", fixLocal, fixLocal),
		fmt.Sprintf("left in %s: pending %d, dead %d (replay sends pending messages, and dead letters with --dead; 'handoff inspect' shows the rest)\n", path, fixLocal, len(before.dead)),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output does not say %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, fmt.Sprintf("replayed %d/%d messages (100%%)\n", len(withOrigin), len(withOrigin))) {
		t.Errorf("no final progress line:\n%s", r.stderr)
	}
	checkReplayed(t, readTopics(t, b.Addr()), withOrigin)
	mid := readState(t, path)
	if len(mid.pending) != fixLocal || len(mid.dead) != len(before.dead) {
		t.Errorf("after replay: %d pending, %d dead", len(mid.pending), len(mid.dead))
	}

	// The rest, with the dead letters and the class mapped to a topic.
	r = run(t, "replay", path, "--brokers", b.Addr(), "--dead", "--topic", "local=submitted")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	n := fixLocal + len(before.dead)
	if want := fmt.Sprintf("replayed %d of %d messages (pending %d, dead letters %d) from %s\n%s holds no more messages\n", n, n, fixLocal, len(before.dead), path, path); r.stdout != want {
		t.Errorf("output %q, want %q", r.stdout, want)
	}
	checkReplayed(t, readTopics(t, b.Addr()), append(append(withOrigin, local...), records(before.dead)...))
	after := readState(t, path)
	if len(after.pending) != 0 || len(after.dead) != 0 {
		t.Errorf("after replay: %d pending, %d dead", len(after.pending), len(after.dead))
	}

	// Nothing left: nothing sent.
	r = run(t, "replay", path, "--brokers", b.Addr(), "--dead")
	if r.code != 0 || !strings.Contains(r.stdout, "replayed 0 of 0 messages") {
		t.Errorf("empty replay: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if got := len(readTopics(t, b.Addr())); got != len(before.pending)+len(before.dead) {
		t.Errorf("%d messages on the broker, want %d", got, len(before.pending)+len(before.dead))
	}
}

// cancelOnWrite calls cancel on the first write that contains s.
type cancelOnWrite struct {
	s      string
	cancel context.CancelFunc
	once   sync.Once
}

func (w *cancelOnWrite) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.s) {
		w.once.Do(w.cancel)
	}
	return len(p), nil
}

// TestReplayInterrupted: a replay cancelled half-way stops after the
// batch in flight, keeping in the file exactly what was not acknowledged,
// and a second run sends the rest: every message arrives exactly once.
func TestReplayInterrupted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// arm arranges for cancel to be called during the first run.
		arm func(b *devbroker.Broker, cancel context.CancelFunc) io.Writer
	}{
		{"after the first batch", func(_ *devbroker.Broker, cancel context.CancelFunc) io.Writer {
			return &cancelOnWrite{s: "replayed ", cancel: cancel}
		}},
		{"while a batch is in flight", func(b *devbroker.Broker, cancel context.CancelFunc) io.Writer {
			var n atomic.Int32
			// The broker cancels the command's context when the third
			// produce request reaches it, and then handles it as usual.
			b.Cluster().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				if n.Add(1) == 3 {
					cancel()
				}
				return nil, nil, false
			})
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := stateFile(t)
			before := readState(t, path)
			all := append(records(before.pending), records(before.dead)...)
			b := startBroker(t)
			args := []string{"replay", path, "--brokers", b.Addr(), "--dead", "--topic", "local=submitted", "--batch", "3"}

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := runWith(t, ctx, tc.arm(b, cancel), args...)
			if r.code != exitFailure || !strings.Contains(r.stderr, "handoff: replay interrupted: ") ||
				!strings.Contains(r.stderr, "run the same command again to replay the rest") {
				t.Fatalf("first run: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
			}
			var sent, total int
			if _, err := fmt.Sscanf(r.stdout, "replayed %d of %d", &sent, &total); err != nil || total != len(all) || sent == 0 || sent >= total || sent%3 != 0 {
				t.Fatalf("first run: sent %d of %d (%v)\n%s", sent, total, err, r.stdout)
			}
			// What the broker has is exactly what left the file.
			mid := readState(t, path)
			if left := len(mid.pending) + len(mid.dead); left != total-sent {
				t.Errorf("%d records left in the file after sending %d of %d", left, sent, total)
			}
			var gone []snapshot.Record
			for k, r := range before.pending {
				if _, ok := mid.pending[k]; !ok {
					gone = append(gone, r)
				}
			}
			for k, r := range before.dead {
				if _, ok := mid.dead[k]; !ok {
					gone = append(gone, r)
				}
			}
			checkReplayed(t, readTopics(t, b.Addr()), gone)

			r = run(t, args...)
			if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("replayed %d of %d", total-sent, total-sent)) {
				t.Fatalf("second run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			checkReplayed(t, readTopics(t, b.Addr()), all)
			if after := readState(t, path); len(after.pending)+len(after.dead) != 0 {
				t.Errorf("left in the file: %d pending, %d dead", len(after.pending), len(after.dead))
			}
		})
	}
}

// TestReplayBrokerDown: with no broker, nothing is deleted and the error
// says why.
func TestReplayBrokerDown(t *testing.T) {
	t.Parallel()
	path := stateFile(t)
	before := readState(t, path)
	b := startBroker(t)
	addr := b.Addr()
	b.Close()
	r := run(t, "replay", path, "--brokers", addr, "--ack-timeout", "2s")
	if r.code != exitFailure || !strings.Contains(r.stderr, "handoff: ") || !strings.Contains(r.stdout, "replayed 0 of ") {
		t.Errorf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	sameState(t, before, readState(t, path))
}

// TestReplayKeepsRecordBytes: replay produces a record with the saved
// message's key, value and header values, nil and empty kept apart, and
// its original timestamp.
func TestReplayKeepsRecordBytes(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	ts := time.Date(2026, 5, 6, 7, 8, 9, 123e6, time.UTC)
	saved := []handoff.Message{
		{ID: "orders/0/1", Class: "orders", Key: []byte{}, Value: nil, Timestamp: ts,
			Headers: []handoff.Header{{Key: "null"}, {Key: "empty", Value: []byte{}}}, Origin: handoff.Origin{Topic: "orders", Partition: 0, Offset: 1}},
		{ID: "orders/0/2", Class: "orders", Key: nil, Value: []byte{}, Timestamp: ts.Add(time.Hour),
			Origin: handoff.Origin{Topic: "orders", Partition: 0, Offset: 2}},
	}
	for _, m := range saved {
		snapshottest.SeedPending(t, path, snapshot.Record{Message: m, Reason: "unstarted", SavedAt: time.Now()})
	}
	b := startBroker(t)
	if r := run(t, "replay", path, "--brokers", b.Addr()); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(b.Addr()), Transport: tr, Timeout: 10 * time.Second}
	resp, err := client.Fetch(context.Background(), &kafka.FetchRequest{Topic: "orders", Partition: 0, Offset: 0, MaxBytes: 1 << 20})
	if err == nil {
		err = resp.Error
	}
	if err != nil {
		t.Fatal(err)
	}
	kind := func(b []byte) string {
		if b == nil {
			return "nil"
		}
		return fmt.Sprintf("%q", b)
	}
	for i := range saved {
		rec, err := resp.Records.ReadRecord()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		key, err := protocol.ReadAll(rec.Key)
		if err != nil {
			t.Fatal(err)
		}
		value, err := protocol.ReadAll(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		m := saved[i]
		if kind(key) != kind(m.Key) || kind(value) != kind(m.Value) || !rec.Time.Equal(m.Timestamp) {
			t.Errorf("replayed %s: key %s value %s time %v; saved key %s value %s timestamp %v",
				m.ID, kind(key), kind(value), rec.Time, kind(m.Key), kind(m.Value), m.Timestamp)
		}
		for j, h := range m.Headers {
			if j >= len(rec.Headers) || rec.Headers[j].Key != h.Key || kind(rec.Headers[j].Value) != kind(h.Value) {
				t.Errorf("replayed %s: headers %q, saved %q", m.ID, rec.Headers, m.Headers)
			}
		}
	}
}
