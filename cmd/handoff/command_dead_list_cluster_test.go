package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/testio"
	"github.com/handoff-go/handoff/kafkasec"
	"github.com/handoff-go/handoff/snapshot"
)

// storedValues returns the bytes a state file keeps for recs, saved as
// dead letters: the values the changelog carries.
func storedValues(t *testing.T, recs ...snapshot.Record) [][]byte {
	t.Helper()
	var changes []snapshot.LogRecord
	st, _ := capturingStore(t, filepath.Join(t.TempDir(), "values.db"), &changes)
	var err error
	for _, r := range recs {
		err = errors.Join(err, st.MoveToDead(snapshot.Move{Alone: true}, r))
	}
	if err := errors.Join(err, st.Close()); err != nil {
		t.Fatal(err)
	}
	if len(changes) != len(recs) {
		t.Fatalf("%d changes for %d dead letters", len(changes), len(recs))
	}
	out := make([][]byte, len(changes))
	for i, c := range changes {
		out[i] = c.Value
	}
	return out
}

// changelogKey is the changelog key of local key k in bucket code of the
// file with ID file.
func changelogKey(code byte, file [16]byte, k uint64) []byte {
	key := append([]byte{1, code}, file[:]...)
	return binary.BigEndian.AppendUint64(key, k)
}

func deadRecord(class, id string, attempt int, err string, saved time.Time) snapshot.Record {
	return snapshot.Record{
		Message: handoff.Message{ID: id, Class: class, Key: []byte("k-" + id), Value: []byte("v-" + id), Attempt: attempt,
			Origin: handoff.Origin{Topic: class, Partition: 0, Offset: 1}},
		Reason: "failed", Err: err, FirstFailed: saved.Add(-time.Minute), SavedAt: saved,
	}
}

// produce writes recs to the broker at addr, each to its Topic and
// Partition, in order.
func produce(t *testing.T, addr string, recs ...*kgo.Record) {
	t.Helper()
	produceWith(t, nil, addr, recs...)
}

// produceWith is produce through d (nil: plaintext).
func produceWith(t *testing.T, d *kafkasec.Dialer, addr string, recs ...*kgo.Record) {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner())}
	if d != nil {
		opts = append(opts, kgo.Dialer(d.DialContext))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range recs {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce to %s/%d: %v", r.Topic, r.Partition, err)
		}
	}
}

// joinGroup joins group as static member instance, consuming topics,
// and waits until it was assigned partitions. The member leaves at the
// test's end.
func joinGroup(t *testing.T, addr, group, instance string, topics ...string) {
	t.Helper()
	assigned := make(chan struct{}, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topics...),
		kgo.InstanceID(instance), kgo.ClientID("member-client"),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if len(m) > 0 {
				select {
				case assigned <- struct{}{}:
				default:
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // polling drives the group's callbacks
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cl.Close()
	})
	select {
	case <-assigned:
	case <-time.After(30 * time.Second):
		t.Fatalf("member %s was not assigned partitions of %v", instance, topics)
	}
}

