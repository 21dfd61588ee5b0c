package testio

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// HeldMember is a plain franz-go member of a test's consumer group, on a
// topic of its own ("held", so it takes none of the service's
// partitions), whose rebalances the test holds: while held, it does not
// rejoin, and the group stays in PreparingRebalance, as it does while a
// slow member of a real group finishes its revoke.
type HeldMember struct{ cl *kgo.Client }

// JoinHeldMember creates the topic "held" (one partition) on the brokers
// at addrs and joins group on it, offering the protocols the runtime's
// members offer (cooperative-sticky with franz-go runtimes, range with
// kafka-go ones), with opts added; it returns once the member has its
// assignment, and fails the test after 30s. The test's cleanup closes it.
func JoinHeldMember(t testing.TB, addrs []string, group string, opts ...kgo.Opt) *HeldMember {
	t.Helper()
	assigned := make(chan struct{})
	var once sync.Once
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(addrs...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics("held"),
		kgo.Balancers(kgo.CooperativeStickyBalancer(), kgo.RangeBalancer()),
		kgo.RebalanceTimeout(30 * time.Second),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { once.Do(func() { close(assigned) }) }),
		kgo.DisableClientMetrics(),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cl.AllowRebalance() // a test that failed while holding it: the close waits for the rebalance
		cl.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "held", 1, 1
	req.Topics = append(req.Topics, rt)
	if resp, err := req.RequestWith(ctx, cl); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create topic held: %v %+v", err, resp)
	}
	select {
	case <-assigned:
	case <-time.After(30 * time.Second):
		t.Fatal("the held member was not assigned its partition")
	}
	return &HeldMember{cl: cl}
}

// MemberID is the member's ID in the group.
func (h *HeldMember) MemberID() string {
	id, _ := h.cl.GroupMetadata()
	return id
}

// Hold blocks the member's rebalances: a poll (with a done context, so
// it returns at once) counts until Release.
func (h *HeldMember) Hold() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.cl.PollFetches(ctx)
}

// Release lets the member rejoin.
func (h *HeldMember) Release() { h.cl.AllowRebalance() }
