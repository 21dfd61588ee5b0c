package kclient

import (
	"errors"
	"fmt"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestFenced: a commit refused because the group fenced the member is
// told apart from other failures, in both clients' words, wrapped and
// among other partitions' errors.
func TestFenced(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("connection reset"), false},
		{fmt.Errorf("generation 3: %w", errors.Join(fmt.Errorf("orders/0: %w", kerr.IllegalGeneration))), true},
		{fmt.Errorf("orders/1: %w", kerr.UnknownMemberID), true},
		{fmt.Errorf("orders/1: %w", kerr.FencedInstanceID), true},
		{fmt.Errorf("generation 4: %w", errors.Join(fmt.Errorf("orders/0: %w", kerr.StaleMemberEpoch))), true},
		{fmt.Errorf("orders/1: %w", kerr.RebalanceInProgress), false},
		{fmt.Errorf("fresh connection: orders/0: %w", kafka.IllegalGeneration), true},
		{kafka.UnknownMemberId, true},
		{kafka.NotCoordinatorForGroup, false},
	} {
		if got := Fenced(tc.err); got != tc.want {
			t.Errorf("Fenced(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
