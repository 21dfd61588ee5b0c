package changelog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff/runtime/internal/kclient"
)

// Owner returns the member of the group that input partition p of topic
// is assigned to, named as an operator knows it (see [MemberName]); ""
// when no member has it (the group is empty, or rebalancing). It blocks
// for one DescribeGroups request to the group's coordinator, until ctx
// ends.
func (c *Client) Owner(ctx context.Context, topic string, p int32) (string, error) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{c.cfg.Group}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return "", fmt.Errorf("changelog: describe group %s: %w", c.cfg.Group, err)
	}
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			if errors.Is(err, kerr.GroupIDNotFound) {
				continue
			}
			return "", fmt.Errorf("changelog: describe group %s: %w", g.Group, err)
		}
		for i := range g.Members {
			m := &g.Members[i]
			if len(m.MemberAssignment) == 0 {
				continue
			}
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(m.MemberAssignment); err != nil {
				return "", fmt.Errorf("changelog: describe group %s: assignment of member %s: %w", g.Group, m.MemberID, err)
			}
			for _, t := range a.Topics {
				if t.Topic != topic {
					continue
				}
				for _, q := range t.Partitions {
					if q == p {
						return MemberName(m), nil
					}
				}
			}
		}
	}
	return "", nil
}

// MemberName names a group member as an operator knows it: its
// group.instance.id when it has one (an instance with static
// membership: the runtime's Config.Instance with franz-go), or the
// instance name a kafka-go member of the runtime put in its
// subscription (kclient.InstanceUserData); else its client ID @ host
// and member ID.
func MemberName(m *kmsg.DescribeGroupsResponseGroupMember) string {
	if m.InstanceID != nil && *m.InstanceID != "" {
		return *m.InstanceID
	}
	if name := kclient.InstanceOfUserData(userData(m.ProtocolMetadata)); name != "" {
		return name
	}
	name := strings.TrimPrefix(m.ClientHost, "/")
	if m.ClientID != "" {
		name = m.ClientID + "@" + name
	}
	return fmt.Sprintf("%s (member %s)", name, m.MemberID)
}

// userData returns the user data of a member's subscription, nil when
// it has none or does not decode. kafka-go writes version 1 without the
// owned partitions that version 1 adds: read as version 0, which ends
// with the user data, when version 1 does not decode.
func userData(meta []byte) []byte {
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
