package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff/internal/rental"
	"github.com/handoff-go/handoff/snapshot"
)

// TestProcessStartFailureExit2 runs the real binary on a state file it
// cannot start on: one another process holds locked, and one of another
// consumer group. Each is a start failure, as the exit-status contract
// says: exit 2 with "start failed" and the error naming the file, never
// exit 1 with "stop was not clean" (deploy tooling reads 1 as a stop
// that may have lost its place, 2 as a service that never started).
func TestProcessStartFailureExit2(t *testing.T) {
	bin := rentalBinary(t)
	broker := startBroker(t, 1)
	dir := t.TempDir()

	locked := filepath.Join(dir, "locked.db")
	st, err := snapshot.Open(locked, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close() // held through the run below

	other := filepath.Join(dir, "other.db")
	ost, err := snapshot.Open(other, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ost.Update(func(tx *snapshot.Tx) error { return tx.PutMeta(snapshot.MetaGroup, []byte("billing")) }); err != nil {
		t.Fatal(err)
	}
	if err := ost.Close(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, state, want string
	}{
		{"locked", locked, "state file in use"},
		{"other group", other, "belongs to group"},
	} {
		s := startService(t, bin, "-brokers", broker.Addr(), "-group", "rental-startfail", "-state", tc.state, "-drain-timeout", "100ms")
		code := s.wait(t)
		stderr := s.stderrText()
		if code != 2 {
			t.Errorf("%s: exit %d, want 2\nstderr:\n%s", tc.name, code, stderr)
		}
		line := lineWith(stderr, "start failed")
		if !strings.Contains(line, tc.want) || !strings.Contains(line, tc.state) {
			t.Errorf("%s: no \"start failed\" line naming %s and %q\nstderr:\n%s", tc.name, tc.state, tc.want, stderr)
		}
		if strings.Contains(stderr, "stop was not clean") {
			t.Errorf("%s: the start failure is logged as an unclean stop\nstderr:\n%s", tc.name, stderr)
		}
	}
}

// TestProcessChangelogDeniedExit2 runs the real binary as a SASL user who
// may read, write and describe every topic and use every group, but not
// create topics, while the changelog topics are missing: a start
// failure, exit 2, with the "start failed" line naming the changelog
// topic and the CREATE permission.
func TestProcessChangelogDeniedExit2(t *testing.T) {
	bin := rentalBinary(t)
	const group = "rental-acl"
	var acls []kfake.ACL
	for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs} {
		acls = append(acls, kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "*", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true})
	}
	for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe} {
		acls = append(acls, kfake.ACL{Resource: kmsg.ACLResourceTypeGroup, Name: "*", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true})
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, rental.Topics()...),
		kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin-pw"),
		kfake.User("PLAIN", "rental", "rental-pw", acls...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(pwFile, []byte("rental-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startService(t, bin, "-brokers", c.ListenAddrs()[0], "-group", group, "-state", filepath.Join(dir, "rental.db"),
		"-drain-timeout", "100ms", "-sasl-mechanism", "plain", "-sasl-username", "rental", "-sasl-password-file", pwFile)
	code := s.wait(t)
	stderr := s.stderrText()
	if code != 2 {
		t.Errorf("exit %d, want 2\nstderr:\n%s", code, stderr)
	}
	topic := group + "." + rental.TopicOrders + ".handoff-changelog"
	line := lineWith(stderr, "start failed")
	if !strings.Contains(line, topic) || !strings.Contains(line, "CREATE on topic "+topic) {
		t.Errorf("no \"start failed\" line naming %s and the CREATE permission\nstderr:\n%s", topic, stderr)
	}
	if strings.Contains(stderr, "stop was not clean") {
		t.Errorf("the start failure is logged as an unclean stop\nstderr:\n%s", stderr)
	}
	t.Log(line)
}
