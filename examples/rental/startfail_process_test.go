package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/rental"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestProcessStartFailureExit2 runs the real binary on a state file it
// cannot start on (one another process holds locked, one of another
// consumer group) and on a broker that has none of its topics. Each is a
// start failure, as the exit-status contract says: exit 2 with "start
// failed" and the error naming the file or the classes, never exit 1
// with "stop was not clean" (deploy tooling reads 1 as a stop that may
// have lost its place, 2 as a service that never started). The error is
// printed once, on one line, and nothing reads as if a run had happened:
// no "stop complete" line, no report. (The missing topics printed a
// whole stop, a report, and their three errors joined by literal \n in
// one value, four times.)
func TestProcessStartFailureExit2(t *testing.T) {
	bin := rentalBinary(t)
	broker := startBroker(t, 1)
	bare, err := devbroker.Start(devbroker.Config{Topics: []string{"unrelated"}, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bare.Close)
	dir := t.TempDir()

	locked := filepath.Join(dir, "locked.db")
	st, err := snapshot.Open(locked, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close() // held through the run below

	other := filepath.Join(dir, "other.db")
	snapshottest.SeedGroup(t, other, "billing")

	fresh := filepath.Join(dir, "fresh.db")
	for _, tc := range []struct {
		name, broker, state string
		want                []string // in the "start failed" line
	}{
		{"locked", broker.Addr(), locked, []string{"state file in use", locked}},
		{"other group", broker.Addr(), other, []string{"belongs to group", other}},
		{"no topics", bare.Addr(), fresh, []string{"none of its topics exists", `class \"orders\"`, `class \"users\"`, `class \"heartbeats\"`}},
	} {
		s := startService(t, bin, "-brokers", tc.broker, "-group", "rental-startfail", "-state", tc.state, "-drain-timeout", "100ms")
		code := s.wait(t)
		stderr := s.stderrText()
		if code != 2 {
			t.Errorf("%s: exit %d, want 2\nstderr:\n%s", tc.name, code, stderr)
		}
		line := lineWith(stderr, "start failed")
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("%s: no \"start failed\" line with %q\nstderr:\n%s", tc.name, w, stderr)
			}
		}
		if strings.Contains(line, `\n`) {
			t.Errorf("%s: the start error has a literal \\n: %s", tc.name, line)
		}
		n := 0
		for l := range strings.Lines(stderr) {
			if strings.Contains(l, tc.want[0]) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: the start error printed on %d lines, want one\nstderr:\n%s", tc.name, n, stderr)
		}
		for _, bad := range []string{"stop was not clean", "stop complete", "stop begins"} {
			if strings.Contains(stderr, bad) {
				t.Errorf("%s: a start failure logged %q\nstderr:\n%s", tc.name, bad, stderr)
			}
		}
		if out := s.stdout.String(); strings.Contains(out, "report ") {
			t.Errorf("%s: a start failure printed a report: %s", tc.name, out)
		}
		t.Logf("%s, exit %d:\n%s", tc.name, code, stderr)
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
