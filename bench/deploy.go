package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/handoff-go/handoff"
	hrt "github.com/handoff-go/handoff/runtime"
)

// The deploy gap: instances of one service in a group under a steady
// load, then a rolling restart, each instance replaced by a new one on
// an empty disk (its partitions' state comes from the changelog). What a
// deploy costs is read from each message's handler start: per partition,
// the longest time none of its messages started, and the latency during
// the rollout against before it. With the class loaded past its
// capacity, every stop saves a backlog that the partition's next owner
// restores and re-pushes.

// deployCfg is one deploy measure's settings.
type deployCfg struct {
	name       string
	partitions int
	instances  int
	workers    int // of the class, per instance
	work       time.Duration
	load       float64       // of the group's worker ceiling
	before     time.Duration // steady load before the rollout
	settle     time.Duration // after each new instance is ready, and after the rollout
	warm       time.Duration // the first part of before, not counted
	drain      time.Duration // the runtime's DrainTimeout
	down       time.Duration // between a stop and its replacement's start
	heartbeat  time.Duration // the runtime's HeartbeatInterval (zero: its default)
}

// deployRec is every handled message: its partition, when it was sent
// and when its handler started (unix ns).
type deployRec struct {
	handled atomic.Int64
	mu      sync.Mutex
	ps      []int32
	sent    []int64
	start   []int64
}

func (r *deployRec) started(m *handoff.Message) {
	now := time.Now().UnixNano()
	r.handled.Add(1)
	if len(m.Value) < 8 {
		return
	}
	r.mu.Lock()
	r.ps = append(r.ps, int32(m.Origin.Partition))
	r.sent = append(r.sent, int64(binary.BigEndian.Uint64(m.Value)))
	r.start = append(r.start, now)
	r.mu.Unlock()
}

// restoreLog collects the runtime's "partition state restored" records
// (how long each restore took, how many saved records it re-pushed) and
// writes warnings to stderr, as warnHandler does.
type restoreLog struct {
	mu       sync.Mutex
	restores []restoreFig
}

type restoreFig struct {
	at       time.Time
	took     time.Duration
	repushed int64
}

func (h *restoreLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *restoreLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "partition state restored" {
		f := restoreFig{at: r.Time}
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "took":
				f.took = a.Value.Duration()
			case "repushed":
				f.repushed = a.Value.Int64()
			}
			return true
		})
		h.mu.Lock()
		h.restores = append(h.restores, f)
		h.mu.Unlock()
	}
	return warnHandler{}.Handle(ctx, r)
}

func (h *restoreLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *restoreLog) WithGroup(string) slog.Handler      { return h }

// slogWarn is a logger that writes warnings and errors to stderr.
func slogWarn() *slog.Logger { return slog.New(warnHandler{}) }

// deployFig is what one deploy measure found.
type deployFig struct {
	cfg           deployCfg
	rate, ceiling float64
	sent, handled int
	// gaps is, per partition, the longest time during the rollout in
	// which none of its messages started; gapBefore the longest before.
	gaps      []time.Duration
	gapBefore time.Duration
	// p50/p99 latency before the rollout and during it.
	before, during [2]time.Duration
	nb, nd         int
	stops          []time.Duration // each instance's Shutdown
	saved          []int           // each stop's Snapshotted
	readies        []time.Duration // each new instance's start to Ready
	restores       []restoreFig    // during the rollout
	rollout        time.Duration
}

// deployInstance is one running instance.
type deployInstance struct {
	rt  *hrt.Runtime
	ran <-chan runResult
	dir string
}

