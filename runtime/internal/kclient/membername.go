package kclient

import (
	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff/internal/groupmember"
)

// namedBalancer is a kafka-go balancer whose member metadata carries the
// instance's name.
type namedBalancer struct {
	kafka.GroupBalancer
	data []byte
}

// UserData returns the instance's name (groupmember.UserData).
func (b namedBalancer) UserData() ([]byte, error) { return b.data, nil }

// memberBalancers returns kafka-go's default balancers (range, then
// round robin), carrying instance's name when it is not "".
func memberBalancers(instance string) []kafka.GroupBalancer {
	bs := []kafka.GroupBalancer{kafka.RangeGroupBalancer{}, kafka.RoundRobinGroupBalancer{}}
	if instance == "" {
		return bs
	}
	for i, b := range bs {
		bs[i] = namedBalancer{GroupBalancer: b, data: groupmember.UserData(instance)}
	}
	return bs
}
