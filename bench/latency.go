package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alitto/pond/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/internal/rawkafka"
	hrt "github.com/handoff-go/handoff/runtime"
)

// The latency measure: a producer in this process sends at a steady rate
// (a fraction of the worker ceiling) for a while, each value carrying the
// wall-clock time it was handed to the producer; each stack's handler
// notes now − that time as it starts, then sleeps the work. The stacks
// read the same way: one class (or one pool) of the same workers and
// queue, the same fetch settings, a fresh topic and group each.

// latCfg is the latency measure's settings.
type latCfg struct {
	partitions int
	workers    int
	work       time.Duration
	loads      []float64     // of the ceiling
	run        time.Duration // producing time per stack, load and round
	warm       time.Duration // the first part of run, not counted
	rounds     int           // each stack at each load; the samples of all rounds are pooled
	franz      franzFetch    // raw franz-go's fetch settings; zero: defaultFranzFetch
}

// latStack is one stack under the latency measure.
type latStack struct {
	key, name string
	// start joins the group on topic and returns once it consumes; stop
	// ends it.
	start func(ctx context.Context, l latRun) (stop func() error, err error)
}

// latRun is one stack at one load.
type latRun struct {
	br      *broker
	topic   string
	group   string
	workers int
	work    time.Duration
	// expect bounds the offsets of the topic's partitions (raw kafka-go
	// tracks done offsets in arrays).
	expect int
	rec    *latRec
	franz  franzFetch // raw franz-go's fetch settings; zero: defaultFranzFetch
}

var latStacks = []latStack{
	{runtimeFranzGo, "runtime on franz-go", latRuntime(hrt.ClientFranzGo)},
	{rawFranzGo, "raw franz-go + pond", latRawFranz},
	{runtimeKafkaGo, "runtime on kafka-go", latRuntime(hrt.ClientKafkaGo)},
	{rawKafkaGo, "raw kafka-go + pond", latRawKafka},
}

// latRec collects handler-start latencies of the messages sent from
// `from` on.
type latRec struct {
	from    int64 // unix ns
	handled atomic.Int64
	mu      sync.Mutex
	lat     []time.Duration
}

// started notes the latency of the message whose value is v.
func (r *latRec) started(v []byte) {
	now := time.Now().UnixNano()
	r.handled.Add(1)
	if len(v) < 8 {
		return
	}
	sent := int64(binary.BigEndian.Uint64(v))
	if sent < r.from {
		return
	}
	r.mu.Lock()
	r.lat = append(r.lat, time.Duration(now-sent))
	r.mu.Unlock()
}

// quantiles returns the qs of ds (sorted in place), zero when empty.
func quantiles(ds []time.Duration, qs ...float64) []time.Duration {
	out := make([]time.Duration, len(qs))
	if len(ds) == 0 {
		return out
	}
	slices.Sort(ds)
	for i, q := range qs {
		k := int(q * float64(len(ds)))
		out[i] = ds[min(k, len(ds)-1)]
	}
	return out
}

// latFig is one stack's latencies at one load.
type latFig struct {
	n              int
	p50, p99, p999 time.Duration
}

// latResult is the latency measure's table.
type latResult struct {
	cfg     latCfg
	slept   time.Duration // the measured time.Sleep(work)
	ceiling float64       // workers ÷ slept, msgs/s
	by      map[string][]latFig
}

// runLatency measures each stack at each load of cfg, on a broker of its
// own: at each load the stacks take turns, each on a fresh topic.
func runLatency(ctx context.Context, cfg latCfg, franz franzFetch, log io.Writer) (latResult, error) {
	cfg.franz = franz
	res := latResult{cfg: cfg, by: map[string][]latFig{}}
	res.slept = sleepTime(cfg.work)
	res.ceiling = float64(cfg.workers) / res.slept.Seconds()
	topic := func(r, li int, key string) string { return fmt.Sprintf("lat-%d-%d-%s", r, li, key) }
	var topics []string
	for r := range cfg.rounds {
		for li := range cfg.loads {
			for _, st := range latStacks {
				topics = append(topics, topic(r, li, st.key))
			}
		}
	}
	br, err := startBroker(topics, cfg.partitions)
	if err != nil {
		return res, err
	}
	defer br.close()
	// samples[li][key] pools the rounds' latencies.
	samples := make([]map[string][]time.Duration, len(cfg.loads))
	for li := range samples {
		samples[li] = map[string][]time.Duration{}
	}
	for r := range cfg.rounds {
		for li, load := range cfg.loads {
			rate := load * res.ceiling
			for k := range latStacks {
				st := latStacks[(k+li+r)%len(latStacks)] // each goes first in turn
				lat, err := latOne(ctx, br, st, topic(r, li, st.key), rate, cfg)
				if err != nil {
					return res, fmt.Errorf("latency, %s at %.0f%%: %w", st.name, load*100, err)
				}
				samples[li][st.key] = append(samples[li][st.key], lat...)
				q := quantiles(lat, 0.50, 0.99, 0.999)
				fmt.Fprintf(log, "latency round %d %3.0f%% (%.0f msgs/s) %-22s p50 %s p99 %s p99.9 %s (%d messages)\n",
					r, load*100, rate, st.name, q[0].Round(10*time.Microsecond), q[1].Round(10*time.Microsecond), q[2].Round(10*time.Microsecond), len(lat))
			}
		}
	}
	for li := range cfg.loads {
		for _, st := range latStacks {
			lat := samples[li][st.key]
			q := quantiles(lat, 0.50, 0.99, 0.999)
			res.by[st.key] = append(res.by[st.key], latFig{n: len(lat), p50: q[0], p99: q[1], p999: q[2]})
		}
	}
	return res, nil
}

