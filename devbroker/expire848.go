package devbroker

import (
	"context"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The expiry of static members of consumer-protocol (KIP-848) groups
// that left for now.
//
// A static member of a consumer-protocol group that stops leaves with
// member epoch -2: its partitions stay reserved for its instance ID, so
// that its restart takes them back without moving them. Kafka keeps them
// so until the member's session timeout (group.consumer.session.timeout.ms)
// and then removes the member, and the group assigns its partitions to
// the others. kfake stops the member's session timer at that leave and
// never removes it: a static member that does not come back holds its
// partitions for good, and nobody consumes them. So the expiry notes each
// such leave (the ConsumerGroupHeartbeat with epoch -2 and an instance
// ID) and forgets it when a member of that instance joins again; one
// still departed after the broker's session timeout is removed with the
// leave the member would send for good (epoch -1), as Kafka's expiry
// does.

// departedMember is a static member that left with epoch -2.
type departedMember struct {
	instance string
	left     time.Time
}

// consumerSessionDefault is group.consumer.session.timeout.ms when the
// broker does not say (Kafka's default, and kfake's).
const consumerSessionDefault = 45 * time.Second

// observeConsumer notes what a ConsumerGroupHeartbeat says of static
// members leaving and coming back. e.mu is held.
func (e *expiry) observeConsumer(r *kmsg.ConsumerGroupHeartbeatRequest, now time.Time) {
	switch {
	case r.MemberEpoch == -2:
		// The leave need not carry the instance ID (franz-go's does
		// not): the member's join did. A dynamic member's -2 is a
		// leave for good, which the expiry's own finds done.
		if e.departed[r.Group] == nil {
			e.departed[r.Group] = map[string]departedMember{}
		}
		e.departed[r.Group][r.MemberID] = departedMember{instance: e.instances[r.MemberID], left: now}
	case r.MemberEpoch == -1:
		delete(e.departed[r.Group], r.MemberID)
		delete(e.instances, r.MemberID)
	case r.MemberEpoch == 0 && r.InstanceID != nil:
		e.instances[r.MemberID] = *r.InstanceID
		for id, d := range e.departed[r.Group] {
			if d.instance == *r.InstanceID {
				delete(e.departed[r.Group], id) // its restart inherits it
				delete(e.instances, id)
			}
		}
	}
}

// sweepDeparted removes the departed static members whose session
// timeout has passed.
func (e *expiry) sweepDeparted(ctx context.Context) {
	e.mu.Lock()
	some := false
	for _, ms := range e.departed {
		some = some || len(ms) > 0
	}
	e.mu.Unlock()
	if !some {
		return
	}
	session := e.consumerSession(ctx)
	now := time.Now()
	type gone struct{ group, member string }
	var expired []gone
	e.mu.Lock()
	for group, ms := range e.departed {
		for id, d := range ms {
			if now.Sub(d.left) > session {
				expired = append(expired, gone{group, id})
			}
		}
		if len(ms) == 0 {
			delete(e.departed, group)
		}
	}
	e.mu.Unlock()
	for _, g := range expired {
		if e.leaveConsumer(ctx, g.group, g.member) {
			e.mu.Lock()
			delete(e.departed[g.group], g.member)
			delete(e.instances, g.member)
			e.mu.Unlock()
		}
	}
}

// consumerSession asks the broker for group.consumer.session.timeout.ms;
// consumerSessionDefault when it does not answer.
func (e *expiry) consumerSession(ctx context.Context) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	w, err := e.dial(ctx, "devbroker-expiry")
	if err != nil {
		return consumerSessionDefault
	}
	defer w.Close()
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.Version = 4
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeBroker
	res.ConfigNames = []string{"group.consumer.session.timeout.ms"}
	req.Resources = append(req.Resources, res)
	kresp, err := w.request(ctx, req)
	if err != nil {
		return consumerSessionDefault
	}
	for _, r := range kresp.(*kmsg.DescribeConfigsResponse).Resources {
		for _, c := range r.Configs {
			if c.Name == "group.consumer.session.timeout.ms" && c.Value != nil {
				if ms, err := strconv.Atoi(*c.Value); err == nil && ms > 0 {
					return time.Duration(ms) * time.Millisecond
				}
			}
		}
	}
	return consumerSessionDefault
}

// leaveConsumer sends kfake the leave for good (epoch -1) of member of
// group and reports whether the member is gone (removed now, or before).
func (e *expiry) leaveConsumer(ctx context.Context, group, member string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	log := e.log.With("group", group, "member", member)
	w, err := e.dial(ctx, "devbroker-expiry")
	if err != nil {
		log.WarnContext(ctx, "expire departed static member", "err", err)
		return false
	}
	defer w.Close()
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group = group
	req.MemberID = member
	req.MemberEpoch = -1
	kresp, err := w.request(ctx, req)
	if err != nil {
		log.WarnContext(ctx, "expire departed static member", "err", err)
		return false
	}
	switch code := kresp.(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode; code {
	case 0:
		log.InfoContext(ctx, "departed static member expired (consumer protocol)")
		return true
	case codeUnknownMemberID: // its instance came back, or it is gone
		return true
	default:
		log.WarnContext(ctx, "expire departed static member", "error_code", code)
		return false
	}
}
