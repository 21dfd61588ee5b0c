package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	hrt "github.com/handoff-go/handoff/runtime"
)

// franzFetch is raw franz-go's fetch settings, in one place so they can be
// set equal to the runtime's franz-go client (flags -franz-fetch-max-bytes,
// -franz-fetch-max-partition-bytes, -franz-fetch-max-wait). kgo's own
// defaults are 50 MiB, 1 MiB and 5 s.
type franzFetch struct {
	maxBytes, maxPartitionBytes int32
	maxWait                     time.Duration
}

// defaultFranzFetch is what raw franz-go uses unless told otherwise, the
// runtime's franz-go client's settings (runtime/internal/kclient/franzgo.go:
// franzFetchMaxBytes, FetchMaxBytes, Config.FetchMaxWait's default): 3 MiB
// responses (kgo's default 50 MiB ran at about a fifth of the rate with
// 300 partitions on the embedded broker, issue 16), kgo's 1 MiB per
// partition, and the runtime's FetchMaxWait.
var defaultFranzFetch = franzFetch{maxBytes: 3 << 20, maxPartitionBytes: 1 << 20, maxWait: hrt.DefaultFetchMaxWait}

func (f franzFetch) String() string {
	return fmt.Sprintf("FetchMaxBytes %s, FetchMaxPartitionBytes %s, FetchMaxWait %s",
		mib(int64(f.maxBytes)), mib(int64(f.maxPartitionBytes)), f.maxWait)
}

// mib writes a byte count as MiB when it is a whole number of them.
func mib(b int64) string {
	if b >= 1<<20 && b%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", b>>20)
	}
	return fmt.Sprintf("%d B", b)
}

