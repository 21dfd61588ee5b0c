package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
)

// BenchmarkShareClass compares a share class (Class.ShareGroup) with a
// consumer-group class and with raw franz-go share consumption (one
// PollRecords loop, each poll auto-accepting the last), on the same
// records of one embedded broker, franz-go only:
//
//	HANDOFF_TEST_CLIENT=franz-go go test -run='^$' -bench=ShareClass -benchtime=1x ./runtime/
//
// noop: 100,000 records on 4 partitions, one member, a no-op handler.
// members6: 12,000 records on 2 partitions, six members, a 1ms handler
// (16 workers each): more members than partitions, where the consumer
// group's extra members sit idle.
//
// Each side reads every record with a group of its own; the figures are
// the medians of the rounds (-benchtime=3x for three). The rate runs
// from the start to the last record handled (the join included), the CPU
// is the process's (user + system, the embedded broker's included: the
// same broker serves both sides) over the records. Figures only: the
// benchmark checks counts.
func BenchmarkShareClass(b *testing.B) {
	shareOnly(b)
	type variant struct {
		name       string
		partitions int
		n, members int
		work       time.Duration
	}
	for _, v := range []variant{{"noop", 4, 100_000, 1, 0}, {"members6", 2, 12_000, 6, time.Millisecond}} {
		b.Run(v.name, func(b *testing.B) {
			topic := "share-bench-" + v.name
			broker, err := devbroker.Start(devbroker.Config{Topics: []string{topic}, Partitions: v.partitions})
			if err != nil {
				b.Fatal(err)
			}
			defer broker.Close()
			produceBench(b, broker.Addrs(), []string{topic}, v.n)
			round := 0
			rates, cpus := map[string][]float64{}, map[string][]float64{}
			for b.Loop() {
				round++
				for _, side := range []string{"group", "share", "raw-share"} {
					if side == "raw-share" && v.members > 1 {
						continue
					}
					group := fmt.Sprintf("%s-%s-%d", side, v.name, round)
					var rate float64
					var cpu time.Duration
					if side == "raw-share" {
						rate, cpu = benchRawShare(b, broker.Addrs(), group, topic, v.n)
					} else {
						rate, cpu = benchClass(b, broker.Addrs(), group, topic, v.n, v.members, v.work, side == "share")
					}
					b.Logf("%s %s: %.0f msgs/s, %.2f µs CPU/msg", v.name, side, rate, float64(cpu.Nanoseconds())/1000)
					rates[side] = append(rates[side], rate)
					cpus[side] = append(cpus[side], float64(cpu.Nanoseconds())/1000)
				}
			}
			for side := range rates {
				b.ReportMetric(median(rates[side]), side+"_msgs/s")
				b.ReportMetric(median(cpus[side]), side+"_cpu_µs/msg")
			}
		})
	}
}

// cpuNow returns the process's user + system CPU time so far.
func cpuNow(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchClass runs members runtimes with one class on topic (a share
// class when share is set) until n records are handled, and returns the
// rate and the CPU per record.
func benchClass(b *testing.B, addrs []string, group, topic string, n, members int, work time.Duration, share bool) (float64, time.Duration) {
	var handled atomic.Int64
	all := make(chan struct{})
	h := func(context.Context, *handoff.Message) error {
		if work > 0 {
			time.Sleep(work) // the simulated work
		}
		if handled.Add(1) == int64(n) {
			close(all)
		}
		return nil
	}
	var rts []*Runtime
	var waits []chan error
	began, cpu0 := time.Now(), cpuNow(b)
	for i := range members {
		c := Class{Name: "c", Topics: []string{topic}, Handler: h, Workers: 16}
		if share {
			c.ShareGroup = group + ".c"
		}
		rt, err := newRuntime(Config{Brokers: addrs, Group: group, Instance: fmt.Sprintf("m%d", i), Client: ClientFranzGo,
			StatePath: filepath.Join(b.TempDir(), "state.db"), LocalStateOnly: true, Logger: slog.New(slog.DiscardHandler),
			Classes: []Class{c}})
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := rt.Run(context.Background()); done <- err }()
		rts, waits = append(rts, rt), append(waits, done)
	}
	select {
	case <-all:
	case <-time.After(e2eTimeout):
		b.Fatalf("%s: %d of %d handled", group, handled.Load(), n)
	}
	elapsed, cpu := time.Since(began), cpuNow(b)-cpu0
	for i, rt := range rts {
		rt.Shutdown(context.Background())
		if err := <-waits[i]; err != nil {
			b.Fatal(err)
		}
	}
	if got := handled.Load(); got != int64(n) {
		b.Fatalf("%s: handled %d times, want %d", group, got, n)
	}
	return float64(n) / elapsed.Seconds(), cpu / time.Duration(n)
}

// benchRawShare reads n records of topic with a bare franz-go share
// consumer: PollRecords in a loop, each poll auto-accepting the last's.
func benchRawShare(b *testing.B, addrs []string, group, topic string, n int) (float64, time.Duration) {
	began, cpu0 := time.Now(), cpuNow(b)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	setEarliest(b, cl, group)
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	defer cancel()
	got := 0
	for got < n {
		fs := cl.PollRecords(ctx, -1)
		if ctx.Err() != nil {
			b.Fatalf("raw share: %d of %d", got, n)
		}
		got += fs.NumRecords()
	}
	return float64(n) / time.Since(began).Seconds(), (cpuNow(b) - cpu0) / time.Duration(n)
}

// setEarliest sets share group group's share.auto.offset.reset to
// earliest, as the runtime's start does.
func setEarliest(b *testing.B, cl *kgo.Client, group string) {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op, c.Value = "share.auto.offset.reset", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("earliest")
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(context.Background(), cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	if err != nil {
		b.Fatal(err)
	}
}
