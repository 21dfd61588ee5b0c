package runtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/runtime"
)

// A service with one class, run until its work is done, then stopped the
// way a SIGTERM stops it.
func ExampleRuntime_Run() {
	broker, _ := devbroker.Start(devbroker.Config{Topics: []string{"orders"}, Partitions: 1})
	defer broker.Close()
	w := devbroker.NewWriter(broker.Addrs())
	w.WriteMessages(context.Background(),
		kafka.Message{Topic: "orders", Key: []byte("o-1"), Value: []byte("paid")},
		kafka.Message{Topic: "orders", Key: []byte("o-1"), Value: []byte("shipped")},
		kafka.Message{Topic: "orders", Key: []byte("o-2"), Value: []byte("paid")},
	)
	devbroker.CloseWriter(w)
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)

	handled := make(chan struct{}, 3)
	rt, err := runtime.New(runtime.Config{
		Brokers:   broker.Addrs(),
		Group:     "example",
		StatePath: filepath.Join(dir, "state.db"),
		Classes: []runtime.Class{{
			Name:    "orders",
			Topics:  []string{"orders"},
			Workers: 1, // one worker: handled in offset order
			Handler: func(ctx context.Context, m *handoff.Message) error {
				fmt.Printf("%s %s -> %s\n", m.ID, m.Key, m.Value)
				handled <- struct{}{}
				return nil
			},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		for range 3 {
			<-handled
		}
		stop() // a service would use signal.NotifyContext or HandleSignals
	}()
	report, err := rt.Run(ctx) // returns after drain, snapshot, commit, leave
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("succeeded=%d snapshotted=%d\n", report.Succeeded, report.Snapshotted)
	// Output:
	// orders/0/0 o-1 -> paid
	// orders/0/1 o-1 -> shipped
	// orders/0/2 o-2 -> paid
	// succeeded=3 snapshotted=0
}

// New reports every configuration problem at once.
func ExampleNew() {
	_, err := runtime.New(runtime.Config{
		Classes: []runtime.Class{{Name: "orders", Topics: []string{"orders"}, Workers: -1}},
	})
	fmt.Println(err)
	// Output:
	// runtime: invalid config: StatePath is required
	// runtime: invalid config: class "orders" has no Handler
	// runtime: invalid config: class "orders": Workers must be > 0, got -1
	// runtime: invalid config: Brokers is required when classes have topics
	// runtime: invalid config: Group is required when classes have topics
}

// The same service on franz-go, as a static member of its group: a
// restart within SessionTimeout under the same Instance gets its own
// partitions back without a rebalance.
func ExampleConfig_client() {
	broker, _ := devbroker.Start(devbroker.Config{Topics: []string{"orders"}, Partitions: 2})
	defer broker.Close()
	w := devbroker.NewWriter(broker.Addrs())
	w.WriteMessages(context.Background(),
		kafka.Message{Topic: "orders", Key: []byte("o-1"), Value: []byte("paid")},
		kafka.Message{Topic: "orders", Key: []byte("o-2"), Value: []byte("paid")},
	)
	devbroker.CloseWriter(w)
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)

	handled := make(chan string, 2)
	rt, err := runtime.New(runtime.Config{
		Brokers:        broker.Addrs(),
		Group:          "example",
		Client:         runtime.ClientFranzGo,
		Instance:       "orders-0", // a StatefulSet pod's name: stable and unique
		SessionTimeout: 30 * time.Second,
		StatePath:      filepath.Join(dir, "state.db"),
		Classes: []runtime.Class{{
			Name:   "orders",
			Topics: []string{"orders"},
			Handler: func(ctx context.Context, m *handoff.Message) error {
				handled <- fmt.Sprintf("%s -> %s", m.Key, m.Value)
				return nil
			},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	var lines []string
	go func() {
		for range 2 {
			lines = append(lines, <-handled)
		}
		stop()
	}()
	report, err := rt.Run(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	slices.Sort(lines) // two partitions: any order
	fmt.Println(strings.Join(lines, "\n"))
	fmt.Printf("succeeded=%d\n", report.Succeeded)
	// Output:
	// o-1 -> paid
	// o-2 -> paid
	// succeeded=2
}