// runRawFranz consumes s's topics the way a service written directly on
// franz-go would: one kgo.Client in a consumer group (ConsumeTopics,
// the cooperative-sticky balancer, autocommit off), a PollFetches loop
// with a no-op per record (s.check when set), and ONE committer goroutine that commits every
// partition's next offset every s.commitInterval and once all n are
// handled, as raw kafka-go's does (internal/rawkafka). It calls m.end once
// the group's commit covers all n, then closes the client (which leaves
// the group). Only the no-op handler is supported.
func runRawFranz(ctx context.Context, s spec, m *meter) (timing, error) {
	var tm timing
	if s.work > 0 || s.callCost > 0 || s.msgCost > 0 {
		return tm, errors.New("raw franz-go: only the no-op handler")
	}
	topics := s.topics()
	// assigned gets the first assignment: when, and how many partitions.
	type assignment struct {
		at         time.Time
		partitions int
	}
	assigned := make(chan assignment, 1)
	cl, err := kgo.NewClient(append(rawFranzOpts(s),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, as map[string][]int32) {
			a := assignment{at: time.Now()}
			for _, ps := range as {
				a.partitions += len(ps)
			}
			select {
			case assigned <- a:
			default:
			}
		}))...,
	)
	if err != nil {
		return tm, fmt.Errorf("raw franz-go: client: %w", err)
	}
	closed := false
	closeClient := func() {
		if !closed {
			closed = true
			cl.Close()
		}
	}
	defer closeClient()

	// next[topic][partition] is the offset after the last record handled;
	// the poll loop stores, the committer loads.
	next := make(map[string][]atomic.Int64, len(topics))
	for _, t := range topics {
		next[t] = make([]atomic.Int64, s.br.partitions)
	}
	var handled int64
	var firstAt time.Time
	all := make(chan struct{})
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	var pollErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			fs := cl.PollFetches(pollCtx)
			if fs.IsClientClosed() || pollCtx.Err() != nil {
				return
			}
			for _, fe := range fs.Errors() {
				fmt.Fprintf(os.Stderr, "raw franz-go: fetch %s/%d: %v\n", fe.Topic, fe.Partition, fe.Err)
			}
			fs.EachPartition(func(p kgo.FetchTopicPartition) {
				if len(p.Records) == 0 {
					return
				}
				if handled == 0 {
					firstAt = time.Now()
				}
				for _, r := range p.Records {
					if s.check != nil {
						s.check(r.Value)
					}
					handled++ // the no-op handler
				}
				next[p.Topic][p.Partition].Store(p.Records[len(p.Records)-1].Offset + 1)
			})
			if handled >= int64(s.n) {
				if handled > int64(s.n) {
					pollErr = fmt.Errorf("raw franz-go: handled %d, more than the %d produced", handled, s.n)
				}
				tm.first, tm.handled = firstAt, time.Now()
				close(all)
				return
			}
		}
	})

	select {
	case a := <-assigned:
		if want := len(topics) * s.br.partitions; a.partitions != want {
			return tm, fmt.Errorf("raw franz-go: assigned %d partitions, want %d", a.partitions, want)
		}
		tm.began = a.at
	case <-ctx.Done():
		return tm, fmt.Errorf("raw franz-go: join: %w", ctx.Err())
	}

	committed := map[string][]int64{}
	for _, t := range topics {
		committed[t] = make([]int64, s.br.partitions)
	}
	commit := func() error {
		offsets := map[string]map[int32]kgo.EpochOffset{}
		for t, ps := range next {
			for p := range ps {
				if o := ps[p].Load(); o > committed[t][p] {
					if offsets[t] == nil {
						offsets[t] = map[int32]kgo.EpochOffset{}
					}
					offsets[t][int32(p)] = kgo.EpochOffset{Epoch: -1, Offset: o}
				}
			}
		}
		var cerr error
		cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			cerr = commitError(resp, err)
		})
		if cerr != nil {
			return cerr
		}
		for t, ps := range offsets {
			for p, eo := range ps {
				committed[t][p] = eo.Offset
			}
		}
		return nil
	}
	tick := time.NewTicker(s.commitInterval)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-tick.C:
			if err := commit(); err != nil {
				fmt.Fprintf(os.Stderr, "raw franz-go: commit: %v\n", err)
			}
		case <-all:
			done = true
		case <-ctx.Done():
			stopPoll()
			wg.Wait()
			return tm, fmt.Errorf("raw franz-go: handled %d of %d: %w", handled, s.n, ctx.Err())
		}
	}
	wg.Wait()
	m.handled()
	if pollErr != nil {
		return tm, pollErr
	}
	if err := commit(); err != nil {
		return tm, fmt.Errorf("raw franz-go: final commit: %w", err)
	}
	if tm.committed, err = s.br.waitCommitted(ctx, s.group, topics, s.n); err != nil {
		return tm, err
	}
	m.end()
	stopAt := time.Now()
	closeClient()
	tm.stop = time.Since(stopAt)
	return tm, nil
}

// commitError returns the commit's error, or the first partition's error
// code in its response.
func commitError(resp *kmsg.OffsetCommitResponse, err error) error {
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, err)
			}
		}
	}
	return nil
}

// rawFranzOpts are raw franz-go's client options for s: a consumer group
// on s's topics, cooperative-sticky, autocommit off, from the start, with
// s's fetch settings (defaultFranzFetch when unset).
func rawFranzOpts(s spec) []kgo.Opt {
	f := s.franz
	if f == (franzFetch{}) {
		f = defaultFranzFetch
	}
	return []kgo.Opt{
		kgo.SeedBrokers(s.br.addr),
		kgo.ConsumerGroup(s.group),
		kgo.ConsumeTopics(s.topics()...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(hrt.DefaultSessionTimeout),
		kgo.HeartbeatInterval(hrt.DefaultHeartbeatInterval),
		kgo.FetchMaxBytes(f.maxBytes),
		kgo.FetchMaxPartitionBytes(f.maxPartitionBytes),
		kgo.FetchMaxWait(f.maxWait),
	}
}
