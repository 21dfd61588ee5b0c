package testio

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ProtocolEnv is the environment variable naming the consumer group
// protocol the tests of a test binary run with where they do not choose
// one themselves: "classic" or "consumer" (the values of
// runtime.GroupProtocol). Unset means classic. It applies to the franz-go
// run only: kafka-go has no consumer protocol.
const ProtocolEnv = "HANDOFF_TEST_GROUP_PROTOCOL"

// The two group protocols, as runtime.GroupProtocol spells them.
const (
	Classic  = "classic"
	Consumer = "consumer"
)

// Protocol returns the group protocol of this test binary's run: the value
// of [ProtocolEnv] on the franz-go run, classic otherwise. A value that is
// neither protocol ends the process with exit code 2 and a message naming
// the variable.
func Protocol() string {
	p := os.Getenv(ProtocolEnv)
	switch p {
	case "", Classic:
		return Classic
	case Consumer:
		if Client() != FranzGo {
			return Classic
		}
		return p
	}
	fmt.Fprintf(os.Stderr, "%s=%q: want %s or %s\n", ProtocolEnv, p, Classic, Consumer)
	os.Exit(2)
	return ""
}

// Protocols returns the group protocols a test that runs once per
// protocol runs with on this binary's client: classic and consumer on
// franz-go, classic on kafka-go.
func Protocols() []string {
	if Client() == FranzGo {
		return []string{Classic, Consumer}
	}
	return []string{Classic}
}

// The consumer group protocol's timers [ConsumerGroupTimers] sets on a
// test broker: a member's session ends after ConsumerSession without a
// heartbeat, and members heartbeat every ConsumerHeartbeat, which is
// also how soon a member hears of a new assignment. (kfake's defaults,
// Kafka's, are 45s and 5s: every rebalance would wait up to 5s for each
// member's next heartbeat, and a killed member would hold its partitions
// for 45s.)
const (
	ConsumerSession   = 6 * time.Second
	ConsumerHeartbeat = 250 * time.Millisecond
)

// ConsumerGroupTimers sets the broker-wide session timeout and heartbeat
// interval of consumer-protocol groups (group.consumer.session.timeout.ms,
// group.consumer.heartbeat.interval.ms) of the brokers at addrs to
// ConsumerSession and ConsumerHeartbeat, with an IncrementalAlterConfigs,
// and fails the test if they refuse.
func ConsumerGroupTimers(t testing.TB, addrs []string) {
	t.Helper()
	SetConsumerGroupTimers(t, addrs, ConsumerSession, ConsumerHeartbeat)
}

// SetConsumerGroupTimers is ConsumerGroupTimers with the session timeout
// and heartbeat interval given.
func SetConsumerGroupTimers(t testing.TB, addrs []string, session, heartbeat time.Duration) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DisableClientMetrics())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeBroker
	for name, v := range map[string]time.Duration{
		"group.consumer.session.timeout.ms":    session,
		"group.consumer.heartbeat.interval.ms": heartbeat,
	} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name = name
		c.Op = kmsg.IncrementalAlterConfigOpSet
		c.Value = kmsg.StringPtr(strconv.FormatInt(v.Milliseconds(), 10))
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("setting the consumer group timers: %v", err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			t.Fatalf("setting the consumer group timers: %v", err)
		}
	}
}