// latOne runs one stack at rate msgs/s on topic and returns the
// latencies counted.
func latOne(ctx context.Context, br *broker, st latStack, topic string, rate float64, cfg latCfg) ([]time.Duration, error) {
	groups++
	total := int(rate*cfg.run.Seconds()) + 1
	rec := &latRec{}
	l := latRun{br: br, topic: topic, group: fmt.Sprintf("lat-%d-%d", os.Getpid(), groups), workers: cfg.workers, work: cfg.work,
		expect: total + 1000, rec: rec, franz: cfg.franz}
	stop, err := st.start(ctx, l)
	if err != nil {
		return nil, err
	}
	rec.from = time.Now().Add(cfg.warm).UnixNano()
	sent, perr := produceAt(ctx, br.addr, topic, rate, cfg.run)
	if perr == nil {
		// Every message sent is handled before the stack stops.
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		perr = waitFor(wctx, 5*time.Millisecond, func() bool { return rec.handled.Load() >= int64(sent) })
		cancel()
		if perr != nil {
			perr = fmt.Errorf("handled %d of %d sent: %w", rec.handled.Load(), sent, perr)
		}
	}
	if err := stop(); perr == nil {
		perr = err
	}
	if perr != nil {
		return nil, perr
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.lat, nil
}

// produceAt sends to topic's partitions in turn at rate msgs/s for d,
// each 256-byte value starting with the big-endian unix ns it was handed
// to the producer, and returns how many it sent (all acknowledged).
func produceAt(ctx context.Context, addr, topic string, rate float64, d time.Duration) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		return 0, fmt.Errorf("producer: %w", err)
	}
	defer cl.Close()
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	began := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent := 0
	for {
		el := time.Since(began)
		if el >= d {
			break
		}
		for due := int(rate * el.Seconds()); sent < due; sent++ {
			v := make([]byte, valueSize)
			binary.BigEndian.PutUint64(v, uint64(time.Now().UnixNano()))
			wg.Add(1)
			cl.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
				wg.Done()
			})
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return sent, ctx.Err()
		case <-tick.C:
		}
	}
	wg.Wait()
	if e := failed.Load(); e != nil {
		return sent, fmt.Errorf("produce: %w", *e)
	}
	return sent, nil
}

// latRuntime is the runtime on client: one class of l.workers workers
// (its default queue) on l.topic.
func latRuntime(client hrt.Client) func(context.Context, latRun) (func() error, error) {
	return func(ctx context.Context, l latRun) (func() error, error) {
		dir, err := os.MkdirTemp("", "handoff-bench-lat-")
		if err != nil {
			return nil, err
		}
		rt, err := hrt.New(hrt.Config{
			Brokers: []string{l.br.addr}, Group: l.group, Client: client,
			StatePath: filepath.Join(dir, "state.db"), CommitInterval: time.Second, Logger: slogWarn(),
			Classes: []hrt.Class{{Name: "lat", Topics: []string{l.topic}, Workers: l.workers,
				Handler: func(_ context.Context, m *handoff.Message) error {
					l.rec.started(m.Value)
					time.Sleep(l.work)
					return nil
				}}},
		})
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		ran := runInBackground(rt)
		stop := func() error {
			err := rt.Shutdown(ctx)
			if r := <-ran; err == nil {
				err = r.err
			}
			os.RemoveAll(dir)
			return err
		}
		if err := waitFor(ctx, time.Millisecond, rt.Ready); err != nil {
			rt.Close()
			<-ran
			os.RemoveAll(dir)
			return nil, err
		}
		return stop, nil
	}
}

