package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/handoff-go/handoff/internal/rawkafka"
	hrt "github.com/handoff-go/handoff/runtime"
)

// spec is one side of one comparison: which topics, how many messages,
// what the handler does and with how many workers.
type spec struct {
	br      *broker
	group   string
	classes [][]string // topics of each runtime class; raw reads them all
	n       int        // messages over all topics, all produced before
	work    time.Duration
	// workers per class: the runtime's Class.Workers (zero: its default);
	// with work, raw kafka-go gets one pond pool of workers × classes.
	workers        int
	commitInterval time.Duration
	// readerQueue is raw kafka-go's ReaderConfig.QueueCapacity; zero is
	// kafka-go's default (100). The runtime uses its FetchQueue.
	readerQueue int
	// callCost and msgCost, when set, are the handler's cost instead of
	// work: one sleep of callCost + msgCost × the messages of the call.
	// maxBatch > 0 makes the runtime's class a batch class of that
	// MaxBatch (the runtime side only).
	callCost, msgCost time.Duration
	maxBatch          int
	// client is the runtime's Config.Client (the runtime side only; empty
	// is its default, franz-go).
	client hrt.Client
	// franz is raw franz-go's fetch settings; zero is defaultFranzFetch.
	franz franzFetch
	// rental makes the runtime run examples/rental's classes (see
	// rentalClasses) on rental's topics instead of one class per entry
	// of classes (the runtime side only).
	rental bool
	// check, when set, is the raw stacks' work on each message's value
	// (rental.Poisoned at the rental point, the check rental's handlers
	// make); the runtime side runs its own handlers instead.
	check func(value []byte) bool
	// localStateOnly is the runtime's Config.LocalStateOnly (the runtime
	// side only): false, the default, runs it with the state changelog.
	localStateOnly bool
}

func (s spec) topics() []string {
	var out []string
	for _, c := range s.classes {
		out = append(out, c...)
	}
	return out
}

// timing is what one side measured: the generation join, the first and
// the last message handled, the first poll that saw the commit cover all
// n, and how long the stop took after that.
type timing struct {
	began, first, handled, committed time.Time
	stop                             time.Duration
	// slept is how long the handlers' sleeps took in all (slow handler).
	slept time.Duration
	// calls counts the handler calls (the heartbeats measure).
	calls int64
}

// runRaw consumes s's topics the way a service written directly on
// kafka-go would (internal/rawkafka: a consumer group, one kafka.Reader per
// assigned partition, ONE committer goroutine for all partitions). With
// s.work, handling goes to a pond pool and commits follow the contiguous
// done prefix. It calls m.end once the group's commit covers all n, then
// stops.
func runRaw(ctx context.Context, s spec, m *meter) (timing, error) {
	var tm timing
	topics := s.topics()
	total := s.workers * len(s.classes)
	c, err := rawkafka.Start(ctx, rawkafka.Config{
		Brokers: []string{s.br.addr}, Group: s.group, Topics: topics, Partitions: s.br.partitions, N: s.n,
		Work: s.work, Workers: total, QueueSize: hrt.DefaultQueueFactor * total,
		CommitInterval: s.commitInterval, SessionTimeout: hrt.DefaultSessionTimeout, FetchMaxWait: hrt.DefaultFetchMaxWait,
		QueueCapacity: s.readerQueue, Check: s.check,
		Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
	})
	if err != nil {
		return tm, err
	}
	tm.began = c.Began
	if err := c.Handled(ctx); err != nil {
		c.Close()
		return tm, err
	}
	m.handled()
	tm.first, tm.handled, tm.slept = c.FirstAt, c.HandledAt, c.Slept()
	if err := c.FinalCommit(); err != nil {
		c.Close()
		return tm, err
	}
	if tm.committed, err = s.br.waitCommitted(ctx, s.group, topics, s.n); err != nil {
		c.Close()
		return tm, err
	}
	m.end()
	stopAt := time.Now()
	err = c.Close()
	tm.stop = time.Since(stopAt)
	return tm, err
}
