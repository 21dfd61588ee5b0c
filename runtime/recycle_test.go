package runtime

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestRecycleMessages runs classes that recycle their messages
// (Class.RecycleMessages) over 6000 records, with retries in
// place and dead letters: every handler call finds its envelope whole
// (ID, Origin, Key and Value of one record, the Attempt of that call),
// every record that is not a dead letter is done exactly once, and the
// envelopes were reused. A use of an envelope after its recycling, by the
// runtime, is a race the race detector reports.
func TestRecycleMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mod  func(*Class)
	}{
		{"plain", func(*Class) {}},
		{"ordered", func(c *Class) { c.Ordered = true }},
		{"batch", func(c *Class) { c.Handler, c.MaxBatch, c.MaxWait = nil, 16, time.Millisecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n = 6000
			b := setup(t, 3, "orders")
			b.produce(n)
			var (
				mu       sync.Mutex
				done     = map[int]int{} // produced index: done calls
				attempts = map[int]int{} // produced index: calls
				ptrs     = map[*handoff.Message]bool{}
				dead     int
				failures []string
			)
			all := make(chan struct{})
			// handle checks m and returns its result: the records whose
			// index is a multiple of 50 fail once (a retry in place), and
			// those of ordered keys aside, of 1000 for good (which keeps their slab from being recycled).
			handle := func(m *handoff.Message) error {
				mu.Lock()
				defer mu.Unlock()
				i, err := strconv.Atoi(strings.TrimPrefix(string(m.Value), "orders-"))
				want := kafkaID(kafkaIDPrefix(m.Origin.Topic, m.Origin.Partition), m.Origin.Offset)
				switch {
				case err != nil:
					failures = append(failures, fmt.Sprintf("%s: value %q", m.ID, m.Value))
					return nil
				case m.ID != want || string(m.Key) != fmt.Sprintf("key-%d", i%13) || m.Attempt != attempts[i]:
					failures = append(failures, fmt.Sprintf("%s (want ID %s): key %q value %q attempt %d, want attempt %d",
						m.ID, want, m.Key, m.Value, m.Attempt, attempts[i]))
				}
				attempts[i]++
				ptrs[m] = true
				var res error
				switch {
				case i%1000 == 0 && tc.name != "ordered":
					res = handoff.Permanent(fmt.Errorf("record %d is poison", i))
					dead++
				case i%50 == 0 && m.Attempt == 0:
					res = fmt.Errorf("record %d fails once", i)
				default:
					done[i]++
				}
				if len(done)+dead == n {
					close(all)
				}
				return res
			}
			cfg := b.config(func(_ context.Context, m *handoff.Message) error { return handle(m) }, func(c *Class) {
				c.RecycleMessages = true
				c.Retry.InitialBackoff, c.Retry.MaxBackoff = time.Millisecond, time.Millisecond
				c.Retry.MaxAttempts = 3
				tc.mod(c)
				if c.MaxBatch > 0 {
					c.BatchHandler = func(_ context.Context, ms []*handoff.Message) error {
						var be handoff.BatchError
						for i, m := range ms {
							if err := handle(m); err != nil {
								be.Fail(i, err)
							}
						}
						return be.Err()
					}
				}
			})
			rt, wait := startNew(t, cfg)
			waitClosed(t, all, func() string {
				mu.Lock()
				defer mu.Unlock()
				return fmt.Sprintf("%d of %d done, %d dead", len(done), n, dead)
			})
			rep := stopAndWait(t, rt, wait)
			mu.Lock()
			defer mu.Unlock()
			for _, f := range failures[:min(len(failures), 10)] {
				t.Error(f)
			}
			for i, k := range done {
				if k != 1 {
					t.Errorf("record %d done %d times", i, k)
				}
			}
			if rep.Succeeded != uint64(len(done)) || rep.DeadLettered != uint64(dead) {
				t.Errorf("report: %d succeeded, %d dead letters; handlers: %d done, %d dead", rep.Succeeded, rep.DeadLettered, len(done), dead)
			}
			if got := b.committed(); got != n {
				t.Errorf("committed %d offsets, want %d", got, n)
			}
			// A slab of recycledLen envelopes serves many batches: far fewer
			// envelopes than calls.
			t.Logf("%d envelopes for %d calls", len(ptrs), len(done)+dead+n/50)
			if calls := len(done) + dead + n/50; len(ptrs) > calls/2 {
				t.Errorf("%d envelopes for %d handler calls: not recycled", len(ptrs), calls)
			}
		})
	}
}
