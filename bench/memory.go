package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/handoff-go/handoff"
	hrt "github.com/handoff-go/handoff/runtime"
)

// memValueSize is the value size of the queued-memory measure.
const memValueSize = 1024

// queued is what the queued-memory measure found.
type queued struct {
	n               int
	perMsg, payload float64 // bytes per message: live heap, key + value
}

// waitFor polls cond (first at once, then once per interval every) until
// it holds or ctx ends.
func waitFor(ctx context.Context, every time.Duration, cond func() bool) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// queuedMemory measures the live heap each queued Kafka message costs
// the consumer process (the broker is another one): topic's n records
// (values of memValueSize bytes, keys as br.produce makes them) fetched
// and waiting in one class's queue behind one blocked worker. It is the
// live heap with all n in the pool, minus the live heap before the
// runtime was made, over n (both as liveHeap takes them).
func queuedMemory(ctx context.Context, br *broker, topic string, n int) (queued, error) {
	q := queued{n: n}
	for i := range n {
		q.payload += float64(len("key-"+strconv.Itoa(i)) + memValueSize)
	}
	q.payload /= float64(n)
	dir, err := os.MkdirTemp("", "handoff-bench-mem-")
	if err != nil {
		return q, err
	}
	defer os.RemoveAll(dir)
	before := liveHeap()
	block := make(chan struct{})
	rt, err := hrt.New(hrt.Config{
		Brokers:   []string{br.addr},
		Group:     fmt.Sprintf("bench-mem-%d", os.Getpid()),
		StatePath: filepath.Join(dir, "state.db"),
		Classes: []hrt.Class{{Name: topic, Topics: []string{topic}, Workers: 1, QueueSize: n,
			Handler: func(ctx context.Context, _ *handoff.Message) error {
				select {
				case <-block:
				case <-ctx.Done():
				}
				return nil
			}}},
		Logger: slog.New(warnHandler{}),
	})
	if err != nil {
		return q, err
	}
	ran := runInBackground(rt)
	stop := func() error {
		close(block)
		err := rt.Shutdown(ctx)
		if r := <-ran; err == nil {
			err = r.err
		}
		return err
	}
	queued := func() int { s := rt.Stats()[0]; return s.Queued + s.Running }
	if err := waitFor(ctx, 5*time.Millisecond, func() bool { return queued() >= n }); err != nil {
		stop()
		return q, fmt.Errorf("queued memory: %d of %d queued: %w", queued(), n, err)
	}
	q.perMsg = float64(liveHeap()-before) / float64(n)
	if err := stop(); err != nil {
		return q, fmt.Errorf("queued memory: runtime: %w", err)
	}
	return q, nil
}
