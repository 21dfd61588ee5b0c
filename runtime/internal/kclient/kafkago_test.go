package kclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/handoff-go/handoff/devbroker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// warnNow is a WarnFunc without backoff: every line goes through.
func warnNow(log *slog.Logger, _, msg string, args ...any) { log.Warn(msg, args...) }

// TestKafkaLoggerOneMsgKey: a kafka-go error line is one JSON object with
// one msg key and kafka-go's text in kafka_message. Before, kafka-go's
// text was a second msg key, which JSON pipelines choke on.
func TestKafkaLoggerOneMsgKey(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	r := &kafkaGo{cfg: Config{WarnFunc: warnNow}}
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	r.kafkaLogger(context.Background(), log, true)("Unable to establish connection to consumer group coordinator for group %s: %v", "g", errors.New("connection refused"))
	line := buf.String()
	if n := strings.Count(line, `"msg":`); n != 1 {
		t.Errorf("%d msg keys in %s", n, line)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatal(err)
	}
	if got, _ := rec["kafka_message"].(string); !strings.Contains(got, "connection refused") {
		t.Errorf("kafka_message = %q in %s", got, line)
	}
	// A loop our own Close ended is no warning (a normal stop's reader
	// close reports context.Canceled).
	buf.Reset()
	r.kafkaLogger(context.Background(), log, true)("kafka reader failed to read lag of partition %d of %s: %v", 0, "t", context.Canceled)
	if buf.Len() != 0 {
		t.Errorf("a cancelled loop logged %s", buf.String())
	}
	// Nor is any error once the fetching has ended: a closing reader's
	// connection ends with an i/o timeout.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.kafkaLogger(ctx, log, true)("the kafka reader got an unknown error reading partition %d of %s at offset %d: %v", 1, "t", 14, errors.New("i/o timeout"))
	if buf.Len() != 0 {
		t.Errorf("a closing reader logged %s", buf.String())
	}
}

// TestMemberWatch: the member is the one of kafka-go's last join
// line; other lines do not change it.
func TestMemberWatch(t *testing.T) {
	t.Parallel()
	var w memberWatch
	if got := w.joined(); got != "" {
		t.Fatalf("before any join: joined %q", got)
	}
	w.note(kgJoinedLower, []any{"g", "m1", int32(1)})
	w.note(kgJoined, []any{"g", "m1", int32(1)})
	if got := w.joined(); got != "m1" {
		t.Fatalf("joined m1: joined %q", got)
	}
	w.note("Leaving group %s, member %s", []any{"g", "m1"})
	if got := w.joined(); got != "m1" {
		t.Fatalf("m1 leaving: joined %q", got)
	}
	w.note(kgJoined, []any{"g", "m2", int32(2)})
	w.note("Failed to sync group %s: %v", []any{"g", "m1"})
	if got := w.joined(); got != "m2" {
		t.Fatalf("joined m2: joined %q", got)
	}
}