// runDeploy runs one deploy measure on a broker of its own.
func runDeploy(ctx context.Context, cfg deployCfg, log io.Writer) (deployFig, error) {
	fig := deployFig{cfg: cfg}
	const topic = "users"
	br, err := startBroker([]string{topic}, cfg.partitions)
	if err != nil {
		return fig, err
	}
	defer br.close()
	fig.ceiling = float64(cfg.instances*cfg.workers) / sleepTime(cfg.work).Seconds()
	fig.rate = cfg.load * fig.ceiling
	rec := &deployRec{}
	logs := &restoreLog{}
	groups++
	group := fmt.Sprintf("deploy-%d-%d", os.Getpid(), groups)
	start := func() (*deployInstance, error) {
		dir, err := os.MkdirTemp("", "handoff-bench-deploy-")
		if err != nil {
			return nil, err
		}
		rt, err := hrt.New(hrt.Config{
			Brokers: []string{br.addr}, Group: group, StatePath: filepath.Join(dir, "state.db"),
			Logger: slog.New(logs), DrainTimeout: cfg.drain, HeartbeatInterval: cfg.heartbeat,
			Classes: []hrt.Class{{Name: "users", Topics: []string{topic}, Workers: cfg.workers,
				Handler: func(_ context.Context, m *handoff.Message) error {
					rec.started(m)
					time.Sleep(cfg.work)
					return nil
				}}},
		})
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		return &deployInstance{rt: rt, ran: runInBackground(rt), dir: dir}, nil
	}
	stop := func(in *deployInstance) (*hrt.Report, error) {
		err := in.rt.Shutdown(ctx)
		r := <-in.ran
		os.RemoveAll(in.dir)
		if err == nil {
			err = r.err
		}
		return r.rep, err
	}
	var insts []*deployInstance
	defer func() {
		for _, in := range insts {
			if in == nil {
				continue
			}
			in.rt.Close()
			<-in.ran
			os.RemoveAll(in.dir)
		}
	}()
	for range cfg.instances {
		in, err := start()
		if err != nil {
			return fig, err
		}
		insts = append(insts, in)
	}
	for _, in := range insts {
		if err := waitFor(ctx, 5*time.Millisecond, in.rt.Ready); err != nil {
			return fig, err
		}
	}
	// Ready is each instance's own assignment; the group settles when
	// every partition has a message started.
	prodCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	var sent atomic.Int64
	var prodErr error
	var producing sync.WaitGroup
	producing.Go(func() { prodErr = produceUntil(prodCtx, br.addr, topic, fig.rate, &sent) })
	began := time.Now()
	time.Sleep(cfg.before)
	rollStart := time.Now()
	fmt.Fprintf(log, "deploy %s: %.0f msgs/s (%.0f%% of %.0f), %d handled before the rollout\n", cfg.name, fig.rate, cfg.load*100, fig.ceiling, rec.handled.Load())
	for i := range insts {
		at := time.Now()
		rep, err := stop(insts[i])
		insts[i] = nil
		fig.stops = append(fig.stops, time.Since(at))
		if err != nil {
			insts = slices.DeleteFunc(insts, func(in *deployInstance) bool { return in == nil })
			return fig, fmt.Errorf("stop instance %d: %w", i, err)
		}
		fig.saved = append(fig.saved, rep.Snapshotted)
		time.Sleep(cfg.down) // the survivors own its partitions meanwhile
		at = time.Now()
		in, err := start()
		if err != nil {
			insts = slices.DeleteFunc(insts, func(in *deployInstance) bool { return in == nil })
			return fig, err
		}
		insts[i] = in
		if err := waitFor(ctx, 5*time.Millisecond, in.rt.Ready); err != nil {
			return fig, err
		}
		fig.readies = append(fig.readies, time.Since(at))
		fmt.Fprintf(log, "deploy %s: instance %d replaced: stop %s (saved %d), new one ready after %s\n", cfg.name, i,
			fig.stops[i].Round(time.Millisecond), rep.Snapshotted, fig.readies[i].Round(time.Millisecond))
		time.Sleep(cfg.settle)
	}
	rollEnd := time.Now()
	fig.rollout = rollEnd.Sub(rollStart)
	stopProducing()
	producing.Wait()
	if prodErr != nil {
		return fig, prodErr
	}
	fig.sent = int(sent.Load())
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = waitFor(wctx, 10*time.Millisecond, func() bool { return rec.handled.Load() >= sent.Load() })
	cancel()
	fig.handled = int(rec.handled.Load())
	if err != nil {
		return fig, fmt.Errorf("deploy %s: handled %d of %d sent: %w", cfg.name, fig.handled, fig.sent, err)
	}
	for i, in := range insts {
		if _, err := stop(in); err != nil {
			return fig, fmt.Errorf("final stop of instance %d: %w", i, err)
		}
		insts[i] = nil
	}
	insts = nil

	rec.mu.Lock()
	defer rec.mu.Unlock()
	from, rs, re := began.Add(cfg.warm).UnixNano(), rollStart.UnixNano(), rollEnd.UnixNano()
	var lb, ld []time.Duration
	byPart := make([][]int64, cfg.partitions)
	for i, st := range rec.start {
		if p := rec.ps[i]; int(p) < cfg.partitions {
			byPart[p] = append(byPart[p], st)
		}
		switch {
		case st >= from && st < rs:
			lb = append(lb, time.Duration(st-rec.sent[i]))
		case st >= rs && st < re:
			ld = append(ld, time.Duration(st-rec.sent[i]))
		}
	}
	fig.nb, fig.nd = len(lb), len(ld)
	q := quantiles(lb, 0.5, 0.99)
	fig.before = [2]time.Duration{q[0], q[1]}
	q = quantiles(ld, 0.5, 0.99)
	fig.during = [2]time.Duration{q[0], q[1]}
	for _, starts := range byPart {
		slices.Sort(starts)
		fig.gaps = append(fig.gaps, longestGap(starts, rs, re))
		fig.gapBefore = max(fig.gapBefore, longestGap(starts, from, rs))
	}
	logs.mu.Lock()
	for _, r := range logs.restores {
		if !r.at.Before(rollStart) && !r.at.After(rollEnd) {
			fig.restores = append(fig.restores, r)
		}
	}
	logs.mu.Unlock()
	return fig, nil
}

