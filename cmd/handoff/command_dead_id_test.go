package main

import (
	"context"
	"errors"
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
	"github.com/handoff-go/handoff/snapshot"
)

// capturingStore opens a state file at path with the changelog on: every
// record it sends is appended to *changes, which is also what its
// changelog reads back (Restore).
func capturingStore(t *testing.T, path string, changes *[]snapshot.LogRecord) (*snapshot.State, *snapshot.Changelog) {
	t.Helper()
	st, err := snapshot.Open(path, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := st.OpenChangelog(snapshot.ChangelogConfig{Log: memLog{changes},
		Route: func(m *handoff.Message) (string, int32, bool) { return m.Origin.Topic, int32(m.Origin.Partition), true }})
	if err != nil {
		t.Fatal(err)
	}
	return st, cl
}

// memLog is a snapshot.Log over a slice: a record sent is acknowledged
// at once, at the next offset of its partition.
type memLog struct{ recs *[]snapshot.LogRecord }

func (l memLog) Send(recs []snapshot.LogRecord) func(context.Context) error {
	for i := range recs {
		for _, r := range *l.recs {
			if r.Input == recs[i].Input && r.Partition == recs[i].Partition {
				recs[i].Offset = r.Offset + 1
			}
		}
		*l.recs = append(*l.recs, recs[i])
	}
	return func(context.Context) error { return nil }
}

func (l memLog) Read(_ context.Context, input string, p int32, from int64, fn func([]snapshot.LogRecord) error) (int64, error) {
	var batch []snapshot.LogRecord
	next := from
	for _, r := range *l.recs {
		if r.Input == input && r.Partition == p && r.Offset >= from {
			batch = append(batch, r)
			next = r.Offset + 1
		}
	}
	return next, fn(batch)
}

func (memLog) Topic(input string) string { return input + ".changelog" }

// keyColumn runs a dead list and returns its KEY column by message ID;
// col is the KEY column's index (0 for a file, 3 for --brokers).
func keyColumn(t *testing.T, col int, args ...string) map[string]string {
	t.Helper()
	r := run(t, args...)
	if r.code != 0 {
		t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
	}
	out := map[string]string{}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > col+2 {
			out[f[col+2]] = f[col] // the message ID is two columns on
		}
	}
	return out
}

