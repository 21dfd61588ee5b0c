package runtime

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/rawkafka"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// Speed lives here, never in timed assertions: these benchmarks report
// figures and check only counts. Run them with
//
//	go test -run='^$' -bench='EndToEnd|Repush' -benchtime=5x ./runtime/
//	go test -run='^$' -bench=Tracker ./runtime/
//
// BenchmarkEndToEnd runs one interleaved round (raw kafka-go, then the
// runtime) per iteration, and at least 3. BenchmarkTracker needs the
// default benchtime: one iteration of it means nothing.

const (
	e2ePartitions = 4
	e2eValueSize  = 256
	e2eTimeout    = 3 * time.Minute
)

// e2eVariant is one comparison of BenchmarkEndToEnd: the same topics read
// by raw kafka-go and by the runtime.
type e2eVariant struct {
	name   string
	topics []string
	n      int           // messages produced over all topics
	work   time.Duration // handler time; zero is a no-op handler
	// workers per topic: the runtime's Class.Workers (zero: its default);
	// with work, raw kafka-go gets one pond pool of workers×topics.
	workers int
}

// e2eGroups numbers the consumer groups: every side of every round reads
// all messages with a group of its own.
var e2eGroups atomic.Int64

// e2eResult is one side of one round, in messages per second from the
// generation join to the last message handled, and to the commit that
// covers every message.
type e2eResult struct {
	handled, committed float64
	// commitLag is the time from the last message handled to the commit
	// covering all of them.
	commitLag time.Duration
}