// longestGap is the longest time within [from, to) in which no start of
// sorted starts falls (the edges count as starts when none is nearer).
func longestGap(starts []int64, from, to int64) time.Duration {
	prev, gap := from, int64(0)
	for _, s := range starts {
		if s < from {
			continue
		}
		if s >= to {
			break
		}
		gap = max(gap, s-prev)
		prev = s
	}
	return time.Duration(max(gap, to-prev))
}

// produceUntil sends to topic's partitions in turn at rate msgs/s until
// ctx ends, each value starting with the big-endian unix ns it was handed
// to the producer, counting in sent those acknowledged. It returns nil
// when ctx ended and every record sent was acknowledged.
func produceUntil(ctx context.Context, addr, topic string, rate float64, sent *atomic.Int64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer cl.Close()
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	began := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	n := 0
	for ctx.Err() == nil {
		for due := int(rate * time.Since(began).Seconds()); n < due; n++ {
			v := make([]byte, valueSize)
			binary.BigEndian.PutUint64(v, uint64(time.Now().UnixNano()))
			wg.Add(1)
			// Not ctx: what is handed over is sent, so that sent counts
			// what the consumers must handle.
			cl.Produce(context.Background(), &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				} else {
					sent.Add(1)
				}
				wg.Done()
			})
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	wg.Wait()
	if e := failed.Load(); e != nil {
		return fmt.Errorf("produce: %w", *e)
	}
	return nil
}