// TestDeadListCluster: dead list --brokers lists the last write of every
// dead-letter key of the group's changelog topics, across partitions and
// writers: a tombstoned dead letter is gone, an overwritten one shows
// its new version; other buckets, other groups and undecodable records
// are left out; the owner is the group member owning the input
// partition.
func TestDeadListCluster(t *testing.T) {
	t.Parallel()
	if testio.Client() != testio.KafkaGo {
		t.Skip("the CLI reads the changelog with its own client: once is enough")
	}
	const group = "grp"
	orders, users := changelogTopicName(group, "orders"), changelogTopicName(group, "users")
	b, err := devbroker.Start(devbroker.Config{Topics: []string{"orders", "users", orders, users,
		changelogTopicName("other", "orders")}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	addr := b.Addr()

	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	fileA := [16]byte{0xa1, 15: 0xa1}
	fileB := [16]byte{0xb2, 15: 0xb2}
	recs := []snapshot.Record{
		deadRecord("orders", "a1", 1, "permanent: a1 broke", t0),                    // tombstoned later
		deadRecord("orders", "a2", 1, "permanent: a2 broke", t0.Add(time.Minute)),   // overwritten later
		deadRecord("orders", "b1", 2, "permanent: b1 broke", t0.Add(3*time.Minute)), // another writer, partition 1
		deadRecord("users", "u7", 4, "permanent: u7 broke", t0.Add(4*time.Minute)),
		deadRecord("orders", "a2", 3, "permanent: a2 broke again", t0.Add(5*time.Minute)), // a2's new version
		deadRecord("orders", "x9", 1, "of another group", t0),
	}
	vals := storedValues(t, recs...)
	produce(t, addr,
		&kgo.Record{Topic: orders, Partition: 0, Key: changelogKey('d', fileA, 1), Value: vals[0]},
		&kgo.Record{Topic: orders, Partition: 0, Key: changelogKey('d', fileA, 2), Value: vals[1]},
		&kgo.Record{Topic: orders, Partition: 0, Key: changelogKey('p', fileA, 3), Value: vals[0]}, // a pending record
		&kgo.Record{Topic: orders, Partition: 1, Key: changelogKey('d', fileB, 1), Value: vals[2]},
		&kgo.Record{Topic: users, Partition: 0, Key: changelogKey('d', fileB, 7), Value: vals[3]},
		&kgo.Record{Topic: orders, Partition: 0, Key: changelogKey('d', fileA, 1)}, // tombstone of a1
		&kgo.Record{Topic: orders, Partition: 0, Key: changelogKey('d', fileA, 2), Value: vals[4]},
		&kgo.Record{Topic: orders, Partition: 0, Key: []byte{9, 9}, Value: vals[0]},                    // not a changelog key
		&kgo.Record{Topic: users, Partition: 1, Key: changelogKey('d', fileB, 8), Value: []byte{0xff}}, // undecodable
		&kgo.Record{Topic: changelogTopicName("other", "orders"), Partition: 0, Key: changelogKey('d', fileA, 1), Value: vals[5]},
	)
	args := []string{"dead", "list", "--brokers", addr, "--group", group}
	// The dead letters' IDs: the writer's file ID's first 8 bytes and key.
	idA := func(k int) string { return fmt.Sprintf("%s-%d", hex.EncodeToString(fileA[:8]), k) }
	idB := func(k int) string { return fmt.Sprintf("%s-%d", hex.EncodeToString(fileB[:8]), k) }

	// rows runs args and returns the table's rows split into cells.
	rows := func(t *testing.T, args ...string) [][]string {
		t.Helper()
		r := run(t, args...)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		for _, want := range []string{
			fmt.Sprintf("changelog topic %s partition 0 offset 5 cannot be decoded", orders),
			fmt.Sprintf("changelog topic %s partition 1 offset 0 cannot be decoded", users),
		} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr does not warn %q:\n%s", want, r.stderr)
			}
		}
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if !regexp.MustCompile(`^TOPIC +PARTITION +OWNER +KEY +CLASS +ID +ATTEMPTS +FIRST FAILED +LAST FAILED +ERROR$`).MatchString(lines[0]) {
			t.Errorf("header: %q", lines[0])
		}
		var out [][]string
		for _, l := range lines[1:] {
			out = append(out, strings.Fields(l))
		}
		return out
	}
	row := func(topic, partition, owner, key string, rec snapshot.Record) []string {
		return append([]string{topic, partition, owner, key, rec.Message.Class, rec.Message.ID, fmt.Sprint(rec.Message.Attempt),
			fmtTime(rec.FirstFailed), fmtTime(rec.SavedAt)}, strings.Fields(rec.Err)...)
	}
	check := func(t *testing.T, got, want [][]string) {
		t.Helper()
		if !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("rows:\n%q\nwant:\n%q", got, want)
		}
	}

	t.Run("no members", func(t *testing.T) {
		check(t, rows(t, args...), [][]string{
			row("orders", "1", "-", idB(1), recs[2]),
			row("users", "0", "-", idB(7), recs[3]),
			row("orders", "0", "-", idA(2), recs[4]),
		})
	})

	t.Run("search", func(t *testing.T) {
		since := t0.Add(4 * time.Minute).Format(time.RFC3339)
		for _, c := range []struct {
			flags []string
			want  [][]string
		}{
			{[]string{"--newest"}, [][]string{row("orders", "0", "-", idA(2), recs[4]), row("users", "0", "-", idB(7), recs[3]), row("orders", "1", "-", idB(1), recs[2])}},
			{[]string{"--error-contains", "again"}, [][]string{row("orders", "0", "-", idA(2), recs[4])}},
			{[]string{"--min-attempts", "3"}, [][]string{row("users", "0", "-", idB(7), recs[3]), row("orders", "0", "-", idA(2), recs[4])}},
			{[]string{"--since", since}, [][]string{row("users", "0", "-", idB(7), recs[3]), row("orders", "0", "-", idA(2), recs[4])}},
			{[]string{"--until", since}, [][]string{row("orders", "1", "-", idB(1), recs[2])}},
			{[]string{"--key", "k-b1", "--class", "orders"}, [][]string{row("orders", "1", "-", idB(1), recs[2])}},
		} {
			check(t, rows(t, append(slices.Clone(args), c.flags...)...), c.want)
		}
	})

	t.Run("topic, class and limit", func(t *testing.T) {
		r := run(t, append(args, "--topic", "users")...)
		if r.code != 0 || strings.Contains(r.stdout, "orders") || !strings.Contains(r.stdout, "u7") {
			t.Errorf("--topic users: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
		}
		r = run(t, append(args, "--class", "users", "--topic", "orders")...)
		if r.code != 0 || r.stdout != `no dead letters of class "users" in the changelog of group grp`+"\n" {
			t.Errorf("--class users --topic orders: exit %d: %q", r.code, r.stdout)
		}
		r = run(t, append(args, "--limit", "2")...)
		if r.code != 0 || !strings.HasSuffix(r.stdout, "\n1 more (--limit)\n") || strings.Contains(r.stdout, "a2") {
			t.Errorf("--limit 2: exit %d:\n%s", r.code, r.stdout)
		}
		r = run(t, append(args, "--topic", "nope")...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "input topic nope of group grp has no changelog topic grp.nope.handoff-changelog") {
			t.Errorf("--topic nope: exit %d: %s", r.code, r.stderr)
		}
		r = run(t, "dead", "list", "--brokers", addr, "--group", "nobody")
		if r.code != exitFailure || !strings.Contains(r.stderr, "the cluster has no changelog topics of group nobody") {
			t.Errorf("--group nobody: exit %d: %s", r.code, r.stderr)
		}
	})

	t.Run("member", func(t *testing.T) {
		// Runs after "no members": subtests without t.Parallel run in
		// order.
		joinGroup(t, addr, group, "inst-1", "orders")
		check(t, rows(t, args...), [][]string{
			row("orders", "1", "inst-1", idB(1), recs[2]),
			row("users", "0", "-", idB(7), recs[3]),
			row("orders", "0", "inst-1", idA(2), recs[4]),
		})

		r := run(t, append(args, "--json")...)
		if r.code != 0 {
			t.Fatalf("--json: exit %d: %s", r.code, r.stderr)
		}
		var out clusterDeadJSONOut
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("%v:\n%s", err, r.stdout)
		}
		type got struct {
			ID, Topic, Owner, File, Err string
			Partition                   int32
			Key                         string
			Attempt                     int
		}
		var have []got
		for _, d := range out.DeadLetters {
			have = append(have, got{d.ID, d.InputTopic, d.Owner, d.FileID, d.Error, d.InputPartition, d.Key, d.Attempt})
		}
		hexA, hexB := hex.EncodeToString(fileA[:]), hex.EncodeToString(fileB[:])
		want := []got{
			{"b1", "orders", "inst-1", hexB, recs[2].Err, 1, idB(1), 2},
			{"u7", "users", "", hexB, recs[3].Err, 0, idB(7), 4},
			{"a2", "orders", "inst-1", hexA, recs[4].Err, 0, idA(2), 3},
		}
		if !slices.Equal(have, want) || out.More != 0 {
			t.Errorf("json:\n%+v more %d\nwant:\n%+v", have, out.More, want)
		}
		if d := out.DeadLetters[2]; string(d.Value) != "v-a2" || !d.LastFailed.Equal(recs[4].SavedAt) || d.ChangelogOffset != 4 {
			t.Errorf("json a2: value %q last failed %v offset %d", d.Value, d.LastFailed, d.ChangelogOffset)
		}
	})
}

