package changelog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff/internal/groupmember"
)

// Owner returns the member of the group that input partition p of topic
// is assigned to, named as an operator knows it (see [MemberName]); ""
// when no member has it (the group is empty, or rebalancing). It blocks
// for one DescribeGroups request to the group's coordinator, until ctx
// ends. A group of the consumer group protocol (Config.ConsumerProtocol)
// is asked with ConsumerGroupDescribe instead (see consumerOwner).
func (c *Client) Owner(ctx context.Context, topic string, p int32) (string, error) {
	if c.cfg.ConsumerProtocol {
		return c.consumerOwner(ctx, topic, p)
	}
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
// subscription (groupmember.UserData); else its client ID @ host
// and member ID.
func MemberName(m *kmsg.DescribeGroupsResponseGroupMember) string {
	if name, ok := groupmember.Instance(m); ok {
		return name
	}
	name := strings.TrimPrefix(m.ClientHost, "/")
	if m.ClientID != "" {
		name = m.ClientID + "@" + name
	}
	return fmt.Sprintf("%s (member %s)", name, m.MemberID)
}

// consumerOwner is Owner for a group of the consumer group protocol
// (KIP-848): one ConsumerGroupDescribe, whose members' assignments name
// topics by ID (the topic's ID from one Metadata request). A member is
// named by its instance ID when it has one, else as MemberName names a
// classic member without one.
func (c *Client) consumerOwner(ctx context.Context, topic string, p int32) (string, error) {
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, c.cl)
	if err != nil {
		return "", fmt.Errorf("changelog: topic ID of %s: %w", topic, err)
	}
	var id [16]byte
	for _, t := range mresp.Topics {
		if t.Topic != nil && *t.Topic == topic && t.ErrorCode == 0 {
			id = t.TopicID
		}
	}
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{c.cfg.Group}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return "", fmt.Errorf("changelog: describe consumer group %s: %w", c.cfg.Group, err)
	}
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			if errors.Is(err, kerr.GroupIDNotFound) {
				continue
			}
			return "", fmt.Errorf("changelog: describe consumer group %s: %w", g.Group, err)
		}
		for _, m := range g.Members {
			for _, t := range m.Assignment.TopicPartitions {
				if t.Topic != topic && (id == [16]byte{} || t.TopicID != id) {
					continue
				}
				if slices.Contains(t.Partitions, p) {
					if m.InstanceID != nil && *m.InstanceID != "" {
						return *m.InstanceID, nil
					}
					name := strings.TrimPrefix(m.ClientHost, "/")
					if m.ClientID != "" {
						name = m.ClientID + "@" + name
					}
					return fmt.Sprintf("%s (member %s)", name, m.MemberID), nil
				}
			}
		}
	}
	return "", nil
}