// BenchmarkEndToEnd compares the runtime with hand-written kafka-go over
// one embedded broker: a consumer group, one kafka.Reader per assigned
// partition and one committer goroutine. Each side reads all N messages
// with a fresh group; sides alternate, round after round.
//
// Rates are measured from the moment the group generation is joined (the
// join itself is the same kafka-go code on both sides), to the last
// message handled (the headline figure) and to the first commit covering
// all N. Raw kafka-go knows N and commits the moment it is reached; the
// runtime commits on its CommitInterval tick (1s), so its committed rate
// carries up to a second of tick lag per round.
func BenchmarkEndToEnd(b *testing.B) {
	noop := e2eVariant{name: "noop", topics: []string{"e2e-a", "e2e-b", "e2e-c"}, n: 1_500_000}
	// 3 topics × 16 workers of 2ms is a ceiling of 24,000 msgs/s.
	slow := e2eVariant{name: "handler2ms", topics: []string{"slow-a", "slow-b", "slow-c"}, n: 24_000,
		work: 2 * time.Millisecond, workers: 16}

	broker, err := devbroker.Start(devbroker.Config{
		Topics:     slices.Concat(noop.topics, slow.topics),
		Partitions: e2ePartitions,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(broker.Close)
	for _, v := range []e2eVariant{noop, slow} {
		produceBench(b, broker.Addrs(), v.topics, v.n)
	}

	for _, v := range []e2eVariant{noop, slow} {
		b.Run(v.name, func(b *testing.B) {
			var raw, rt []e2eResult
			var ratio, ratioCommitted []float64
			round := func() {
				k := len(raw)
				id := e2eGroups.Add(1)
				r := runRawKafkaGo(b, broker.Addrs(), fmt.Sprintf("raw-%s-%d", v.name, id), v)
				h := runHandoff(b, broker.Addrs(), fmt.Sprintf("rt-%s-%d", v.name, id), v)
				b.Logf("round %d: raw %.0f msgs/s (committed %.0f), runtime %.0f msgs/s (committed %.0f), ratio %.3f",
					k, r.handled, r.committed, h.handled, h.committed, h.handled/r.handled)
				raw, rt = append(raw, r), append(rt, h)
				ratio = append(ratio, h.handled/r.handled)
				ratioCommitted = append(ratioCommitted, h.committed/r.committed)
			}
			for b.Loop() {
				round()
			}
			for len(raw) < 3 { // the timer is stopped: these only add samples
				round()
			}
			rawRate, rtRate := median(handledRates(raw)), median(handledRates(rt))
			b.ReportMetric(rawRate, "raw_msgs/s")
			b.ReportMetric(rtRate, "runtime_msgs/s")
			b.ReportMetric(median(ratio), "runtime/raw")
			b.ReportMetric(median(ratioCommitted), "runtime/raw_committed")
			b.ReportMetric(float64(median(commitLags(raw)).Milliseconds()), "raw_commit_lag_ms")
			b.ReportMetric(float64(median(commitLags(rt)).Milliseconds()), "runtime_commit_lag_ms")
			if v.work > 0 {
				ceiling := float64(v.workers*len(v.topics)) / v.work.Seconds()
				b.ReportMetric(rawRate/ceiling, "raw_ceiling_frac")
				b.ReportMetric(rtRate/ceiling, "runtime_ceiling_frac")
			}
		})
	}
}

// produceBench writes n records of e2eValueSize bytes spread over topics.
func produceBench(b *testing.B, addrs, topics []string, n int) {
	b.Helper()
	w := devbroker.NewWriter(addrs)
	defer devbroker.CloseWriter(w)
	value := make([]byte, e2eValueSize)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	msgs := make([]kafka.Message, 0, n)
	for i := range n {
		msgs = append(msgs, kafka.Message{
			Topic: topics[i%len(topics)],
			Key:   strconv.AppendInt([]byte("key-"), int64(i), 10),
			Value: value,
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	defer cancel()
	for c := range slices.Chunk(msgs, 5000) {
		if err := w.WriteMessages(ctx, c...); err != nil {
			b.Fatal(err)
		}
	}
}

// runRawKafkaGo consumes v's topics the way a service written directly on
// kafka-go would (internal/rawkafka), until its group's committed offsets
// cover all v.n.
func runRawKafkaGo(b *testing.B, addrs []string, group string, v e2eVariant) e2eResult {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	defer cancel()
	total := v.workers * len(v.topics)
	c, err := rawkafka.Start(ctx, rawkafka.Config{
		Brokers: addrs, Group: group, Topics: v.topics, Partitions: e2ePartitions, N: v.n,
		// With work: the runtime's default queue, 8 per worker.
		Work: v.work, Workers: total, QueueSize: DefaultQueueFactor * total,
		CommitInterval: DefaultCommitInterval, SessionTimeout: DefaultSessionTimeout, FetchMaxWait: DefaultFetchMaxWait,
		Logf: b.Logf,
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Handled(ctx); err != nil {
		b.Fatal(err)
	}
	var res e2eResult
	res.handled = float64(v.n) / c.HandledAt.Sub(c.Began).Seconds()
	if err := c.FinalCommit(); err != nil {
		b.Fatal(err)
	}
	res.committed = float64(v.n) / time.Since(c.Began).Seconds()
	res.commitLag = time.Since(c.HandledAt)
	if err := c.Close(); err != nil {
		b.Fatal(err)
	}
	if got := committedSum(b, addrs, group, v.topics); got != int64(v.n) {
		b.Fatalf("raw kafka-go: committed offsets sum to %d, want %d", got, v.n)
	}
	return res
}

// runHandoff consumes v's topics with the runtime, one class per topic,
// until its committed offsets cover all v.n, then shuts it down.
func runHandoff(b *testing.B, addrs []string, group string, v e2eVariant) e2eResult {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	defer cancel()
	var handled atomic.Int64
	all := make(chan struct{})
	h := func(context.Context, *handoff.Message) error {
		if v.work > 0 {
			time.Sleep(v.work) // simulated handler work: the variant's load shape
		}
		if handled.Add(1) == int64(v.n) {
			close(all)
		}
		return nil
	}
	joined := make(chan time.Time, 1)
	cfg := Config{
		Brokers:   addrs,
		Group:     group,
		StatePath: filepath.Join(b.TempDir(), "state.db"),
		Logger: slog.New(tapHandler{b: b, fn: func(r slog.Record) {
			// kafka-go logs both, "partitions assigned" first; franz-go
			// only that one.
			if r.Message == "joined group generation" || r.Message == "partitions assigned" {
				select {
				case joined <- r.Time:
				default:
				}
			}
		}}),
	}
	for _, t := range v.topics {
		cfg.Classes = append(cfg.Classes, Class{Name: t, Topics: []string{t}, Handler: h, Workers: v.workers})
	}
	rt, err := newRuntime(cfg)
	if err != nil {
		b.Fatal(err)
	}
	type result struct {
		rep *Report
		err error
	}
	ran := make(chan result, 1)
	go func() {
		rep, err := rt.Run(context.Background())
		ran <- result{rep, err}
	}()

	var res e2eResult
	select {
	case <-all:
	case <-ctx.Done():
		rt.Close()
		b.Fatalf("runtime: handled %d of %d", handled.Load(), v.n)
	}
	handledAt := time.Now()
	var began time.Time
	select {
	case began = <-joined:
	default:
		b.Fatal("runtime: no generation join logged")
	}
	res.handled = float64(v.n) / handledAt.Sub(began).Seconds()
	// Polls the broker: the commit is the runtime's, on its own tick.
	for committedSum(b, addrs, group, v.topics) != int64(v.n) {
		if ctx.Err() != nil {
			rt.Close()
			b.Fatal("runtime: commit does not cover all messages")
		}
		time.Sleep(10 * time.Millisecond)
	}
	res.committed = float64(v.n) / time.Since(began).Seconds()
	res.commitLag = time.Since(handledAt)
	if err := rt.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
	r := <-ran
	if r.err != nil {
		b.Fatal(r.err)
	}
	if r.rep.Succeeded != uint64(v.n) {
		b.Fatalf("runtime: %d succeeded, want %d", r.rep.Succeeded, v.n)
	}
	return res
}

// committedSum sums the group's committed offsets: with topics that
// started empty, the number of committed messages.
func committedSum(b *testing.B, addrs []string, group string, topics []string) int64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tp := map[string]int{}
	for _, t := range topics {
		tp[t] = e2ePartitions
	}
	off, err := devbroker.Committed(ctx, addrs, group, tp)
	if err != nil {
		b.Fatal(err)
	}
	return devbroker.Sum(off)
}

func handledRates(rs []e2eResult) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = r.handled
	}
	return out
}

func commitLags(rs []e2eResult) []time.Duration {
	out := make([]time.Duration, len(rs))
	for i, r := range rs {
		out[i] = r.commitLag
	}
	return out
}

func median[T float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// tapHandler passes every Info-or-above record to fn and writes warnings
// and errors to the benchmark log. It keeps no attributes of With.
type tapHandler struct {
	b  *testing.B
	fn func(slog.Record)
}

func (h tapHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h tapHandler) Handle(_ context.Context, r slog.Record) error {
	if h.fn != nil {
		h.fn(r)
	}
	if r.Level >= slog.LevelWarn {
		msg := r.Message
		r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
		h.b.Logf("%s %s", r.Level, msg)
	}
	return nil
}

func (h tapHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h tapHandler) WithGroup(string) slog.Handler      { return h }

// BenchmarkRepush measures Run's recovery: opening a state file of 100k
// pending records of 1 KiB, loading them and pushing each into its pool.
// The rate is Report.Repushed over the "took" of the "recovery finished"
// log, timed inside Run from before the state file is opened. The class's
// queue holds all of them, so the push never waits for the no-op handler.
func BenchmarkRepush(b *testing.B) {
	const n = 100_000
	dir := b.TempDir()
	golden := filepath.Join(dir, "golden.db")
	writePending(b, golden, n)
	if fi, err := os.Stat(golden); err == nil {
		b.Logf("state file: %d records, %.1f MiB", n, float64(fi.Size())/(1<<20))
	}

	// A real start finds the state file on disk: the shutdown that wrote
	// it synced it. The copy is synced untimed, or the first commit of
	// Run (snapshot.Open's) would pay for writing all of it out, some
	// 75ms that are no part of the recovery.
	syncFile := func(path string) {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}

	var repushed int
	var took time.Duration
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		path := filepath.Join(dir, "state.db")
		copyFile(b, golden, path)
		syncFile(path)
		b.StartTimer()

		var handled atomic.Int64
		recovered := make(chan time.Duration, 1)
		rt, err := newRuntime(Config{
			StatePath: path,
			Classes: []Class{{Name: "local", QueueSize: 200_000, Handler: func(context.Context, *handoff.Message) error {
				handled.Add(1)
				return nil
			}}},
			Logger: slog.New(tapHandler{b: b, fn: func(r slog.Record) {
				if r.Message != "recovery finished" {
					return
				}
				r.Attrs(func(a slog.Attr) bool {
					if a.Key == "took" {
						recovered <- a.Value.Duration()
						return false
					}
					return true
				})
			}}),
		})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
		type result struct {
			rep *Report
			err error
		}
		ran := make(chan result, 1)
		go func() {
			rep, err := rt.Run(context.Background())
			ran <- result{rep, err}
		}()
		select {
		case d := <-recovered:
			took += d
		case <-ctx.Done():
			b.Fatal("recovery did not finish")
		}
		if err := rt.Shutdown(ctx); err != nil {
			b.Fatal(err)
		}
		r := <-ran
		cancel()
		if r.err != nil {
			b.Fatal(r.err)
		}
		if r.rep.Repushed != n || r.rep.Succeeded != n || handled.Load() != n {
			b.Fatalf("repushed %d, succeeded %d, handled %d; want %d", r.rep.Repushed, r.rep.Succeeded, handled.Load(), n)
		}
		repushed += r.rep.Repushed
		b.StopTimer()
		if err := os.Remove(path); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(repushed)/took.Seconds(), "msgs/s")
	b.ReportMetric(float64(took.Milliseconds())/float64(b.N), "recovery_ms/op")
}

// writePending writes a state file holding n pending records of 1 KiB
// values for class "local".
func writePending(b testing.TB, path string, n int) {
	b.Helper()
	value := make([]byte, 1024)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	now := time.Now()
	const chunk = 10_000
	recs := make([]snapshot.Record, 0, chunk)
	for i := range n {
		recs = append(recs, snapshot.Record{
			Message: handoff.Message{
				ID:        "local-" + strconv.Itoa(i),
				Class:     "local",
				Key:       strconv.AppendInt([]byte("key-"), int64(i%1024), 10),
				Value:     value,
				FirstSeen: now,
			},
			Reason:  "unstarted",
			SavedAt: now,
		})
		if len(recs) == chunk || i == n-1 {
			snapshottest.SeedPending(b, path, recs...)
			recs = recs[:0]
		}
	}
}

func copyFile(b *testing.B, from, to string) {
	b.Helper()
	src, err := os.Open(from)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		b.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkTracker measures one fetched offset through the tracker: add
// (or put, published a batch at a time) on fetch, settle when done. Sub-benchmarks vary the completion order;
// commitPoint is what the keeper asks each CommitInterval.
func BenchmarkTracker(b *testing.B) {
	b.Run("in-order", func(b *testing.B) {
		tr := newTracker("t", 0, 0)
		b.ReportAllocs()
		var off int64
		for b.Loop() {
			tr.settle(tr.add(off, 0))
			if off++; off%4096 == 0 {
				tr.commitPoint() // as the keeper does: frees settled segments
			}
		}
	})

	// As the fetch loop adds: batches of 64 put, then published once.
	b.Run("in-order-put-64", func(b *testing.B) {
		tr := newTracker("t", 0, 0)
		b.ReportAllocs()
		var off int64
		var batch [64]slot
		k := 0
		for b.Loop() {
			batch[k] = tr.put(off, 0)
			if k++; k == len(batch) {
				tr.publish()
				for _, sl := range batch {
					tr.settle(sl)
				}
				k = 0
			}
			if off++; off%4096 == 0 {
				tr.commitPoint()
			}
		}
	})

	// Out of order: 64 messages in flight, one random of them settles per
	// add, as with 64 workers of uneven handler times.
	b.Run("out-of-order-64", func(b *testing.B) {
		benchOutOfOrder(b, 64, 0)
	})
	b.Run("out-of-order-1024", func(b *testing.B) {
		benchOutOfOrder(b, 1024, 0)
	})
	// A slow message: every 50,000 offsets one stays in flight for the
	// next 50,000, so the unsettled window grows and is compacted.
	b.Run("out-of-order-64-slow-head", func(b *testing.B) {
		benchOutOfOrder(b, 64, 50_000)
	})

	b.Run("commitPoint", func(b *testing.B) {
		tr := newTracker("t", 0, 0)
		for i := range int64(10_000) {
			seq := tr.add(i, 0)
			if i%3 != 0 {
				tr.settle(seq)
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			tr.commitPoint()
		}
	})

	// Concurrent: one fetcher adds while GOMAXPROCS settlers settle, with
	// the keeper's commitPoint every 1024 settles.
	b.Run("concurrent", func(b *testing.B) {
		tr := newTracker("t", 0, 0)
		var mu sync.Mutex
		var off int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				mu.Lock()
				seq := tr.add(off, 0)
				off++
				mu.Unlock()
				tr.settle(seq)
				if i++; i%1024 == 0 {
					tr.commitPoint()
				}
			}
		})
	})
}

// benchOutOfOrder keeps window offsets in flight and settles a random one
// per add. With slowEvery > 0, every slowEvery-th offset is held back for
// the next slowEvery adds.
func benchOutOfOrder(b *testing.B, window, slowEvery int) {
	tr := newTracker("t", 0, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	inflight := make([]slot, 0, window)
	var off int64
	var slow slot
	haveSlow := false
	b.ReportAllocs()
	for b.Loop() {
		seq := tr.add(off, 0)
		if slowEvery > 0 && off%int64(slowEvery) == 0 {
			if haveSlow {
				tr.settle(slow)
			}
			slow, haveSlow = seq, true
		} else {
			inflight = append(inflight, seq)
		}
		off++
		if len(inflight) == window {
			i := rng.IntN(window)
			tr.settle(inflight[i])
			inflight[i] = inflight[window-1]
			inflight = inflight[:window-1]
		}
	}
	b.StopTimer()
	for _, seq := range inflight {
		tr.settle(seq)
	}
	if haveSlow {
		tr.settle(slow)
	}
	if cp, _ := tr.commitPoint(); cp != off {
		b.Fatalf("commit point %d after settling all of %d offsets", cp, off)
	}
}
