package runtime

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/handoff-go/handoff"
)

// TestBatchHandlerMayKeep: a batch handler may keep the slice and the
// messages it is handed after it returns, as message.go says (issue 23:
// the batch handler's doc said the envelopes were reused). 600 Kafka
// records, whose items the runtime recycles, go through a batch class,
// with and without middleware; every kept message still names its own
// record (ID, origin, key, value) once all batches have run, and under
// -race a write to one after its handler returned is a data race.
func TestBatchHandlerMayKeep(t *testing.T) {
	skipIfRecycled(t)
	for _, mw := range []bool{false, true} {
		t.Run(fmt.Sprintf("middleware=%v", mw), func(t *testing.T) {
			t.Parallel()
			const n = 600
			b := setup(t, 3, "beats")
			var mu sync.Mutex
			var kept [][]*handoff.Message
			var seen int
			all := make(chan struct{})
			cfg := b.config(nil, func(c *Class) {
				c.Handler, c.BatchHandler, c.MaxBatch, c.Workers = nil, func(ctx context.Context, ms []*handoff.Message) error {
					mu.Lock()
					defer mu.Unlock()
					kept = append(kept, ms)
					if seen += len(ms); seen == n {
						close(all)
					}
					return nil
				}, 25, 2
				if mw {
					c.Middleware = []handoff.Middleware{func(next handoff.HandlerFunc) handoff.HandlerFunc { return next }}
				}
			})
			rt, wait := startNew(t, cfg)
			b.produce(n)
			<-all
			stopAndWait(t, rt, wait)

			mu.Lock()
			defer mu.Unlock()
			ids := map[string]bool{}
			for _, ms := range kept {
				for _, m := range ms {
					o := m.Origin
					if m.ID != fmt.Sprintf("%s/%d/%d", o.Topic, o.Partition, o.Offset) || o.Topic != "beats" || m.Class != "beats" {
						t.Fatalf("kept message %q has origin %v, class %q", m.ID, o, m.Class)
					}
					v, ok := strings.CutPrefix(string(m.Value), "beats-")
					var i int
					if _, err := fmt.Sscan(v, &i); !ok || err != nil || string(m.Key) != fmt.Sprintf("key-%d", i%13) {
						t.Fatalf("kept message %s: key %q, value %q; not the record's", m.ID, m.Key, m.Value)
					}
					ids[m.ID] = true
				}
			}
			if len(ids) != n {
				t.Fatalf("%d distinct messages kept, want %d", len(ids), n)
			}
		})
	}
}