// TestDeadListModes: dead list takes a state file or --brokers with
// --group, never both, and rejects the flags of the other mode.
func TestDeadListModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"neither", []string{"dead", "list"}, "missing STATE, the path of a state file, or --brokers and --group"},
		{"both", []string{"dead", "list", "state.db", "--brokers", "127.0.0.1:1", "--group", "g"}, `give either STATE or --brokers, not both (got STATE "state.db")`},
		{"no group", []string{"dead", "list", "--brokers", "127.0.0.1:1"}, "--brokers needs --group"},
		{"empty brokers", []string{"dead", "list", "--brokers", "", "--group", "g"}, "--brokers needs host:port"},
		{"after with brokers", []string{"dead", "list", "--brokers", "127.0.0.1:1", "--group", "g", "--after", "3"}, "--after is for a state file: not with --brokers"},
		{"group without brokers", []string{"dead", "list", "state.db", "--group", "g"}, "--group needs --brokers"},
		{"tls without brokers", []string{"dead", "list", "state.db", "--tls"}, "--tls needs --brokers"},
		{"bad timeout", []string{"dead", "list", "--brokers", "127.0.0.1:1", "--group", "g", "--timeout", "0s"}, "--timeout must be > 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, want %d; stderr does not say %q:\n%s", r.code, exitUsage, tc.want, r.stderr)
			}
		})
	}
}

