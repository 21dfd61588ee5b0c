package kclient

import (
	"bytes"

	"github.com/segmentio/kafka-go"
)

// instancePrefix starts the user data of a kafka-go member's
// subscription that names its instance (see InstanceUserData).
const instancePrefix = "handoff-instance:"

// InstanceUserData is the user data a kafka-go member puts in its
// subscription: the instance's name, so that a DescribeGroups names the
// member as it names a franz-go static member by its group.instance.id
// (kafka-go has no static membership). The range and round-robin
// balancers ignore user data.
func InstanceUserData(instance string) []byte { return []byte(instancePrefix + instance) }

// InstanceOfUserData returns the instance name InstanceUserData put in
// b, and "" when b holds none.
func InstanceOfUserData(b []byte) string {
	name, ok := bytes.CutPrefix(b, []byte(instancePrefix))
	if !ok {
		return ""
	}
	return string(name)
}

// namedBalancer is a kafka-go balancer whose member metadata carries the
// instance's name.
type namedBalancer struct {
	kafka.GroupBalancer
	data []byte
}

// UserData returns the instance's name (InstanceUserData).
func (b namedBalancer) UserData() ([]byte, error) { return b.data, nil }

// memberBalancers returns kafka-go's default balancers (range, then
// round robin), carrying instance's name when it is not "".
func memberBalancers(instance string) []kafka.GroupBalancer {
	bs := []kafka.GroupBalancer{kafka.RangeGroupBalancer{}, kafka.RoundRobinGroupBalancer{}}
	if instance == "" {
		return bs
	}
	for i, b := range bs {
		bs[i] = namedBalancer{GroupBalancer: b, data: InstanceUserData(instance)}
	}
	return bs
}