// TestSmallBatchesFetchInBudget reads a partition of 3000 single-record
// batches with kafka-go's partition reader. kafka-go's protocol client
// copies each batch of a response into a 64 KiB page of its own, so one
// fetch of FetchMaxBytes took about 190 MiB of heap for these 0.5 MiB of
// records. The reader's fetch size now keeps a response's pages about
// FetchMaxBytes. Not parallel: it reads the process's heap.
func TestSmallBatchesFetchInBudget(t *testing.T) {
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 3000
	pr, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n { // one batch each: a producer of a quiet topic
		if err := pr.ProduceSync(ctx, &kgo.Record{Topic: "t", Key: []byte(strconv.Itoa(i)), Value: make([]byte, 100)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	pr.Close()

	chunks := readFrom(t, ctx, b, 0, 100*time.Millisecond)

	var ms runtime.MemStats
	// Twice: kafka-go keeps its pages in a sync.Pool, which the first
	// collection moves to its victim cache and the second empties, so that
	// pages of an earlier run do not serve this one.
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapAlloc, ms.HeapAlloc
	next := int64(0)
	for next < n {
		var c []Record
		select {
		case c = <-chunks:
		case <-ctx.Done():
			t.Fatalf("read %d of %d records: %v", next, n, ctx.Err())
		}
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
		for _, r := range c {
			if r.Offset != next || string(r.Key) != strconv.Itoa(int(next)) || len(r.Value) != 100 {
				t.Fatalf("record %d: offset %d, key %q, %d value bytes", next, r.Offset, r.Key, len(r.Value))
			}
			next++
		}
	}
	if grew := float64(peak-base) / (1 << 20); grew > 32 {
		t.Errorf("the heap grew %.1f MiB while reading %d single-record batches (%d KiB of records); want at most 32", grew, n, n*100/1024)
	} else {
		t.Logf("the heap grew at most %.1f MiB", grew)
	}
}

// startBroker starts an embedded broker with one topic "t" of one
// partition, closed when the test ends.
func startBroker(t *testing.T) *devbroker.Broker {
	t.Helper()
	b, err := devbroker.Start(devbroker.Config{Topics: []string{"t"}, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// readFrom runs a kafka-go partition reader of "t"/0 on b from offset,
// fetching with maxWait, until the test ends, and returns the chunks it
// hands over.
func readFrom(t *testing.T, ctx context.Context, b *devbroker.Broker, offset int64, maxWait time.Duration) <-chan []Record {
	t.Helper()
	return readFromAt(t, ctx, b, offset, maxWait, false)
}

// readFromAt is readFrom at an isolation level: read_committed when
// readCommitted is set, else read_uncommitted.
func readFromAt(t *testing.T, ctx context.Context, b *devbroker.Broker, offset int64, maxWait time.Duration, readCommitted bool) <-chan []Record {
	t.Helper()
	tr := &kafka.Transport{}
	cl := &kafka.Client{Addr: kafka.TCP(b.Addr()), Transport: tr}
	k := &kafkaGo{fetches: cl, cfg: Config{FetchMaxWait: maxWait, WarnFunc: warnNow, FetchErrorFunc: func(string) {}, FetchFunc: func(Partition, error) {}, ReadCommitted: readCommitted}}
	chunks, out := newChunkOut(100)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.readPartition(rctx, Assigned{Partition: Partition{"t", 0}, Offset: offset}, out, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		stop()
		<-done
		tr.CloseIdleConnections()
	})
	return chunks
}

// TestFetchSize: a fetch asks for little until it knows the partition's
// batches, then for what keeps a response's pages about FetchMaxBytes,
// growing at most fourfold a fetch; an empty response changes nothing.
func TestFetchSize(t *testing.T) {
	t.Parallel()
	f := newFetchSize()
	if f.maxBytes != firstFetchBytes {
		t.Fatalf("first fetch %d, want %d", f.maxBytes, firstFetchBytes)
	}
	f.learn(fetchRead{})
	if f.maxBytes != firstFetchBytes {
		t.Errorf("after an empty response %d, want %d", f.maxBytes, firstFetchBytes)
	}
	// Single-record batches of 100 bytes: a page each, so the least.
	f.learn(fetchRead{batches: 23, records: 23, bytes: 23 * 100})
	if f.maxBytes != minFetchBytes {
		t.Errorf("single-record batches: %d, want %d", f.maxBytes, minFetchBytes)
	}
	// Batches of 64 records of 300 bytes (19 KiB): 16 pages' worth of
	// them, grown fourfold a fetch.
	var sizes []int
	for range 4 {
		f.learn(fetchRead{batches: 4, records: 256, bytes: 256 * 300})
		sizes = append(sizes, f.maxBytes)
	}
	wire := 61 + 12*64 + 64*300
	want := FetchMaxBytes * wire / kafkaGoPage
	if got := sizes[len(sizes)-1]; got != want {
		t.Errorf("batches of 64 records: %d after %v, want %d", got, sizes, want)
	}
	if sizes[0] != 4*minFetchBytes {
		t.Errorf("first growth to %d, want fourfold %d", sizes[0], 4*minFetchBytes)
	}
	// Batches not known (not a record stream): fourfold a fetch, at
	// most FetchMaxBytes.
	u := newFetchSize()
	u.learn(fetchRead{records: 10, bytes: 1000})
	if u.maxBytes != 4*firstFetchBytes {
		t.Errorf("batches unknown: %d, want %d", u.maxBytes, 4*firstFetchBytes)
	}
	// Batches larger than a page: FetchMaxBytes.
	for range 8 {
		f.learn(fetchRead{batches: 2, records: 2000, bytes: 2000 * 300})
	}
	if f.maxBytes != FetchMaxBytes {
		t.Errorf("large batches: %d, want %d", f.maxBytes, FetchMaxBytes)
	}
}

// TestLastOffsetStartKeepsNewRecords: a partition with no committed
// offset that starts at its end (StartLast) and is idle when assigned.
// Its reader's first fetch comes back empty, and a record is appended
// right after the broker built that response. The record is past where
// reading started, so it must be read. Before, the reader kept asking
// for kafka-go's LastOffset after each empty fetch, which looks the end
// up anew: the record was skipped, never handled, and the commit after
// the next record moved past it.
func TestLastOffsetStartKeepsNewRecords(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pr, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	produce := func(v string) {
		if err := pr.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte(v)}).FirstErr(); err != nil {
			t.Error(err)
		}
	}
	for i := range 3 { // offsets 0-2: before the reading starts
		produce("old-" + strconv.Itoa(i))
	}
	// The reader's first fetch: answered empty with the high watermark
	// the broker had (3), and the record at offset 3 appended just after.
	c := b.Cluster()
	c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.FetchRequest)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = 3, 3, 0
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		c.SleepControl(func() { produce("new") })
		return resp, nil, true
	})
	// The reader's next fetch, from wherever it reads next: a record
	// appended before it is answered, so that a reader that skipped
	// offset 3 reads this one first.
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.DropControl()
		c.SleepControl(func() { produce("newer") })
		return nil, nil, false
	})

	chunks := readFrom(t, ctx, b, kafka.LastOffset, time.Second)
	select {
	case c := <-chunks:
		if c[0].Offset != 3 || string(c[0].Value) != "new" {
			t.Fatalf("first record read: offset %d, value %q; want offset 3, \"new\"", c[0].Offset, c[0].Value)
		}
	case <-ctx.Done():
		t.Fatal("nothing read")
	}
}

