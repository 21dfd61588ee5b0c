package runtime

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/kafkasec"
)

// TestChangelogTopicDenied: a user who may read, write and describe the
// group's topics and use its group, but not create topics. While the
// changelog topics are missing, Run fails at the start (ErrStart) naming
// the changelog topic and the permission it lacks; once an admin created
// them, the same user's Run consumes and commits.
func TestChangelogTopicDenied(t *testing.T) {
	t.Parallel()
	const group = "g-acl"
	topicACL := func(name string, pattern kmsg.ACLResourcePatternType, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: name, Pattern: pattern, Operation: op, Allow: true}
	}
	acls := []kfake.ACL{
		{Resource: kmsg.ACLResourceTypeGroup, Name: group, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationRead, Allow: true},
		{Resource: kmsg.ACLResourceTypeGroup, Name: group, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationDescribe, Allow: true},
	}
	for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe} {
		acls = append(acls, topicACL("orders", kmsg.ACLResourcePatternTypeLiteral, op))
	}
	for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs} {
		acls = append(acls, topicACL(group+".", kmsg.ACLResourcePatternTypePrefixed, op))
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders"), kfake.GroupMinSessionTimeout(time.Second),
		kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin-pw"),
		kfake.User("PLAIN", "app", "app-pw", acls...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	admin := mechanism(t, "plain", "admin", "admin-pw")

	// Ten messages to consume, produced as the admin.
	w := devbroker.NewWriterWith(&kafka.Transport{SASL: admin}, c.ListenAddrs())
	var msgs []kafka.Message
	for i := range 10 {
		msgs = append(msgs, kafka.Message{Topic: "orders", Key: []byte{byte('a' + i)}, Value: []byte("v")})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	devbroker.CloseWriter(w)

	var handled atomic.Int64
	cfg := Config{
		Brokers: c.ListenAddrs(), Group: group, StatePath: filepath.Join(t.TempDir(), "state.db"),
		SASL:           mechanism(t, "plain", "app", "app-pw"),
		CommitInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second, FetchMaxWait: 100 * time.Millisecond,
		Logger: testLogger(t), Client: testClient(),
		Classes: []Class{{Name: "orders", Topics: []string{"orders"}, Workers: 2,
			Handler: func(context.Context, *handoff.Message) error { handled.Add(1); return nil }}},
	}
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = start(t, rt, context.Background())()
	topic := group + ".orders.handoff-changelog"
	if !errors.Is(err, ErrStart) || !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("Run without the changelog topics, as a user who may not create them: %v; want ErrStart", err)
	}
	for _, want := range []string{topic, "CREATE on topic " + topic} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run's error does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "changelog: changelog:") {
		t.Errorf("Run's error says its prefix twice: %v", err)
	}
	if handled.Load() != 0 {
		t.Errorf("handled %d messages with no changelog", handled.Load())
	}
	t.Log(err)

	// An admin creates the topics as the error says, and the same user
	// starts again.
	d := &kafkasec.Dialer{SASL: admin}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.Dialer(d.DialContext))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	for name, parts := range map[string]int32{topic: 2, group + ".handoff-meta": 1} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, parts, -1
		compact := "compact"
		rc := kmsg.NewCreateTopicsRequestTopicConfig()
		rc.Name, rc.Value = "cleanup.policy", &compact
		rt.Configs = append(rt.Configs, rc)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range resp.Topics {
		if err := kerr.ErrorForCode(tr.ErrorCode); err != nil {
			t.Fatalf("create %s as admin: %v", tr.Topic, err)
		}
	}
	rt2, wait := startNew(t, cfg)
	waitFor(t, "10 handled", func() bool { return handled.Load() == 10 })
	rep := stopAndWait(t, rt2, wait)
	if rep.Succeeded != 10 {
		t.Errorf("succeeded %d, want 10", rep.Succeeded)
	}
}
