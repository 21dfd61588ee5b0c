package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/deadop"
	"github.com/handoff-go/handoff/internal/testio"
	"github.com/handoff-go/handoff/snapshot"
)

// opGroup is a broker with a group's changelog (input topics orders and
// users, 2 partitions each) and meta topic, holding dead letters: five of
// class orders on both partitions and two writers, one of users.
type opGroup struct {
	addr  string
	group string
	meta  string
	t0    time.Time
	// orders are the IDs of the orders dead letters, oldest first; one
	// of them fails with "timeout".
	orders []string
	users  string // the users dead letter's ID
}

func newOpGroup(t *testing.T, group string) *opGroup {
	t.Helper()
	orders, users := changelogTopicName(group, "orders"), changelogTopicName(group, "users")
	b, err := devbroker.Start(devbroker.Config{Topics: []string{"orders", "users", orders, users}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	g := &opGroup{addr: b.Addr(), group: group, meta: metaTopicName(group), t0: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}
	createTopic(t, g.addr, g.meta, 1)
	fileA, fileB := [16]byte{0xa1, 15: 1}, [16]byte{0xb2, 15: 2}
	errs := []string{"permanent: refused", "permanent: refused", "permanent: timeout", "permanent: refused", "permanent: refused"}
	var recs []snapshot.Record
	for i, e := range errs {
		recs = append(recs, deadRecord("orders", fmt.Sprintf("o%d", i), 1, e, g.t0.Add(time.Duration(i)*time.Minute)))
	}
	recs = append(recs, deadRecord("users", "u0", 2, "permanent: refused", g.t0.Add(90*time.Second)))
	vals := storedValues(t, recs...)
	var out []*kgo.Record
	for i := range errs {
		file, p := fileA, int32(i%2)
		if i >= 3 {
			file = fileB
		}
		out = append(out, &kgo.Record{Topic: orders, Partition: p, Key: changelogKey('d', file, uint64(i+1)), Value: vals[i]})
		g.orders = append(g.orders, deadID(file, uint64(i+1)))
	}
	out = append(out, &kgo.Record{Topic: users, Partition: 1, Key: changelogKey('d', fileB, 9), Value: vals[5]})
	g.users = deadID(fileB, 9)
	produce(t, g.addr, out...)
	return g
}

func deadID(file [16]byte, k uint64) string {
	return fmt.Sprintf("%s-%d", hex.EncodeToString(file[:8]), k)
}

// args returns the command line of the group with more.
func (g *opGroup) args(verb string, more ...string) []string {
	return append([]string{"dead", verb, "--brokers", g.addr, "--group", g.group}, more...)
}

// createTopic creates topic with n partitions.
func createTopic(t *testing.T, addr, topic string, n int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, n, 1
	req.Topics = append(req.Topics, rt)
	if resp, err := req.RequestWith(ctx, cl); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create topic %s: %v %+v", topic, err, resp)
	}
}

// metaRecords returns every record of the meta topic, read with a client
// of the test's own.
func metaRecords(t *testing.T, addr, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("end offset of %s: %v %+v", topic, err, resp)
	}
	end := resp.Topics[0].Partitions[0].Offset
	var out []*kgo.Record
	for int64(len(out)) < end {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %d of %d records", topic, len(out), end)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// requests returns the requests the meta topic holds, parsed with
// deadop.Parse, in the order written.
func requests(t *testing.T, recs []*kgo.Record) []*deadop.Request {
	t.Helper()
	var out []*deadop.Request
	for _, r := range recs {
		rec, ok, err := deadop.Parse(r.Key, r.Value)
		if !ok || err != nil {
			t.Fatalf("meta record %q: ok %v, %v", r.Key, ok, err)
		}
		if rec.Kind == deadop.KindRequest {
			out = append(out, rec.Request)
		}
	}
	return out
}

// onlyCLI skips the second run: the CLI talks to the cluster with its
// own client, whichever client the runtime runs with.
func onlyCLI(t *testing.T) {
	t.Helper()
	if testio.Client() != testio.KafkaGo {
		t.Skip("the CLI reads and writes the group's topics with its own client: once is enough")
	}
}

// TestDeadOpDryRun: a dry run counts what the selection takes (the class
// and search flags, --limit of the oldest, IDs), prints a sample with
// the IDs and writes nothing to the meta topic.
func TestDeadOpDryRun(t *testing.T) {
	t.Parallel()
	onlyCLI(t)
	g := newOpGroup(t, "dry")
	for _, c := range []struct {
		name  string
		args  []string
		want  string
		ids   []string // in the sample, in order
		notID []string
	}{
		{"class", []string{"--class", "orders"}, `would take 5 dead letters of class "orders" of group dry (owners: - 5)`, g.orders, []string{g.users}},
		{"all", []string{"--all"}, "would take 6 dead letters of group dry (owners: - 6)", append(g.orders[:1:1], g.users), nil},
		{"error", []string{"--error-contains", "timeout"}, "would take 1 dead letters of group dry", g.orders[2:3], []string{g.orders[0], g.users}},
		{"since until", []string{"--class", "orders", "--since", g.t0.Add(time.Minute).Format(time.RFC3339), "--until", g.t0.Add(3 * time.Minute).Format(time.RFC3339)},
			`would take 2 dead letters of class "orders"`, g.orders[1:3], []string{g.orders[0], g.orders[3]}},
		{"key", []string{"--key", "k-o4"}, "would take 1 dead letters of group dry", g.orders[4:], []string{g.orders[0]}},
		{"limit", []string{"--class", "orders", "--limit", "2"}, `would take 2 of the 5 matching dead letters of class "orders" of group dry (--limit 2, the oldest)`,
			g.orders[:2], g.orders[2:]},
		{"ids", []string{g.orders[3], g.users}, "would take 2 dead letters of group dry", []string{g.orders[3], g.users}, []string{g.orders[0]}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, verb := range []string{"requeue", "discard"} {
				r := run(t, g.args(verb, append(c.args, "--dry-run")...)...)
				if r.code != 0 {
					t.Fatalf("%s: exit %d: %s", verb, r.code, r.stderr)
				}
				if want := "dry run: " + verb + " " + c.want; !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "nothing written") {
					t.Errorf("%s: stdout does not say %q:\n%s", verb, want, r.stdout)
				}
				last := -1
				for _, id := range c.ids {
					i := strings.Index(r.stdout, id)
					if i < last {
						t.Errorf("%s: sample without %s, or out of order:\n%s", verb, id, r.stdout)
					}
					last = i
				}
				for _, id := range c.notID {
					if strings.Contains(r.stdout, id) {
						t.Errorf("%s: sample has %s:\n%s", verb, id, r.stdout)
					}
				}
			}
		})
	}
	if recs := metaRecords(t, g.addr, g.meta); len(recs) != 0 {
		t.Errorf("the dry runs wrote %d records to the meta topic", len(recs))
	}
	r := run(t, g.args("requeue", "--class", "nope", "--dry-run")...)
	if r.code != 0 || r.stdout != `no dead letters of class "nope" of group dry to requeue`+"\n" {
		t.Errorf("no match: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = run(t, g.args("requeue", "0000000000000000-77", "--dry-run")...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "no dead letter with ID 0000000000000000-77 in the changelog of group dry; nothing written") {
		t.Errorf("unknown ID: exit %d %s", r.code, r.stderr)
	}
}

// TestDeadOpRequest: requeue --brokers writes one request to the meta
// topic that deadop.Parse reads as the owners need it: the selected IDs
// oldest first, the action, the rate, the limit, who (--who, else the
// OS user) and via cli, and the selection for the audit trail; with
// --wait 0 it returns at once.
func TestDeadOpRequest(t *testing.T) {
	t.Parallel()
	onlyCLI(t)
	g := newOpGroup(t, "req")
	since := g.t0.Add(time.Minute)
	r := run(t, g.args("requeue", "--class", "orders", "--error-contains", "refused", "--since", since.Format(time.RFC3339),
		"--rate", "2.5", "--limit", "2", "--who", "alice", "--wait", "0")...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	recs := metaRecords(t, g.addr, g.meta)
	reqs := requests(t, recs)
	if len(recs) != 1 || len(reqs) != 1 {
		t.Fatalf("meta topic holds %d records, %d requests; want 1", len(recs), len(reqs))
	}
	req := reqs[0]
	if string(recs[0].Key) != string(deadop.RequestKey(req.ID)) || recs[0].Partition != 0 {
		t.Errorf("key %q partition %d", recs[0].Key, recs[0].Partition)
	}
	// o1, o3, o4 match (o2 timed out, o0 is before --since); --limit 2
	// takes the oldest two.
	wantIDs := []string{g.orders[1], g.orders[3]}
	if req.Action != deadop.Requeue || !slices.Equal(req.IDs, wantIDs) || req.Rate != 2.5 || req.Limit != 2 || req.Who != "alice" || req.Via != "cli" {
		t.Errorf("request %+v, want IDs %q", req, wantIDs)
	}
	if f := req.Filter; f.Class != "orders" || f.ErrorContains != "refused" || !f.Since.Equal(since) || f.Key != nil || f.Partition != nil {
		t.Errorf("filter %+v", f)
	}
	if d := time.Since(req.At); d < 0 || d > time.Minute {
		t.Errorf("request at %v", req.At)
	}
	if d := req.StartAt.Sub(req.At); d != deadop.StartDelay {
		t.Errorf("rate-limited request starts %s after it was made, want %s", d, deadop.StartDelay)
	}
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(req.ID) {
		t.Errorf("operation ID %q", req.ID)
	}
	want := fmt.Sprintf("operation %s: requeue 2 of the 3 matching dead letters of class \"orders\" of group req (--limit 2, the oldest), asked of their owners as alice at 2.5 a second\n", req.ID)
	if !strings.HasPrefix(r.stdout, want) || !strings.Contains(r.stdout, "not waiting (--wait 0)") {
		t.Errorf("stdout:\n%s\nwant it to start:\n%s", r.stdout, want)
	}
	if !strings.Contains(r.stderr, "warning: 2 of them are in partitions no member of group req owns now") {
		t.Errorf("stderr does not warn of the unowned: %s", r.stderr)
	}

	// IDs given, and the OS user.
	r = run(t, g.args("requeue", g.users, g.orders[0], g.users, "--wait", "0")...)
	if r.code != 0 {
		t.Fatalf("IDs: exit %d: %s", r.code, r.stderr)
	}
	reqs = requests(t, metaRecords(t, g.addr, g.meta))
	if len(reqs) != 2 || !slices.Equal(reqs[1].IDs, []string{g.users, g.orders[0]}) || reqs[1].Who != osUser() || reqs[1].Who == "" ||
		reqs[1].Rate != 0 || !reqs[1].StartAt.IsZero() {
		t.Errorf("IDs: requests %+v", reqs)
	}
}

// TestDeadOpDiscardNeedsYes: discard --brokers refuses a selection of more
// than one dead letter without --yes (exit 2, the count printed, nothing
// written); one dead letter, or --yes, is written.
func TestDeadOpDiscardNeedsYes(t *testing.T) {
	t.Parallel()
	onlyCLI(t)
	g := newOpGroup(t, "yes")
	r := run(t, g.args("discard", "--class", "orders")...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "discard selects 5 dead letters: add --yes to discard them") ||
		!strings.Contains(r.stdout, `discard would delete 5 dead letters of class "orders" of group yes for good`) {
		t.Errorf("without --yes: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = run(t, g.args("discard", g.orders[0], g.orders[1])...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "add --yes") {
		t.Errorf("two IDs without --yes: exit %d\n%s", r.code, r.stderr)
	}
	if recs := metaRecords(t, g.addr, g.meta); len(recs) != 0 {
		t.Fatalf("refused discards wrote %d records", len(recs))
	}
	if r = run(t, g.args("discard", "--key", "k-o2", "--wait", "0")...); r.code != 0 {
		t.Errorf("one without --yes: exit %d: %s", r.code, r.stderr)
	}
	if r = run(t, g.args("discard", "--class", "orders", "--yes", "--wait", "0")...); r.code != 0 {
		t.Errorf("--yes: exit %d: %s", r.code, r.stderr)
	}
	reqs := requests(t, metaRecords(t, g.addr, g.meta))
	if len(reqs) != 2 || reqs[0].Action != deadop.Discard || !slices.Equal(reqs[0].IDs, g.orders[2:3]) ||
		reqs[1].Action != deadop.Discard || !slices.Equal(reqs[1].IDs, g.orders) {
		t.Errorf("requests %+v", reqs)
	}
}

// owner plays an instance of the group in TestDeadOpFollow: it writes
// statuses to the meta topic as the runtime does.
type owner struct {
	t  *testing.T
	cl *kgo.Client
	g  *opGroup
}

func newOwner(t *testing.T, g *opGroup) *owner {
	cl, err := kgo.NewClient(kgo.SeedBrokers(g.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &owner{t: t, cl: cl, g: g}
}

// request waits for the n-th request in the meta topic.
func (o *owner) request(n int) *deadop.Request {
	o.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		reqs := requests(o.t, metaRecords(o.t, o.g.addr, o.g.meta))
		if len(reqs) >= n {
			return reqs[n-1]
		}
		if time.Now().After(deadline) {
			o.t.Fatalf("no request %d in the meta topic", n)
		}
		time.Sleep(20 * time.Millisecond) // polling the topic, not synchronising
	}
}

func (o *owner) status(op string, s deadop.Status) {
	o.t.Helper()
	s.At = time.Now()
	v, err := deadop.Encode(&s)
	if err != nil {
		o.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := o.cl.ProduceSync(ctx, &kgo.Record{Topic: o.g.meta, Key: deadop.StatusKey(op, s.Instance), Value: v}).FirstErr(); err != nil {
		o.t.Fatal(err)
	}
}

// TestDeadOpFollow: requeue --brokers follows the owners' statuses in the
// meta topic, printing progress until every owner is done (exit 0);
// --wait passing ends it with exit 1, the operation left running; a
// cancelled context (Ctrl-C) writes a Cancel (exit 1); dead ops lists
// the three with their progress and --cancel cancels a running one.
func TestDeadOpFollow(t *testing.T) {
	t.Parallel()
	onlyCLI(t)
	g := newOpGroup(t, "follow")
	o := newOwner(t, g)

	start := func(ctx context.Context, args ...string) <-chan result {
		done := make(chan result, 1)
		go func() { done <- runWith(t, ctx, nil, args...) }()
		return done
	}

	// Done: two owners, the second reports a failed-again message.
	done := start(context.Background(), g.args("requeue", "--class", "orders", "--rate", "10", "--wait", "1m")...)
	req := o.request(1)
	o.status(req.ID, deadop.Status{Instance: "a", State: deadop.Running, Done: 1, Left: 2})
	o.status(req.ID, deadop.Status{Instance: "b", State: deadop.Running, Done: 0, Left: 2})
	o.status(req.ID, deadop.Status{Instance: "a", State: deadop.Done, Done: 3})
	o.status(req.ID, deadop.Status{Instance: "b", State: deadop.Done, Done: 1, FailedAgain: 1, Skipped: 1})
	r := <-done
	t.Logf("requeue --brokers:\n%s%s", r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("done: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if want := "requeue: over: done 4, failed again 1, skipped 1 (no longer dead letters), left 0 of 5\n"; !strings.HasSuffix(r.stdout, want) {
		t.Errorf("done: stdout does not end with %q:\n%s", want, r.stdout)
	}
	if !regexp.MustCompile(`(?m)^requeue: done \d, failed again \d, left [1-5] of 5$`).MatchString(r.stdout) {
		t.Errorf("done: no progress line:\n%s", r.stdout)
	}

	// --wait passes: an owner reported part, another none.
	done = start(context.Background(), g.args("requeue", g.orders[0], g.orders[1], "--wait", "2s")...)
	req2 := o.request(2)
	o.status(req2.ID, deadop.Status{Instance: "a", State: deadop.Running, Done: 0, Left: 1})
	r = <-done
	want := fmt.Sprintf("stopped following operation %s after --wait 2s, the owners go on: done 0, failed again 0, left 2 of 2", req2.ID)
	if r.code != exitFailure || !strings.Contains(r.stderr, want) {
		t.Errorf("--wait: exit %d, stderr does not say %q:\n%s", r.code, want, r.stderr)
	}

	// Ctrl-C: the command's context ends once the request is written.
	ctx, cancel := context.WithCancel(context.Background())
	done = start(ctx, g.args("discard", "--class", "orders", "--yes", "--who", "bob")...)
	req3 := o.request(3)
	o.status(req3.ID, deadop.Status{Instance: "b", State: deadop.Running, Done: 2, Left: 3})
	cancel()
	r = <-done
	if r.code != exitFailure || !strings.Contains(r.stderr, "interrupted: canceled operation "+req3.ID) {
		t.Errorf("Ctrl-C: exit %d:\n%s", r.code, r.stderr)
	}
	var cancels []*deadop.Cancel
	for _, rec := range metaRecords(t, g.addr, g.meta) {
		p, _, err := deadop.Parse(rec.Key, rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		if p.Kind == deadop.KindCancel {
			if p.Op != req3.ID {
				t.Errorf("cancel of %s, want %s", p.Op, req3.ID)
			}
			cancels = append(cancels, p.Cancel)
		}
	}
	if len(cancels) != 1 || cancels[0].Who != "bob" {
		t.Errorf("cancels %+v, want one by bob", cancels)
	}

	// dead ops: newest first, with their states and progress.
	r = run(t, g.args("ops")...)
	t.Logf("dead ops:\n%s", r.stdout)
	if r.code != 0 {
		t.Fatalf("ops: exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 4 || !regexp.MustCompile(`^OP +ACTION +STATE +WHO +VIA +AT +COUNT +RATE +DONE +FAILED +FAILED AGAIN +SKIPPED +LEFT +SELECTION$`).MatchString(lines[0]) {
		t.Fatalf("ops:\n%s", r.stdout)
	}
	user := osUser()
	for i, want := range [][]string{
		{req3.ID, "discard", "canceled", "bob", "cli", fmtTime(req3.At), "5", "-", "2", "0", "0", "0", "3", `class="orders"`},
		{req2.ID, "requeue", "running", user, "cli", fmtTime(req2.At), "2", "-", "0", "0", "0", "0", "2", "no", "filter"},
		{req.ID, "requeue", "done", user, "cli", fmtTime(req.At), "5", "10/s", "4", "0", "1", "1", "0", `class="orders"`},
	} {
		if got := strings.Fields(lines[i+1]); !slices.Equal(got, want) {
			t.Errorf("ops row %d: %q, want %q", i, got, want)
		}
	}
	r = run(t, g.args("ops", req.ID)...)
	t.Logf("dead ops %s:\n%s", req.ID, r.stdout)
	if r.code != 0 || !strings.Contains(r.stdout, "progress: done 4, failed again 1, skipped 1 (no longer dead letters), left 0 of 5") ||
		!regexp.MustCompile(`(?m)^b +done +1 +0 +1 +1 +0 `).MatchString(r.stdout) {
		t.Errorf("ops %s: exit %d\n%s%s", req.ID, r.code, r.stdout, r.stderr)
	}
	r = run(t, g.args("ops", "--json", "--limit", "2")...)
	var js opsJSON
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || r.code != 0 {
		t.Fatalf("ops --json: exit %d %v\n%s", r.code, err, r.stdout)
	}
	if len(js.Operations) != 2 || js.More != 1 || js.Operations[0].ID != req3.ID || js.Operations[0].Cancel == nil ||
		js.Operations[1].Progress.Left != 2 || js.Operations[1].State != "running" {
		t.Errorf("ops --json: %+v", js)
	}

	// --cancel: of the running one; the over ones are left alone.
	r = run(t, g.args("ops", "--cancel", req2.ID, "--who", "carol")...)
	if r.code != 0 || !strings.Contains(r.stdout, "canceled operation "+req2.ID) {
		t.Errorf("--cancel: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = run(t, g.args("ops", "--cancel", req.ID)...)
	if r.code != 0 || !strings.Contains(r.stdout, "is over") {
		t.Errorf("--cancel of a done one: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = run(t, g.args("ops", "--cancel", "nope")...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "no operation nope in meta topic follow.handoff-meta") {
		t.Errorf("--cancel nope: exit %d\n%s", r.code, r.stderr)
	}
	r = run(t, g.args("ops", req2.ID)...)
	if r.code != 0 || !strings.Contains(r.stdout, "canceled by carol") {
		t.Errorf("ops %s: exit %d\n%s", req2.ID, r.code, r.stdout)
	}
}

// TestDeadOpUnreported: an operation whose owners reported on part of
// its dead letters only (an owner writes nothing about those that were
// gone when it looked, and nobody about a partition nobody owns) is over
// once no owner runs and the runtime's grace passed, as the runtime
// shows it: the command ends with exit 1 saying how many no owner acted
// on, and dead ops shows it done with them left.
func TestDeadOpUnreported(t *testing.T) {
	t.Parallel()
	onlyCLI(t)
	g := newOpGroup(t, "unreported")
	o := newOwner(t, g)
	done := make(chan result, 1)
	go func() { done <- run(t, g.args("requeue", "--class", "orders", "--wait", "1m")...) }()
	req := o.request(1)
	o.status(req.ID, deadop.Status{Instance: "a", State: deadop.Done, Done: 3})
	r := <-done
	if took := time.Since(req.At); took < deadop.ReportGrace {
		t.Errorf("over %s after the request, before the grace %s", took, deadop.ReportGrace)
	}
	want := fmt.Sprintf("operation %s is over with 2 of its dead letters acted on by no owner", req.ID)
	if r.code != exitFailure || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "done 3, failed again 0, left 2 of 5") {
		t.Errorf("exit %d, stderr does not say %q:\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	r = run(t, g.args("ops")...)
	if row := regexp.MustCompile(`(?m)^` + req.ID + ` +requeue +done .* 5 +- +3 +0 +0 +0 +2 +class="orders"$`); r.code != 0 || !row.MatchString(r.stdout) {
		t.Errorf("dead ops: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestDeadOpModes: the file form rejects the online flags, the online
// form the file's, and bad values are usage errors; nothing is read
// from a broker for them.
func TestDeadOpModes(t *testing.T) {
	t.Parallel()
	online := func(verb string, more ...string) []string {
		return append([]string{"dead", verb, "--brokers", "127.0.0.1:1", "--group", "g"}, more...)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"dry-run on a file", []string{"dead", "requeue", "state.db", "--all", "--dry-run"}, "--dry-run needs --brokers"},
		{"error-contains on a file", []string{"dead", "discard", "state.db", "--all", "--error-contains", "x"}, "--error-contains needs --brokers"},
		{"yes on a file", []string{"dead", "discard", "state.db", "--all", "--yes"}, "--yes needs --brokers"},
		{"group on a file", []string{"dead", "requeue", "state.db", "1", "--group", "g"}, "--group needs --brokers"},
		{"no state", []string{"dead", "requeue"}, "missing STATE"},
		{"lock-timeout online", online("requeue", "--all", "--lock-timeout", "1s"), "--lock-timeout is for a state file"},
		{"no selection", online("requeue"), "missing a selection: IDs, --class"},
		{"IDs and selection", online("discard", "0000000000000001-1", "--class", "c"), "give IDs or a selection"},
		{"bad ID", online("requeue", "x-1"), `malformed dead letter ID "x-1"`},
		{"bad rate", online("requeue", "--all", "--rate", "-1"), "--rate must be a number of dead letters a second >= 0"},
		{"bad limit", online("requeue", "--all", "--limit", "20001"), "--limit must be between 0 (all) and 20000"},
		{"bad wait", online("requeue", "--all", "--wait", "-1s"), "--wait must be >= 0"},
		{"bad since", online("requeue", "--since", "yesterday"), "--since must be an RFC 3339 time"},
		{"no group", []string{"dead", "requeue", "--brokers", "127.0.0.1:1", "--all"}, "--brokers needs --group"},
		{"yes on requeue", online("requeue", "--all", "--yes"), "unknown flag: --yes"},
		{"ops without brokers", []string{"dead", "ops"}, "--brokers needs host:port"},
		{"ops topic", online("ops", "--topic", "t"), "--topic is not for ops"},
		{"ops who", online("ops", "--who", "x"), "--who needs --cancel"},
		{"ops two", online("ops", "a", "b"), "accepts at most 1 arg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, want %d; stderr does not say %q:\n%s", r.code, exitUsage, tc.want, r.stderr)
			}
		})
	}
}

// TestDeadOpNoMetaTopic: a group without a meta topic (its service never
// ran with the changelog) is refused before anything is written.
func TestDeadOpNoMetaTopic(t *testing.T) {
	t.Parallel()
	onlyCLI(t)
	orders := changelogTopicName("nometa", "orders")
	b, err := devbroker.Start(devbroker.Config{Topics: []string{orders}, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	rec := deadRecord("orders", "n1", 1, "permanent: n1", time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	produce(t, b.Addr(), &kgo.Record{Topic: orders, Key: changelogKey('d', [16]byte{1}, 1), Value: storedValues(t, rec)[0]})
	for _, args := range [][]string{
		{"dead", "requeue", "--brokers", b.Addr(), "--group", "nometa", "--all"},
		{"dead", "ops", "--brokers", b.Addr(), "--group", "nometa"},
	} {
		r := run(t, args...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "group nometa has no meta topic nometa.handoff-meta") {
			t.Errorf("%s: exit %d: %s", args[1], r.code, r.stderr)
		}
	}
}

// TestDeadOpHelp: the help of dead, requeue, discard and ops shows the
// online forms and their flags.
func TestDeadOpHelp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"dead", "--help"}, []string{"ops ", "'dead requeue|discard --brokers HOST:PORT --group GROUP'"}},
		{[]string{"dead", "requeue", "--help"}, []string{"requeue STATE ID... | --all [--class C] | --brokers HOST:PORT[,...] --group GROUP",
			"--dry-run", "--rate float", "--limit int", "--wait duration", "--who string", "--error-contains", "--since", "Ctrl-C cancels",
			"handoff dead requeue --brokers kafka:9092 --group rental --class orders --error-contains timeout --dry-run"}},
		{[]string{"dead", "discard", "--help"}, []string{"discard STATE ID... | --all [--class C] | --brokers", "--yes", "needs --yes",
			"--dry-run", "--rate float", "exits with status\n2"}},
		{[]string{"dead", "ops", "--help"}, []string{"ops --brokers HOST:PORT[,...] --group GROUP [OP] [--cancel OP]", "--cancel string",
			"--json", "GROUP.handoff-meta", "who asked"}},
		{[]string{"--help"}, []string{"with --brokers and --group, 'dead list', 'dead requeue', 'dead discard'\nand 'dead ops'"}},
	} {
		r := run(t, c.args...)
		if r.code != 0 {
			t.Errorf("%q: exit %d: %s", c.args, r.code, r.stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("%q: help does not say %q:\n%s", c.args, w, r.stdout)
			}
		}
	}
	if r := run(t, "dead", "ops", "--help"); strings.Contains(r.stdout, "--topic") {
		t.Errorf("dead ops --help shows --topic:\n%s", r.stdout)
	}
}
