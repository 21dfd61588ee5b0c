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