// latRawKafka is raw kafka-go (internal/rawkafka): a reader per
// partition, a pond pool of l.workers workers and the runtime's default
// queue, the runtime's fetch wait and commit interval.
func latRawKafka(ctx context.Context, l latRun) (func() error, error) {
	c, err := rawkafka.Start(ctx, rawkafka.Config{
		Brokers: []string{l.br.addr}, Group: l.group, Topics: []string{l.topic}, Partitions: l.br.partitions, N: l.expect,
		Work: l.work, Workers: l.workers, QueueSize: hrt.DefaultQueueFactor * l.workers,
		CommitInterval: time.Second, SessionTimeout: hrt.DefaultSessionTimeout, FetchMaxWait: hrt.DefaultFetchMaxWait,
		QueueCapacity: hrt.DefaultFetchQueue, Started: l.rec.started,
		Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
	})
	if err != nil {
		return nil, err
	}
	return c.Close, nil
}

// latRawFranz is raw franz-go: one client in the group with l.franz's
// fetch settings (the runtime's franz-go ones by default), a PollFetches
// loop handing each record to a pond pool of l.workers workers and the
// runtime's default queue, and autocommit of the records marked done.
func latRawFranz(ctx context.Context, l latRun) (func() error, error) {
	f := l.franz
	if f == (franzFetch{}) {
		f = defaultFranzFetch
	}
	assigned := make(chan struct{}, 1)
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(l.br.addr),
		kgo.ConsumerGroup(l.group),
		kgo.ConsumeTopics(l.topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(hrt.DefaultSessionTimeout),
		kgo.HeartbeatInterval(hrt.DefaultHeartbeatInterval),
		kgo.FetchMaxBytes(f.maxBytes),
		kgo.FetchMaxPartitionBytes(f.maxPartitionBytes),
		kgo.FetchMaxWait(f.maxWait),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			select {
			case assigned <- struct{}{}:
			default:
			}
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("raw franz-go: client: %w", err)
	}
	workers := pond.NewPool(l.workers, pond.WithQueueSize(hrt.DefaultQueueFactor*l.workers))
	pollCtx, stopPoll := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			fs := cl.PollFetches(pollCtx)
			if fs.IsClientClosed() || pollCtx.Err() != nil {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				_ = workers.Go(func() {
					l.rec.started(r.Value)
					time.Sleep(l.work)
					cl.MarkCommitRecords(r)
				})
			})
		}
	})
	stop := func() error {
		stopPoll()
		wg.Wait()
		workers.StopAndWait()
		cl.Close() // commits the marks and leaves the group
		return nil
	}
	select {
	case <-assigned:
		return stop, nil
	case <-ctx.Done():
		_ = stop()
		return nil, fmt.Errorf("raw franz-go: join: %w", ctx.Err())
	}
}

// printLatency writes the latency table.
func printLatency(w io.Writer, r latResult, franz franzFetch) {
	fmt.Fprintf(w, "One topic of %d partitions, %d-byte values, produced in this process at a steady rate; one class (or pond pool) of %d workers, queue %d, handler `time.Sleep(%s)` (measured %s: a worker ceiling of %.0f msgs/s); %s counted per stack, load and round after %s of warm-up, %d rounds (the stacks taking turns to go first), the rounds' samples pooled. Latency is from the producer's call to the handler's start. Raw franz-go has the runtime's franz-go fetch settings (%s), raw kafka-go its reader queue (%d) and fetch wait. The ceiling is timed alone before the rounds: while the stacks and the producer run, a sleep on this loaded machine takes longer, so 90%% may be at or past the real capacity and its latency that of a queue.\n\n",
		r.cfg.partitions, valueSize, r.cfg.workers, hrt.DefaultQueueFactor*r.cfg.workers, r.cfg.work, r.slept.Round(time.Microsecond), r.ceiling,
		r.cfg.run-r.cfg.warm, r.cfg.warm, r.cfg.rounds, franz, hrt.DefaultFetchQueue)
	fmt.Fprintln(w, "| load | stack | messages | p50 | p99 | p99.9 |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: |")
	for li, load := range r.cfg.loads {
		for _, st := range latStacks {
			figs := r.by[st.key]
			if li >= len(figs) {
				continue
			}
			f := figs[li]
			fmt.Fprintf(w, "| %.0f%% (%.0f msgs/s) | %s | %d | %s | %s | %s |\n", load*100, load*r.ceiling, st.name, f.n,
				ms(f.p50), ms(f.p99), ms(f.p999))
		}
	}
	if figs, raw := r.by[runtimeFranzGo], r.by[rawFranzGo]; len(figs) > 0 && len(raw) > 0 {
		d := figs[0].p99 - raw[0].p99
		verdict := "met"
		if d > time.Millisecond {
			verdict = "not met"
		}
		fmt.Fprintf(w, "\nGoal: the runtime's p99 at %.0f%% load ≤ raw franz-go's + 1 ms: %s − %s = %s, %s.\n",
			r.cfg.loads[0]*100, ms(figs[0].p99), ms(raw[0].p99), ms(d), verdict)
	}
}

// ms writes d in milliseconds with two decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
