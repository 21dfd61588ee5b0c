package kclient

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkFranzQueue measures one record through a franz-go partition
// queue: put by the poll loop in fetches of 64, handed on by Next. The
// queue never fills (no pause, which needs a client).
//
//	go test -run '^$' -bench FranzQueue -count 5 ./runtime/internal/kclient/
func BenchmarkFranzQueue(b *testing.B) {
	recs := make([]*kgo.Record, 64)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte("key"), Value: make([]byte, 256), Offset: int64(i)}
	}
	newQueue := func() *franzQueue {
		f := &franzGo{cfg: Config{FetchQueue: 1 << 30}}
		f.queueBytes.Store(1 << 50)
		return newFranzQueue(f, "t", 0)
	}
	ctx := context.Background()
	b.Run("alone", func(b *testing.B) {
		q := newQueue()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i%len(recs) == 0 {
				q.put(recs, 64)
			}
			if _, ok := q.Next(ctx); !ok {
				b.Fatal("Next ended")
			}
			i++
		}
	})
}
