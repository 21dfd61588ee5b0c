package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestRecoveryQuarantineAndUnknownClass: at start, an undecodable record
// is quarantined, a message of a class that no longer exists becomes a
// dead letter, and the good records around them are re-pushed.
func TestRecoveryQuarantineAndUnknownClass(t *testing.T) {
	t.Parallel()
	state := t.TempDir() + "/s.db"
	snapshottest.SeedPending(t, state,
		snapshot.Record{Message: handoff.Message{ID: "a", Class: "mail"}},
		snapshot.Record{Message: handoff.Message{ID: "b", Class: "gone"}},
		snapshot.Record{Message: handoff.Message{ID: "c", Class: "mail"}},
	)
	// Garbage between them (a 9-byte key sorts between keys 2 and 3), as
	// a torn or foreign write would leave it.
	snapshottest.Damage(t, state, snapshot.BucketPending, append(snapshottest.SeqKey(2), 0), []byte{0xff, 0x01})

	got := make(chan string, 10)
	rt, err := newRuntime(Config{StatePath: state, Logger: testLogger(t), Classes: []Class{{Name: "mail", Workers: 1,
		Handler: func(_ context.Context, m *handoff.Message) error { got <- m.ID; return nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	if a, c := <-got, <-got; a != "a" || c != "c" {
		t.Errorf("re-pushed %s, %s", a, c)
	}
	rt.Shutdown(context.Background())
	rep, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Repushed != 2 || rep.Quarantined != 1 || rep.UnknownClass != 1 {
		t.Errorf("report: repushed %d quarantined %d unknown %d", rep.Repushed, rep.Quarantined, rep.UnknownClass)
	}
	if q := snapshottest.Quarantined(t, state); len(q) != 1 || q[0].Bucket != snapshot.BucketPending || q[0].Err == "" {
		t.Errorf("quarantine: %+v", q)
	}
	dead := snapshottest.Dead(t, state)
	if len(dead) != 1 || dead[0].Record.Message.ID != "b" || dead[0].Record.Reason != "unknown class" {
		t.Errorf("dead letters: %+v", dead)
	}
	if n := snapshottest.Counts(t, state)[snapshot.BucketPending]; n != 0 {
		t.Errorf("pending %d", n)
	}
}

// TestFailedBecomesDeadLetter: a failed message is saved as a dead letter
// with its error and attempt, its offset is committed, and the partition
// moves on.
func TestFailedBecomesDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	produced := b.produce(20)
	var n int
	all := make(chan struct{})
	cfg := b.config(func(_ context.Context, m *handoff.Message) error {
		b.mu.Lock()
		n++
		if n == produced+2 { // the panicking one runs 3 times
			close(all)
		}
		b.mu.Unlock()
		if string(m.Value) == "orders-3" {
			return handoff.Permanent(errPoison)
		}
		if string(m.Value) == "orders-4" {
			panic("boom")
		}
		return nil
	}, func(c *Class) {
		c.Workers = 1
		c.Retry.InitialBackoff = time.Millisecond
		c.Retry.MaxBackoff = time.Millisecond
	})
	rt, wait := startNew(t, cfg)
	<-all
	rep := stopAndWait(t, rt, wait)
	if rep.DeadLettered != 2 || rep.Retried != 2 || rep.Succeeded != uint64(produced-2) {
		t.Errorf("report %v", rep)
	}
	if got := b.committed(); got != int64(produced) {
		t.Errorf("committed %d, want %d", got, produced)
	}
	dead := snapshottest.Dead(t, b.state)
	if len(dead) != 2 {
		t.Fatalf("dead letters: %d", len(dead))
	}
	// The permanent error is not retried; the panic is, up to MaxAttempts.
	wantAttempts := map[string]int{"orders-3": 1, "orders-4": DefaultMaxAttempts}
	for _, d := range dead {
		rec := d.Record
		if rec.Reason != "failed" || rec.Err == "" || rec.Message.Attempt != wantAttempts[string(rec.Message.Value)] ||
			!rec.Message.Origin.IsKafka() || rec.FirstFailed.IsZero() || rec.SavedAt.Before(rec.FirstFailed) {
			t.Errorf("dead letter %+v", rec)
		}
	}
}

var errPoison = errString("poison message")

type errString string

func (e errString) Error() string { return string(e) }