// TestDeadListIDsAgree: a dead letter has one ID in the file listing of
// the state file that wrote it, in that of a file that restored it from
// the changelog under other keys of its own, and in the cluster listing
// of the changelog; dead show and dead discard take that ID in the
// restorer's file and act on that dead letter alone; a bare number in a
// file with IDs is refused, saying the form.
func TestDeadListIDsAgree(t *testing.T) {
	t.Parallel()
	if testio.Client() != testio.KafkaGo {
		t.Skip("the CLI reads the changelog with its own client: once is enough")
	}
	const group = "g3"
	b, err := devbroker.Start(devbroker.Config{Topics: []string{changelogTopicName(group, "orders")}, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	t0 := time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)
	dir := t.TempDir()

	// The writer: three dead letters, the first discarded.
	var written []snapshot.LogRecord
	pathA := filepath.Join(dir, "a.db")
	a, _ := capturingStore(t, pathA, &written)
	for _, r := range []snapshot.Record{deadRecord("orders", "w0", 1, "permanent: w0", t0), deadRecord("orders", "w1", 1, "permanent: w1", t0.Add(time.Second)),
		deadRecord("orders", "w2", 2, "permanent: w2", t0.Add(2*time.Second))} {
		err = errors.Join(err, a.MoveToDead(snapshot.Move{Alone: true}, r))
	}
	w0, ok, ferr := a.DeadByMessageID("w0")
	if err = errors.Join(err, ferr); err == nil && ok {
		err = a.Delete(snapshot.Source{From: snapshot.FromDead, Key: w0.Key})
	}
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	if err != nil || !ok {
		t.Fatalf("writer: w0 found %v, %v", ok, err)
	}

	// The restorer: two dead letters of its own (keys 1 and 2), then the
	// partition restored from the changelog (the writer's records, then
	// its own), the writer's under its next keys (3 and 4; the writer's
	// were 2 and 3).
	own := slices.Clone(written)
	pathB := filepath.Join(dir, "b.db")
	bst, bcl := capturingStore(t, pathB, &own)
	for _, r := range []snapshot.Record{deadRecord("orders", "r0", 1, "permanent: r0", t0.Add(3*time.Second)), deadRecord("orders", "r1", 1, "permanent: r1", t0.Add(4*time.Second))} {
		err = errors.Join(err, bst.MoveToDead(snapshot.Move{Alone: true}, r))
	}
	if err != nil {
		t.Fatal(err)
	}
	_, err = bcl.Restore(t.Context(), snapshot.Partition{Topic: "orders", Partition: 0})
	if cerr := bst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	var produced []*kgo.Record
	for _, c := range own {
		produced = append(produced, &kgo.Record{Topic: changelogTopicName(group, c.Input), Partition: c.Partition, Key: c.Key, Value: c.Value})
	}
	produce(t, b.Addr(), produced...)

	onA := keyColumn(t, 0, "dead", "list", pathA)
	onB := keyColumn(t, 0, "dead", "list", pathB)
	cluster := keyColumn(t, 3, "dead", "list", "--brokers", b.Addr(), "--group", group)
	form := regexp.MustCompile(`^[0-9a-f]{16}-[1-9][0-9]*$`)
	for _, msg := range []string{"w1", "w2"} {
		if onA[msg] == "" || onB[msg] != onA[msg] || cluster[msg] != onA[msg] || !form.MatchString(onA[msg]) {
			t.Errorf("dead letter %s: ID %q in the writer's file, %q in the restorer's, %q in the changelog; want one ID of the form <hex>-<n>",
				msg, onA[msg], onB[msg], cluster[msg])
		}
	}
	for _, msg := range []string{"r0", "r1"} {
		if onB[msg] == "" || cluster[msg] != onB[msg] {
			t.Errorf("the restorer's own dead letter %s: ID %q in its file, %q in the changelog", msg, onB[msg], cluster[msg])
		}
	}
	if len(onA) != 2 || len(onB) != 4 || len(cluster) != 4 {
		t.Errorf("listed %v in the writer's file, %v in the restorer's, %v in the changelog", onA, onB, cluster)
	}

	// show and discard by the ID in the restorer's file.
	if r := run(t, "dead", "show", pathB, onA["w2"]); r.code != 0 || !strings.Contains(r.stdout, "id            w2\n") ||
		!strings.Contains(r.stdout, "key           "+onA["w2"]+"\n") {
		t.Errorf("dead show %s in the restorer's file: exit %d\n%s%s", onA["w2"], r.code, r.stdout, r.stderr)
	}
	if r := run(t, "dead", "discard", pathB, onA["w1"]); r.code != 0 {
		t.Fatalf("dead discard %s: exit %d: %s", onA["w1"], r.code, r.stderr)
	}
	left := keyColumn(t, 0, "dead", "list", pathB)
	if _, ok := left["w1"]; ok || len(left) != 3 || left["w2"] != onB["w2"] || left["r0"] != onB["r0"] || left["r1"] != onB["r1"] {
		t.Errorf("after discarding %s (w1) the restorer lists %v, want %v without w1", onA["w1"], left, onB)
	}
	r := run(t, "dead", "discard", pathB, "3")
	if r.code != exitUsage || !strings.Contains(r.stderr, "bare key") || !strings.Contains(r.stderr, "16 hex digits") {
		t.Errorf("dead discard of a bare number: exit %d: %s", r.code, r.stderr)
	}
	if got := keyColumn(t, 0, "dead", "list", pathB); len(got) != 3 {
		t.Errorf("a refused discard changed the file: %v", got)
	}
}
