package devbroker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/runtime"
)

// A Kafka-level test of a service's class: the records go through a real
// Kafka-protocol broker, the real consumer group and the real commit rule,
// and the test reads back what the group committed.
func ExampleStart() {
	ctx := context.Background()
	broker, err := devbroker.Start(devbroker.Config{Topics: []string{"orders"}, Partitions: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer broker.Close()

	w := devbroker.NewWriter(broker.Addrs())
	err = w.WriteMessages(ctx,
		kafka.Message{Topic: "orders", Key: []byte("o-1"), Value: []byte("paid")},
		kafka.Message{Topic: "orders", Key: []byte("o-2"), Value: []byte("paid")},
		kafka.Message{Topic: "orders", Key: []byte("o-3"), Value: []byte("paid")},
	)
	devbroker.CloseWriter(w)
	if err != nil {
		fmt.Println(err)
		return
	}

	dir, _ := os.MkdirTemp("", "devbroker-example")
	defer os.RemoveAll(dir)
	handled := make(chan struct{}, 3)
	rt, err := runtime.New(runtime.Config{
		Brokers:   broker.Addrs(),
		Group:     "billing",
		StatePath: filepath.Join(dir, "state.db"),
		Classes: []runtime.Class{{
			Name:   "orders",
			Topics: []string{"orders"},
			Handler: func(ctx context.Context, m *handoff.Message) error {
				handled <- struct{}{}
				return nil
			},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	go func() {
		for range 3 {
			<-handled
		}
		stop()
	}()
	if _, err := rt.Run(runCtx); err != nil { // the stop commits what was handled
		fmt.Println(err)
		return
	}

	committed, err := devbroker.Committed(ctx, broker.Addrs(), "billing", map[string]int{"orders": 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("committed:", devbroker.Sum(committed))
	// Output:
	// committed: 3
}
