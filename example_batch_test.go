package handoff_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/handoff-go/handoff"
)

// A batch handler names the messages it could not handle; the runtime
// fails only those (each retried or dead-lettered by its own policy) and
// marks the others done. be.Err() is nil when nothing failed.
func ExampleBatchError() {
	insert := func(ctx context.Context, ms []*handoff.Message) error {
		var be handoff.BatchError
		for i, m := range ms {
			switch string(m.Value) {
			case "":
				be.Fail(i, handoff.Permanent(errors.New("empty heartbeat")))
			case "timeout":
				be.Fail(i, errors.New("row lock timeout"))
			}
		}
		return be.Err()
	}
	ok := []*handoff.Message{{Value: []byte("21.5")}, {Value: []byte("21.7")}}
	fmt.Println(insert(context.Background(), ok))
	mixed := []*handoff.Message{{Value: []byte("21.5")}, {Value: []byte("")}, {Value: []byte("timeout")}}
	err := insert(context.Background(), mixed)
	fmt.Println(err)
	var be *handoff.BatchError
	if errors.As(err, &be) {
		fmt.Println(handoff.IsPermanent(be.Failed[1]), handoff.IsPermanent(be.Failed[2]))
	}
	// Output:
	// <nil>
	// handoff: 2 messages of the batch failed; [1]: permanent: empty heartbeat; [2]: row lock timeout
	// true false
}

// A typed batch handler: the runtime hands it the decoded values of a
// batch; a record that does not decode fails alone, permanently (a dead
// letter at once), and the rest of the batch is written in one call.
func ExampleTypedBatch() {
	type Beat struct {
		Device string  `json:"device"`
		Temp   float64 `json:"temp"`
	}
	h := handoff.TypedBatch(handoff.JSON[Beat]{}, func(ctx context.Context, ms []*handoff.Message, bs []Beat) error {
		fmt.Printf("insert %d rows:", len(bs)) // one round trip for the batch
		for _, b := range bs {
			fmt.Printf(" %s=%.1f", b.Device, b.Temp)
		}
		fmt.Println()
		return nil
	})
	// What the runtime passes for a batch of three records of topic
	// heartbeats (a runtime.Class would take h as its BatchHandler).
	var batch []*handoff.Message
	for i, v := range []string{`{"device":"d-1","temp":21.5}`, `{"device":`, `{"device":"d-3","temp":19}`} {
		batch = append(batch, &handoff.Message{Class: "heartbeats", Value: []byte(v), Origin: handoff.Origin{Topic: "heartbeats", Offset: int64(40 + i)}})
	}
	err := h(context.Background(), batch)
	var be *handoff.BatchError
	if errors.As(err, &be) {
		for i, e := range be.Failed {
			fmt.Printf("message %d failed, permanent %v: %v\n", i, handoff.IsPermanent(e), e)
		}
	}
	// Output:
	// insert 2 rows: d-1=21.5 d-3=19.0
	// message 1 failed, permanent true: permanent: handoff: decode class heartbeats: topic heartbeats partition 0 offset 41: unexpected end of JSON input
}
