package changelog

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff/kafkasec"
)

// TestEnsureDenied: a user who may read, write and describe the group's
// topics but not create them. Ensure fails naming the topic and the
// permission; once an admin made the topics, it succeeds, and the user
// writes and reads.
func TestEnsureDenied(t *testing.T) {
	t.Parallel()
	allow := func(op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "g.", Pattern: kmsg.ACLResourcePatternTypePrefixed, Operation: op, Allow: true}
	}
	c := cluster(t, kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "app", "secret",
			allow(kmsg.ACLOperationRead), allow(kmsg.ACLOperationWrite),
			allow(kmsg.ACLOperationDescribe), allow(kmsg.ACLOperationDescribeConfigs)))
	as := func(user, pass string) *Client {
		mech, err := kafkasec.Mechanism("plain", user, pass)
		if err != nil {
			t.Fatal(err)
		}
		d := &kafkasec.Dialer{SASL: mech}
		return newClient(t, c, func(cfg *Config) { cfg.DialFunc = d.DialContext })
	}
	app := as("app", "secret")
	ctx := timeout(t)
	inputs := map[string]int32{"orders": 2}

	err := app.Ensure(ctx, inputs)
	if !errors.Is(err, ErrTopicDenied) || !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("Ensure as app: %v, want ErrTopicDenied", err)
	}
	for _, want := range []string{
		"CREATE on topic g.orders.handoff-changelog (or on the cluster)",
		"kafka-topics --create --topic g.orders.handoff-changelog --partitions 2 --config cleanup.policy=compact",
		"kafka-topics --create --topic g.handoff-meta --partitions 1 --config cleanup.policy=compact",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	t.Log(err)

	if err := as("admin", "admin").Ensure(ctx, inputs); err != nil {
		t.Fatalf("Ensure as admin: %v", err)
	}
	if err := app.Ensure(ctx, inputs); err != nil {
		t.Fatalf("Ensure as app once the topics exist: %v", err)
	}
	if err := app.Send([]*Out{{Input: "orders", Partition: 1, Key: []byte("k"), Value: []byte("v")}})(ctx); err != nil {
		t.Fatal(err)
	}
	if got, next := readAll(t, app, "orders", 1, 0); len(got) != 1 || next != 1 {
		t.Errorf("read %v up to %d", got, next)
	}
}
