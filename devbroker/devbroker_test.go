package devbroker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConsumerGroupRoundTrip checks the parts of kafka-go the runtime relies
// on, against the embedded broker: produce, join a consumer group, read each
// assigned partition with its own Reader, commit through the Generation, and
// read the commit back.
func TestConsumerGroupRoundTrip(t *testing.T) {
	b, err := Start(Config{Topics: []string{"a", "b"}, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	w := NewWriter(b.Addrs())
	const n = 300
	var msgs []kafka.Message
	for i := range n {
		topic := "a"
		if i%2 == 1 {
			topic = "b"
		}
		msgs = append(msgs, kafka.Message{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%17), Value: []byte("v")})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := CloseWriter(w); err != nil {
		t.Fatal(err)
	}

	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID: "g", Brokers: b.Addrs(), Topics: []string{"a", "b"},
		StartOffset: kafka.FirstOffset, SessionTimeout: 6 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	gen, err := cg.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 16)
	for topic, parts := range gen.Assignments {
		for _, pa := range parts {
			gen.Start(func(gctx context.Context) {
				r := kafka.NewReader(kafka.ReaderConfig{Brokers: b.Addrs(), Topic: topic, Partition: pa.ID, MaxWait: 200 * time.Millisecond})
				defer r.Close()
				if err := r.SetOffset(pa.Offset); err != nil {
					t.Error(err)
					return
				}
				count := 0
				var last int64 = -1
				for {
					fctx, fcancel := context.WithTimeout(gctx, time.Second)
					m, err := r.FetchMessage(fctx)
					fcancel()
					if err != nil {
						break
					}
					count++
					last = m.Offset
				}
				if last >= 0 {
					if err := gen.CommitOffsets(map[string]map[int]int64{topic: {pa.ID: last + 1}}); err != nil {
						t.Error(err)
					}
				}
				got <- count
				<-gctx.Done()
			})
		}
	}
	total := 0
	for range 6 {
		total += <-got
	}
	if total != n {
		t.Errorf("read %d messages, produced %d", total, n)
	}
	off, err := Committed(ctx, b.Addrs(), "g", map[string]int{"a": 3, "b": 3})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, ps := range off {
		for _, o := range ps {
			sum += o
		}
	}
	if sum != n {
		t.Errorf("committed offsets sum to %d, want %d: %v", sum, n, off)
	}
	if err := cg.Close(); err != nil {
		t.Fatal(err)
	}
}
