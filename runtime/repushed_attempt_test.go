package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestStopKeepsAttemptsOfSavedMessages: a message re-pushed from the
// state file fails its first attempt (a retry in place, Attempt 1) and
// is still in the pool at the stop, either interrupted in its second
// attempt or, its backoff over, queued behind a busy worker. Its pending
// record must then say Attempt 1, as a fetched message's snapshot does:
// the stop left the record as it was before the run, so the attempt
// counted was lost and the retry policy's budget started over at each
// restart.
func TestStopKeepsAttemptsOfSavedMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// unstarted: a second message holds the only worker while the
		// first one's backoff ends; otherwise the first one's second
		// attempt is interrupted.
		unstarted bool
	}{{"interrupted", false}, {"unstarted", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			state := t.TempDir() + "/s.db"
			recs := []snapshot.Record{{Message: handoff.Message{ID: "p1", Class: "jobs", Key: []byte("a")}, Reason: reasonUnstarted}}
			if tc.unstarted {
				recs = append(recs, snapshot.Record{Message: handoff.Message{ID: "p2", Class: "jobs", Key: []byte("b")}, Reason: reasonUnstarted})
			}
			snapshottest.SeedPending(t, state, recs...)
			blocked := make(chan struct{})
			jobs := Class{Name: "jobs", Workers: 1, QueueSize: 4,
				Retry: RetryPolicy{MaxAttempts: 5, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 5 * time.Millisecond},
				Handler: func(ctx context.Context, m *handoff.Message) error {
					if m.ID == "p1" && m.Attempt == 0 {
						return errors.New("job failed")
					}
					close(blocked)
					<-ctx.Done()
					return context.Cause(ctx)
				}}
			rt, err := newRuntime(Config{StatePath: state, Classes: []Class{jobs}, Logger: testLogger(t),
				DrainTimeout: 50 * time.Millisecond, HardStopGrace: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			wait := start(t, rt, context.Background())
			<-blocked
			if tc.unstarted {
				waitFor(t, "p1's backoff over", func() bool {
					s := rt.classes.byName["jobs"].pool.Stats()
					return s.Waiting == 0 && s.Queued == 1
				})
			}
			rep := stopAndWait(t, rt, wait)
			if rep.Retried != 1 {
				t.Fatalf("retried %d, want 1", rep.Retried)
			}

			pending := snapshottest.Pending(t, state)
			if len(pending) != len(recs) {
				t.Fatalf("%d pending records, want %d", len(pending), len(recs))
			}
			for _, e := range pending {
				if e.Record.Message.ID != "p1" {
					continue
				}
				if e.Record.Message.Attempt != 1 || e.Record.FirstFailed.IsZero() {
					t.Errorf("p1 saved with Attempt %d, first failed %v; want Attempt 1 and its first failure", e.Record.Message.Attempt, e.Record.FirstFailed)
				}
			}
		})
	}
}