// TestOffsetBelowLogStartResets: a partition whose committed offset the
// retention has deleted (the log now starts past it) answers its fetches
// OFFSET_OUT_OF_RANGE. Its reader goes on from the start the
// configuration names (here the first offset), as franz-go's
// ConsumeResetOffset does. Before, it retried the same offset forever:
// the partition was stuck, its lag growing.
func TestOffsetBelowLogStartResets(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pr, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	for i := range 10 {
		if err := pr.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	del := kmsg.NewPtrDeleteRecordsRequest()
	dt := kmsg.NewDeleteRecordsRequestTopic()
	dt.Topic = "t"
	dp := kmsg.NewDeleteRecordsRequestTopicPartition()
	dp.Partition, dp.Offset = 0, 5
	dt.Partitions = append(dt.Partitions, dp)
	del.Topics = append(del.Topics, dt)
	del.TimeoutMillis = 5000
	resp, err := del.RequestWith(ctx, pr)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("delete records: error code %d", code)
	}

	// Offset 2: the group's commit, below the log start of 5.
	chunks := readFrom(t, ctx, b, 2, 100*time.Millisecond)
	select {
	case c := <-chunks:
		if c[0].Offset != 5 {
			t.Fatalf("first record read: offset %d, want 5 (the log start)", c[0].Offset)
		}
	case <-ctx.Done():
		t.Fatal("nothing read: the reader is stuck below the log start")
	}
}