// TestDeadListClusterSecure: dead list --brokers through a mutual-TLS
// listener that wants SCRAM-SHA-512, with replay's security flags; a
// wrong password fails naming the broker and the user, not the
// password.
func TestDeadListClusterSecure(t *testing.T) {
	t.Parallel()
	if testio.Client() != testio.KafkaGo {
		t.Skip("the CLI reads the changelog with its own client: once is enough")
	}
	dir := t.TempDir()
	const pw = "pw-dead-list-71c"
	topic := changelogTopicName("g", "orders")
	b, err := devbroker.StartSecured(dir, devbroker.Config{Topics: []string{topic}, Partitions: 1}, "ops", pw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	tc, mech, err := b.ClientOptions().Load()
	if err != nil {
		t.Fatal(err)
	}
	rec := deadRecord("orders", "s1", 1, "permanent: s1", time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	produceWith(t, &kafkasec.Dialer{TLS: tc, SASL: mech}, b.Addr(),
		&kgo.Record{Topic: topic, Key: changelogKey('d', [16]byte{1}, 1), Value: storedValues(t, rec)[0]})
	wrong := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrong, []byte("not-"+pw), 0o600); err != nil {
		t.Fatal(err)
	}
	files := b.Files
	args := func(pwFile string) []string {
		return []string{"dead", "list", "--brokers", b.Addr(), "--group", "g", "--tls-ca", files.CAFile, "--tls-cert", files.ClientCert,
			"--tls-key", files.ClientKey, "--sasl-mechanism", "scram-sha-512", "--sasl-username", "ops", "--sasl-password-file", pwFile}
	}
	r := run(t, args(b.PasswordFile)...)
	if r.code != 0 || !strings.Contains(r.stdout, "s1") {
		t.Errorf("exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = run(t, args(wrong)...)
	want := fmt.Sprintf(`handoff: kafka broker %s (TLS, SASL SCRAM-SHA-512, user "ops"): SASL authentication failed`, b.Addr())
	if r.code != exitFailure || !strings.Contains(r.stderr, want) || strings.Contains(r.stdout+r.stderr, pw) {
		t.Errorf("wrong password: exit %d, stderr:\n%s\nwant: %s", r.code, r.stderr, want)
	}
}

// TestDeadListClusterFromStore: the changelog a state file writes (its
// saves, a delete, an overwrite, pending records besides) lists as the
// file's own dead letters do.
func TestDeadListClusterFromStore(t *testing.T) {
	t.Parallel()
	if testio.Client() != testio.KafkaGo {
		t.Skip("the CLI reads the changelog with its own client: once is enough")
	}
	const group = "g2"
	b, err := devbroker.Start(devbroker.Config{Topics: []string{changelogTopicName(group, "orders")}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)

	path := filepath.Join(t.TempDir(), "state.db")
	var changes []snapshot.LogRecord // Send runs in commit order, under the store's lock
	st, _ := capturingStore(t, path, &changes)
	t0 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	rec := func(id string, p, attempt int, saved time.Time) snapshot.Record {
		r := deadRecord("orders", id, attempt, "permanent: "+id, saved)
		r.Message.Origin.Partition = p
		return r
	}
	for _, r := range []snapshot.Record{rec("d1", 0, 1, t0), rec("d2", 0, 1, t0.Add(time.Second)), rec("d3", 1, 1, t0.Add(2*time.Second))} {
		err = errors.Join(err, st.MoveToDead(snapshot.Move{Alone: true}, r))
	}
	_, _, _, perr := st.SaveStop(snapshot.StopSnapshot{Fresh: []snapshot.StopRecord{{Record: rec("p1", 1, 1, t0), Kafka: true}}})
	err = errors.Join(err, perr)
	refs, _, rerr := st.DeadRefs("")
	if err = errors.Join(err, rerr); err == nil && len(refs) == 3 {
		err = errors.Join(st.Delete(snapshot.Source{From: snapshot.FromDead, Key: refs[0].Key}),
			st.UpdateDead(snapshot.Move{From: snapshot.Source{From: snapshot.FromDead, Key: refs[1].Key}, Alone: true}, rec("d2", 0, 5, t0.Add(3*time.Second))))
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil || len(refs) != 3 {
		t.Fatalf("%d dead letters, %v", len(refs), err)
	}
	var recs []*kgo.Record
	for _, c := range changes {
		recs = append(recs, &kgo.Record{Topic: changelogTopicName(group, c.Input), Partition: c.Partition, Key: c.Key, Value: c.Value})
	}
	produce(t, b.Addr(), recs...)

	r := run(t, "dead", "list", path, "--json")
	var file deadPageJSONOut
	if err := json.Unmarshal([]byte(r.stdout), &file); r.code != 0 || err != nil {
		t.Fatalf("file: exit %d, %v: %s", r.code, err, r.stderr)
	}
	r = run(t, "dead", "list", "--brokers", b.Addr(), "--group", group, "--json")
	var cluster clusterDeadJSONOut
	if err := json.Unmarshal([]byte(r.stdout), &cluster); r.code != 0 || err != nil || r.stderr != "" {
		t.Fatalf("cluster: exit %d, %v: %s", r.code, err, r.stderr)
	}
	summary := func(d recordJSON) string { return fmt.Sprintf("%s:%s:%d:%s", d.Key, d.ID, d.Attempt, d.LastFailed) }
	var fromFile, fromCluster []string
	for _, d := range file.DeadLetters {
		fromFile = append(fromFile, summary(d)) // key order: d2, d3
	}
	slices.Reverse(fromFile) // by last failure: d3, then d2's overwrite
	for _, d := range cluster.DeadLetters {
		fromCluster = append(fromCluster, summary(d.recordJSON))
	}
	if !slices.Equal(fromCluster, fromFile) || len(fromFile) != 2 {
		t.Errorf("cluster lists %q, the file %q", fromCluster, fromFile)
	}
}
