package changelog

import (
	"context"
	"errors"
	"fmt"
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
	owners, err := c.Owners(ctx)
	if err != nil {
		return "", err
	}
	return owners[topic][p], nil
}

// Owners returns the member each assigned input partition is assigned
// to, by topic and partition, named as [Client.Owner] names it; a
// partition no member has is missing. It blocks for one DescribeGroups
// request to the group's coordinator (a group of the consumer group
// protocol: one Metadata and one ConsumerGroupDescribe, see
// consumerOwners), until ctx ends.
func (c *Client) Owners(ctx context.Context) (map[string]map[int32]string, error) {
	if c.cfg.ConsumerProtocol {
		return c.consumerOwners(ctx)
	}
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{c.cfg.Group}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, fmt.Errorf("changelog: describe group %s: %w", c.cfg.Group, err)
	}
	out := map[string]map[int32]string{}
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			if errors.Is(err, kerr.GroupIDNotFound) {
				continue
			}
			return nil, fmt.Errorf("changelog: describe group %s: %w", g.Group, err)
		}
		for i := range g.Members {
			m := &g.Members[i]
			if len(m.MemberAssignment) == 0 {
				continue
			}
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(m.MemberAssignment); err != nil {
				return nil, fmt.Errorf("changelog: describe group %s: assignment of member %s: %w", g.Group, m.MemberID, err)
			}
			name := MemberName(m)
			for _, t := range a.Topics {
				if out[t.Topic] == nil {
					out[t.Topic] = map[int32]string{}
				}
				for _, q := range t.Partitions {
					out[t.Topic][q] = name
				}
			}
		}
	}
	return out, nil
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

// consumerOwners is Owners for a group of the consumer group protocol
// (KIP-848): one ConsumerGroupDescribe, whose members' assignments name
// topics by ID (named from one Metadata request of every topic). A
// member is named by its instance ID when it has one, else as MemberName
// names a classic member without one.
func (c *Client) consumerOwners(ctx context.Context) (map[string]map[int32]string, error) {
	mresp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, c.cl)
	if err != nil {
		return nil, fmt.Errorf("changelog: topic IDs: %w", err)
	}
	names := map[[16]byte]string{}
	for _, t := range mresp.Topics {
		if t.Topic != nil && t.ErrorCode == 0 {
			names[t.TopicID] = *t.Topic
		}
	}
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{c.cfg.Group}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, fmt.Errorf("changelog: describe consumer group %s: %w", c.cfg.Group, err)
	}
	out := map[string]map[int32]string{}
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			if errors.Is(err, kerr.GroupIDNotFound) {
				continue
			}
			return nil, fmt.Errorf("changelog: describe consumer group %s: %w", g.Group, err)
		}
		for _, m := range g.Members {
			name := ""
			if m.InstanceID != nil && *m.InstanceID != "" {
				name = *m.InstanceID
			} else {
				host := strings.TrimPrefix(m.ClientHost, "/")
				if m.ClientID != "" {
					host = m.ClientID + "@" + host
				}
				name = fmt.Sprintf("%s (member %s)", host, m.MemberID)
			}
			for _, t := range m.Assignment.TopicPartitions {
				topic := t.Topic
				if n, ok := names[t.TopicID]; ok {
					topic = n
				}
				if topic == "" {
					continue
				}
				if out[topic] == nil {
					out[topic] = map[int32]string{}
				}
				for _, p := range t.Partitions {
					out[topic][p] = name
				}
			}
		}
	}
	return out, nil
}
