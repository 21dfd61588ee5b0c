package changelog

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff/kafkasec"
)

// TestGrow: a changelog topic with fewer partitions than its input gets
// the input's count, and a write to and a read of a new partition work
// at once (the client's metadata is refreshed); growing again to the
// same count, or one another client grew already, changes nothing.
func TestGrow(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := newClient(t, c, nil)
	ctx := timeout(t)
	if err := cl.Ensure(ctx, map[string]int32{"orders": 2}); err != nil {
		t.Fatal(err)
	}
	// The client knows the topic's 2 partitions before it grows.
	if err := cl.Send([]*Out{{Input: "orders", Partition: 1, Key: []byte("k"), Value: []byte("v")}})(ctx); err != nil {
		t.Fatal(err)
	}
	have, err := cl.Grow(ctx, map[string]int32{"orders": 3})
	if err != nil || have["orders"] != 3 {
		t.Fatalf("Grow: %v, counts %v; want orders 3", err, have)
	}
	if err := cl.Send([]*Out{{Input: "orders", Partition: 2, Key: []byte("k2"), Value: []byte("v2")}})(ctx); err != nil {
		t.Fatalf("write to the new partition: %v", err)
	}
	if got, next := readAll(t, cl, "orders", 2, 0); len(got) != 1 || next != 1 {
		t.Errorf("read of the new partition: %v up to %d", got, next)
	}
	if have, err := newClient(t, c, nil).Grow(ctx, map[string]int32{"orders": 3}); err != nil || have["orders"] != 3 {
		t.Errorf("Grow again: %v, counts %v", err, have)
	}
	if got := describe(t, c, "g.orders.handoff-changelog")["g.orders.handoff-changelog"]; got != "3 partitions, cleanup.policy=compact" {
		t.Errorf("orders changelog: %s", got)
	}
}

// TestGrowDenied: a user who may not alter the changelog topic gets
// ErrGrowDenied naming the permission and the command, and the count the
// topic has.
func TestGrowDenied(t *testing.T) {
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
	ctx := timeout(t)
	if err := as("admin", "admin").Ensure(ctx, map[string]int32{"orders": 2}); err != nil {
		t.Fatal(err)
	}
	have, err := as("app", "secret").Grow(ctx, map[string]int32{"orders": 3})
	if !errors.Is(err, ErrGrowDenied) {
		t.Fatalf("Grow as app: %v, want ErrGrowDenied", err)
	}
	for _, want := range []string{"ALTER on topic g.orders.handoff-changelog", "kafka-topics --alter --topic g.orders.handoff-changelog --partitions 3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if have["orders"] != 2 {
		t.Errorf("counts %v, want orders 2", have)
	}
}
