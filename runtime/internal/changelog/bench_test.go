package changelog

import (
	"fmt"
	"testing"
)

// BenchmarkRead reads one partition of 100k records of 1 KiB back, as a
// restore does: a record/s and MB/s figure per read.
func BenchmarkRead(b *testing.B) {
	const n, size = 100_000, 1 << 10
	c := cluster(b)
	cl := newClient(b, c, nil)
	ctx := timeout(b)
	if err := cl.Ensure(ctx, map[string]int32{"orders": 1}); err != nil {
		b.Fatal(err)
	}
	value := make([]byte, size)
	for i := 0; i < n; i += 1000 {
		recs := make([]*Out, 1000)
		for j := range recs {
			recs[j] = &Out{Input: "orders", Key: fmt.Appendf(nil, "key-%d", i+j), Value: value}
		}
		if err := cl.Send(recs)(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(n * size)
	b.ResetTimer()
	for b.Loop() {
		var got int
		next, err := cl.Read(ctx, "orders", 0, 0, func(rs []Rec) error {
			got += len(rs)
			return nil
		})
		if err != nil || got != n || next != n {
			b.Fatalf("read %d records up to %d: %v", got, next, err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkSend sends batches of 100 records of 1 KiB over 4 partitions
// and waits for each, as a state write does.
func BenchmarkSend(b *testing.B) {
	c := cluster(b)
	cl := newClient(b, c, nil)
	ctx := timeout(b)
	if err := cl.Ensure(ctx, map[string]int32{"orders": 4}); err != nil {
		b.Fatal(err)
	}
	value := make([]byte, 1<<10)
	recs := make([]*Out, 100)
	for j := range recs {
		recs[j] = &Out{Input: "orders", Partition: int32(j % 4), Key: fmt.Appendf(nil, "key-%d", j), Value: value}
	}
	b.SetBytes(int64(len(recs) * len(value)))
	for b.Loop() {
		if err := cl.Send(recs)(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
