package runtime

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
)

// TestTransactionalInput: one partition holds, in this order, a plain
// record, a committed transaction of two records, an aborted transaction
// of two, a plain record and an open transaction of one (offsets 0..8,
// the markers at 3 and 6), written by a real transactional producer
// (franz-go's TransactionalID) on the embedded broker. The commit
// interval is longer than the test, so every commit while it runs is the
// one made when the partition caught up.
//
// ReadCommitted (the zero value) hands the handler the plain and the
// committed records only, not the aborted ones and not the open one; the
// caught-up commit reaches the last stable offset (8, the open
// transaction's first record) and the lag, counted to it, is 0. Once the
// open transaction commits, its record is handled and the commit reaches
// the high watermark past its marker (10), lag 0.
//
// ReadUncommitted hands the handler every record, the aborted and the
// open one included; the commit reaches the high watermark (9), and
// once the open transaction commits, past its marker (10), lag 0.
//
// Before, both read uncommitted and the partition's lag and caught-up
// commit followed the last record's offset + 1: after the marker that
// ends the partition, the commit stayed one short of the high watermark
// (lag 1 for good) and the caught-up commit never fired again.
// Counts at the stop: each expected record handled exactly once, none
// other, committed = the partition's end.
func TestTransactionalInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		level IsolationLevel
		// first is what is handled before the open transaction commits,
		// firstEnd the commit point then.
		first    []string
		firstEnd int64
	}{
		{ReadCommitted, []string{"plain-0", "c-1", "c-2", "plain-1"}, 8},
		{ReadUncommitted, []string{"plain-0", "c-1", "c-2", "a-1", "a-2", "plain-1", "o-1"}, 9},
	} {
		t.Run(tc.level.String(), func(t *testing.T) {
			t.Parallel()
			testTransactionalInput(t, tc.level, tc.first, tc.firstEnd)
		})
	}
}

func testTransactionalInput(t *testing.T, level IsolationLevel, first []string, firstEnd int64) {
	const topic = "txin"
	b := setup(t, 1, topic)
	var mu sync.Mutex
	var handled []string
	cfg := b.config(func(_ context.Context, m *handoff.Message) error {
		mu.Lock()
		handled = append(handled, string(m.Value))
		mu.Unlock()
		return nil
	}, nil)
	cfg.CommitInterval = 10 * time.Minute // only the caught-up commit moves while running
	cfg.IsolationLevel = level
	// values returns the values handled, sorted: the class's 4 workers
	// handle them in any order.
	values := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(slices.Values(handled))
	}

	tx, err := kgo.NewClient(kgo.SeedBrokers(b.broker.Addrs()...), kgo.DefaultProduceTopic(topic),
		kgo.TransactionalID("tx-"+t.Name()), kgo.TransactionTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// begin begins a transaction and produces values in it.
	begin := func(values ...string) {
		t.Helper()
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range values {
			if err := tx.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	end := func(try kgo.TransactionEndTry) {
		t.Helper()
		if err := tx.EndTransaction(ctx, try); err != nil {
			t.Fatal(err)
		}
	}
	b.produceValues(topic, "k", "plain-0") // 0
	begin("c-1", "c-2")                    // 1, 2
	end(kgo.TryCommit)                     // commit marker 3
	begin("a-1", "a-2")                    // 4, 5
	end(kgo.TryAbort)                      // abort marker 6
	b.produceValues(topic, "k", "plain-1") // 7
	begin("o-1")                           // 8, left open

	rt, wait := startNew(t, cfg)
	lag := func() int64 {
		if g := rt.kafka.fetchingGen(); g != nil {
			if err := g.sampleLagOnce(ctx); err != nil {
				return -1
			}
		}
		return rt.Stats()[0].Lag
	}
	// committed is the group's committed offset, -1 before the group
	// has one (b.committed fails then).
	committed := func() int64 {
		o := devbroker.NewOffsets(b.broker.Addrs())
		defer o.Close()
		off, err := o.Committed(ctx, b.group, b.topics)
		if err != nil {
			return -1
		}
		return devbroker.Sum(off)
	}
	check := func(phase string, want []string, end int64) {
		t.Helper()
		waitFor(t, phase+": caught-up commit", func() bool { return committed() >= end })
		if c := b.committed(); c != end {
			t.Fatalf("%s: committed %d, want %d", phase, c, end)
		}
		if got := values(); !slices.Equal(got, want) {
			t.Fatalf("%s: handled %q, want %q (sorted)", phase, got, want)
		}
		waitFor(t, phase+": lag 0", func() bool { return lag() == 0 })
	}
	slices.Sort(first)
	check("open transaction", first, firstEnd)

	end(kgo.TryCommit) // commit marker 9
	want := first
	if level == ReadCommitted {
		want = slices.Sorted(slices.Values(append(slices.Clone(first), "o-1")))
	}
	check("all decided", want, 10)

	rep := shutdownAndWait(t, rt, wait)
	if got := values(); !slices.Equal(got, want) {
		t.Fatalf("after the stop: handled %q, want %q (sorted)", got, want)
	}
	if c := b.committed(); c != 10 {
		t.Fatalf("after the stop: committed %d, want 10", c)
	}
	if rep.Snapshotted != 0 || rep.Unstarted != 0 {
		t.Fatalf("the stop saved %d messages (%d unstarted), want none", rep.Snapshotted, rep.Unstarted)
	}
}

// TestIsolationLevelValidated: New refuses an IsolationLevel other than
// ReadCommitted and ReadUncommitted, naming the value.
func TestIsolationLevelValidated(t *testing.T) {
	cfg := Config{StatePath: t.TempDir() + "/s.db", IsolationLevel: IsolationLevel(7),
		Classes: []Class{{Name: "c", Handler: func(context.Context, *handoff.Message) error { return nil }}}}
	_, err := newRuntime(cfg)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "IsolationLevel(7)") {
		t.Fatalf("New with IsolationLevel 7: %v; want an ErrConfig naming IsolationLevel(7)", err)
	}
	for _, l := range []IsolationLevel{ReadCommitted, ReadUncommitted} {
		cfg.IsolationLevel = l
		if _, err := newRuntime(cfg); err != nil {
			t.Fatalf("New with %s: %v", l, err)
		}
	}
}
