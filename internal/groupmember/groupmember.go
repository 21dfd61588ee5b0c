// Package groupmember names the members of a consumer group as an
// operator knows them: the runtime's instance name. The runtime (its
// kafka-go client, the owner of a dead letter) and the CLI (its cluster
// listings) share it, so both name a member the same way.
package groupmember

import (
	"bytes"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// prefix starts the user data of a kafka-go member's subscription that
// names its instance (see UserData).
const prefix = "handoff-instance:"

// UserData is the user data a kafka-go member of the runtime puts in its
// subscription: the instance's name, so that a DescribeGroups names the
// member as it names a franz-go static member by its group.instance.id
// (kafka-go has no static membership). The range and round-robin
// balancers ignore user data.
func UserData(instance string) []byte { return []byte(prefix + instance) }

// Instance returns the instance name of a member of the runtime: its
// group.instance.id when it has one (franz-go's static membership), else
// the name a kafka-go member put in its subscription (UserData); false
// for a member that names none.
func Instance(m *kmsg.DescribeGroupsResponseGroupMember) (string, bool) {
	if m.InstanceID != nil && *m.InstanceID != "" {
		return *m.InstanceID, true
	}
	name, ok := bytes.CutPrefix(subscriptionUserData(m.ProtocolMetadata), []byte(prefix))
	if !ok || len(name) == 0 {
		return "", false
	}
	return string(name), true
}

// subscriptionUserData returns the user data of a member's subscription,
// nil when it has none or does not decode. kafka-go writes version 1
// without the owned partitions that version 1 adds: read as version 0,
// which ends with the user data, when version 1 does not decode.
func subscriptionUserData(meta []byte) []byte {
	var sub kmsg.ConsumerMemberMetadata
	if err := sub.ReadFrom(meta); err == nil {
		return sub.UserData
	}
	if len(meta) < 2 {
		return nil
	}
	v0 := bytes.Clone(meta)
	v0[0], v0[1] = 0, 0
	if err := sub.ReadFrom(v0); err != nil {
		return nil
	}
	return sub.UserData
}