// printDeploy writes the deploy measures.
func printDeploy(w io.Writer, figs []deployFig) {
	if len(figs) == 0 {
		return
	}
	c := figs[0].cfg
	hb := c.heartbeat
	if hb == 0 {
		hb = min(hrt.DefaultHeartbeatInterval, hrt.DefaultSessionTimeout/3)
	}
	fmt.Fprintf(w, "%d instances of the runtime (franz-go, HeartbeatInterval %s, otherwise default settings, state changelog on) in one group on one topic of %d partitions; one class of %d workers per instance (queue %d), handler `time.Sleep(%s)`, DrainTimeout %s (shorter than a full queue's work, so a stop past capacity saves a backlog). After %s of steady load, each instance in turn is shut down and, %s later (the survivors take its partitions and restore them), replaced by a new one on an empty disk; the next goes %s after the new one is ready. *Longest gap*: per partition, the longest time during the rollout in which none of its messages started (before the rollout, for comparison, the longest of all partitions). Latency from the producer's call to the handler's start, before the rollout (after %s of warm-up) and during it.\n\n",
		c.instances, hb, c.partitions, c.workers, hrt.DefaultQueueFactor*c.workers, c.work, c.drain, c.before, c.down, c.settle, c.warm)
	fmt.Fprintln(w, "| load | longest gap per partition (rollout) | longest gap before | p50 / p99 before | p50 / p99 during | p99 ratio | saved at each stop | stop took | new instance ready after | restores: count, longest, most re-pushed | sent / handled |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- | --- |")
	for _, f := range figs {
		var gaps, stops, readies, saved []string
		for _, g := range f.gaps {
			gaps = append(gaps, g.Round(time.Millisecond).String())
		}
		for i := range f.stops {
			stops = append(stops, f.stops[i].Round(time.Millisecond).String())
			saved = append(saved, fmt.Sprint(f.saved[i]))
		}
		for _, r := range f.readies {
			readies = append(readies, r.Round(time.Millisecond).String())
		}
		var longest time.Duration
		var most int64
		for _, r := range f.restores {
			longest, most = max(longest, r.took), max(most, r.repushed)
		}
		ratio := "–"
		if f.before[1] > 0 {
			ratio = fmt.Sprintf("%.1f×", float64(f.during[1])/float64(f.before[1]))
		}
		fmt.Fprintf(w, "| %s: %.0f msgs/s, %.0f%% of %.0f | %s | %s | %s / %s | %s / %s | %s | %s | %s | %s | %d, %s, %d | %d / %d |\n",
			f.cfg.name, f.rate, f.cfg.load*100, f.ceiling, strings.Join(gaps, ", "), f.gapBefore.Round(time.Millisecond),
			ms(f.before[0]), ms(f.before[1]), ms(f.during[0]), ms(f.during[1]), ratio,
			strings.Join(saved, ", "), strings.Join(stops, ", "), strings.Join(readies, ", "),
			len(f.restores), longest.Round(time.Millisecond), most, f.sent, f.handled)
	}
	fmt.Fprintf(w, "\nA partition of a stopped instance waits for its drain (the handlers running at the stop finish), the leave, and the group's rebalance: the stopped instance announces its leave in the changelog's meta topic and the survivors, watching it, join at once (without the announcement they would learn of it at their next heartbeat, HeartbeatInterval, %s here), then sync and restore. One that moves to a new instance keeps being handled until its owner revokes it, in the first of the two cooperative rebalances the join starts (the owners learn of the join at their next heartbeat, while still fetching); the owner announces the revocation once committed, and the new instance joins the second at once. So a moving partition's gap is its drain, a join and sync, its restore and its first fetch; the load's own longest gap (its messages' spacing) is in the column before.\n", hb)
	for _, f := range figs {
		verdict := "not met"
		if f.before[1] > 0 && f.during[1] <= 2*f.before[1] {
			verdict = "met"
		}
		var longest time.Duration
		for _, r := range f.restores {
			longest = max(longest, r.took)
		}
		fmt.Fprintf(w, "\nGoals, %s: p99 during the rollout ≤ 2× before it: %s; a restore's re-push takes milliseconds: the longest restore, re-push included, took %s.\n",
			f.cfg.name, verdict, longest.Round(time.Millisecond))
	}
}
