package runtime

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestCommitWhenCaughtUp: with a CommitInterval far longer than the test,
// the offsets of each burst are committed once its last message is
// settled, including a burst whose last handler runs a while after the
// partition caught up. Counts: produced = handled = committed after each
// burst.
func TestCommitWhenCaughtUp(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "cu-a", "cu-b")
	h := func(ctx context.Context, m *handoff.Message) error {
		if strings.HasSuffix(string(m.Value), "-slow") {
			time.Sleep(300 * time.Millisecond) // simulated slow work: settles well after the fetch caught up
		}
		b.record(m)
		return nil
	}
	cfg := b.config(h, nil)
	cfg.CommitInterval = 10 * time.Minute
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := start(t, rt, ctx)

	produced := b.produce(200)
	waitFor(t, "first burst handled", func() bool { u, _ := b.counts(); return u == produced })
	waitFor(t, "first burst committed", func() bool { return b.committed() == int64(produced) })

	produced += b.produceValues("cu-a", "one-key", "x-1", "x-2", "x-slow")
	waitFor(t, "second burst committed", func() bool { return b.committed() == int64(produced) })
	if u, _ := b.counts(); u != produced {
		t.Fatalf("committed %d but handled %d", produced, u)
	}

	if err := rt.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if u, total := b.counts(); u != produced || total != produced {
		t.Fatalf("produced %d, handled %d unique, %d in all", produced, u, total)
	}
}

// TestCommitPacer: a burst of one commit per partition at once, then one
// per gap.
func TestCommitPacer(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	gap := 100 * time.Millisecond
	b := newCommitPacer(3, gap, t0)
	for i := range 3 {
		if d := b.take(t0); d != 0 {
			t.Fatalf("take %d of the burst: wait %s", i, d)
		}
	}
	if d := b.take(t0); d != gap {
		t.Fatalf("after the burst: wait %s, want %s", d, gap)
	}
	if d := b.take(t0.Add(40 * time.Millisecond)); d != 60*time.Millisecond {
		t.Fatalf("40ms later: wait %s, want 60ms", d)
	}
	if d := b.take(t0.Add(gap)); d != 0 {
		t.Fatalf("a gap later: wait %s, want 0", d)
	}
	if d := b.take(t0.Add(time.Hour)); d != 0 || b.tokens != 2 {
		t.Fatalf("an hour later: wait %s, %v tokens left; want 0 and 2 (the burst is capped at 3)", d, b.tokens)
	}
}
