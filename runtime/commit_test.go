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
	b := setup(t, 2, "cu-a", "cu-b")
	h := func(ctx context.Context, m *handoff.Message) error {
		if strings.HasSuffix(string(m.Value), "-slow") {
			time.Sleep(300 * time.Millisecond) // settles well after the fetch caught up
		}
		b.record(m)
		return nil
	}
	cfg := b.config(h, nil)
	cfg.CommitInterval = 10 * time.Minute
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := start(t, rt, ctx)

	produced := b.produce(200)
	waitFor(t, "first burst handled", func() bool { u, _ := b.counts(); return u == produced })
	waitFor(t, "first burst committed", func() bool { return b.committed() == int64(produced) })

	produced += b.produceValues("cu-a", "x-1", "x-2", "x-slow")
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