// TestControlBatchPassed: a transaction's commit marker ends the
// partition (a record at offset 0, its marker at 1). kafka-go's record
// stream skips the control batch, so a fetch at offset 1 hands over no
// record. The reader must go on past the marker. Before, it fetched
// offset 1 again at once, forever: a loop of fetches answered at once
// (the broker has data there), for as long as the partition stayed idle.
func TestControlBatchPassed(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pr, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("tx"), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := pr.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := pr.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := pr.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	// The offsets the reader fetches at, in order.
	fetchedAt := make(chan int64, 100)
	c := b.Cluster()
	c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		for _, rt := range kreq.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				select {
				case fetchedAt <- rp.FetchOffset:
				default:
				}
			}
		}
		return nil, nil, false
	})

	chunks := readFrom(t, ctx, b, 0, 100*time.Millisecond)
	select {
	case c := <-chunks:
		if c[0].Offset != 0 {
			t.Fatalf("first record read: offset %d, want 0", c[0].Offset)
		}
	case <-ctx.Done():
		t.Fatal("nothing read")
	}
	atMarker := 0
	for atMarker < 3 {
		select {
		case off := <-fetchedAt:
			switch {
			case off >= 2:
				return // past the marker
			case off == 1:
				atMarker++
			}
		case <-ctx.Done():
			t.Fatal("no fetch past the marker")
		}
	}
	t.Fatalf("fetched the commit marker's offset %d times; want the reader past it", atMarker)
}

// TestInterleavedTransactions: two transactional producers write to one
// partition in turn (offsets 0..3: p1-a, p2-a, p1-b, p2-b); the first
// aborts (marker 4), the second commits (marker 5). A read_committed
// kafka-go reader hands over p2-a and p2-b, and both markers as marker
// records, nothing of the aborted transaction (the broker returns its
// batches too, and names it among the response's aborted transactions);
// a read_uncommitted one hands over all four records and both markers.
// Every record's End is the partition's end, 6.
func TestInterleavedTransactions(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	producer := func(id string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID(id), kgo.DefaultProduceTopic("t"), kgo.ProducerLinger(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		return cl
	}
	p1, p2 := producer("p1"), producer("p2")
	for _, w := range []struct {
		cl *kgo.Client
		v  string
	}{{p1, "p1-a"}, {p2, "p2-a"}, {p1, "p1-b"}, {p2, "p2-b"}} {
		if err := w.cl.ProduceSync(ctx, &kgo.Record{Value: []byte(w.v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p1.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	if err := p2.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		readCommitted bool
		want          []string // value, or "marker", by offset
	}{
		{true, []string{"1 p2-a", "3 p2-b", "4 marker", "5 marker"}},
		{false, []string{"0 p1-a", "1 p2-a", "2 p1-b", "3 p2-b", "4 marker", "5 marker"}},
	} {
		chunks := readFromAt(t, ctx, b, 0, 100*time.Millisecond, tc.readCommitted)
		var got []string
		for len(got) < len(tc.want) {
			select {
			case c := <-chunks:
				for _, r := range c {
					if r.End != 6 {
						t.Errorf("read_committed %v: record at %d has End %d, want 6", tc.readCommitted, r.Offset, r.End)
					}
					v := string(r.Value)
					if r.Marker {
						v = "marker"
					}
					got = append(got, fmt.Sprint(r.Offset, " ", v))
				}
			case <-ctx.Done():
				t.Fatalf("read_committed %v: read %q, want %q", tc.readCommitted, got, tc.want)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("read_committed %v: read %q, want %q", tc.readCommitted, got, tc.want)
		}
	}
}
