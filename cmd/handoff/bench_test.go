package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// BenchmarkReplay replays a state file of 20,000 pending 1 KiB messages
// with three headers into the embedded broker, in batches of 500 (the
// default), and reports messages per second. Building the file is not
// timed.
//
//	go test -run='^$' -bench=Replay -benchtime=3x ./cmd/handoff/
func BenchmarkReplay(b *testing.B) {
	const n = 20_000
	br := startBroker(b)
	value := make([]byte, 1024)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	sent := 0
	for b.Loop() {
		b.StopTimer()
		path := filepath.Join(b.TempDir(), "state.db")
		recs := make([]snapshot.Record, n)
		now := time.Now()
		for i := range recs {
			topic := replayTopics[i%2]
			recs[i] = snapshot.Record{
				Message: handoff.Message{
					ID: fmt.Sprintf("%s/%d/%d", topic, i%fixPartitions, i), Class: topic,
					Key: fmt.Appendf(nil, "customer-%d", i%5000), Value: value,
					Headers: []handoff.Header{
						{Key: "content-type", Value: []byte("application/json")},
						{Key: "trace-id", Value: fmt.Appendf(nil, "%032x", i)},
						{Key: "source", Value: []byte("checkout")},
					},
					Origin:    handoff.Origin{Topic: topic, Partition: i % fixPartitions, Offset: int64(i)},
					FirstSeen: now,
				},
				Reason: "unstarted", SavedAt: now,
			}
		}
		snapshottest.SeedPending(b, path, recs...)
		root := newRootCmd()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		b.StartTimer()
		if code := execute(context.Background(), root, []string{"replay", path, "--brokers", br.Addr()}); code != 0 {
			b.Fatalf("replay exited %d", code)
		}
		sent += n
	}
	b.ReportMetric(float64(sent)/b.Elapsed().Seconds(), "msgs/s")
}
