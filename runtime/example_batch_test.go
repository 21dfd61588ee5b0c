package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/runtime"
)

// A batch class writes its heartbeats in bulk, one call per batch, and
// names the one it could not write: that one becomes a dead letter (its
// error is permanent), the others are done and committed.
func ExampleClass_batchHandler() {
	broker, _ := devbroker.Start(devbroker.Config{Topics: []string{"heartbeats"}, Partitions: 1})
	defer broker.Close()
	w := devbroker.NewWriter(broker.Addrs())
	for _, v := range []string{"21.5", "21.7", "garbled", "21.6"} {
		w.WriteMessages(context.Background(), kafka.Message{Topic: "heartbeats", Key: []byte("device-7"), Value: []byte(v)})
	}
	devbroker.CloseWriter(w)
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)

	var rt *runtime.Runtime
	rt, err := runtime.New(runtime.Config{
		Brokers:   broker.Addrs(),
		Group:     "example",
		StatePath: filepath.Join(dir, "state.db"),
		Classes: []runtime.Class{{
			Name:     "heartbeats",
			Topics:   []string{"heartbeats"},
			MaxBatch: 4,         // up to 4 messages per call
			MaxWait:  time.Hour, // here: wait until the batch is full
			BatchHandler: func(ctx context.Context, ms []*handoff.Message) error {
				fmt.Printf("bulk insert of %d heartbeats\n", len(ms))
				var be handoff.BatchError
				for i, m := range ms {
					if string(m.Value) == "garbled" {
						be.Fail(i, handoff.Permanent(errors.New("not a temperature")))
					}
				}
				go rt.Shutdown(context.Background()) // a service would run until SIGTERM
				return be.Err()
			},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	report, err := rt.Run(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("succeeded=%d dead_lettered=%d\n", report.Succeeded, report.DeadLettered)
	// Output:
	// bulk insert of 4 heartbeats
	// succeeded=3 dead_lettered=1
}
