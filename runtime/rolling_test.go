package runtime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/testio"
)

// TestRollingDeploy runs three instances of one group on one broker while
// records are produced, and restarts each in turn on its own state file
// (a StatefulSet's rolling update), for each stop policy. Nothing may be
// lost; duplicates and per-key order inversions are reported. With
// local state only, the files are left empty; with the changelog, a file
// may keep the stale records of partitions that moved (their new owners
// finished them), and the changelog must hold none: an instance started
// last on an empty disk, owning every partition, has nothing to re-push.
//
// On franz-go two of the four also run under the consumer group protocol
// (KIP-848), the broker assigning: snapshot with the changelog, redeliver
// with local state only (consumer/...).
func TestRollingDeploy(t *testing.T) {
	t.Parallel()
	for _, policy := range []StopPolicy{StopSnapshot, StopRedeliver} {
		for _, local := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/local=%v", policy, local), func(t *testing.T) {
				t.Parallel()
				testRollingDeploy(t, GroupProtocol(testio.Protocol()), policy, local)
			})
			if testClient() != ClientFranzGo || local != (policy == StopRedeliver) || testio.Protocol() == testio.Consumer {
				continue
			}
			t.Run(fmt.Sprintf("consumer/%s/local=%v", policy, local), func(t *testing.T) {
				t.Parallel()
				testRollingDeploy(t, GroupProtocolConsumer, policy, local)
			})
		}
	}
}

func testRollingDeploy(t *testing.T, proto GroupProtocol, policy StopPolicy, local bool) {
	const (
		instances = 3
		total     = 6000
		keys      = 50
	)
	b := setupProtocol(t, proto, 6, "orders")
	dir := t.TempDir()

	var mu sync.Mutex
	maxOff := map[string]int64{} // key -> highest offset handled
	inversions := 0
	var handled atomic.Int64
	h := func(ctx context.Context, m *handoff.Message) error {
		time.Sleep(2 * time.Millisecond) // simulated work: slower than production
		b.mu.Lock()
		first := b.handled[m.ID] == 0
		b.mu.Unlock()
		mu.Lock()
		if first {
			if prev, ok := maxOff[string(m.Key)]; ok && m.Origin.Offset < prev {
				inversions++
			}
			maxOff[string(m.Key)] = max(maxOff[string(m.Key)], m.Origin.Offset)
		}
		mu.Unlock()
		b.record(m)
		handled.Add(1)
		return nil
	}
	newInstance := func(i int) (*Runtime, func() (*Report, error)) {
		cfg := b.config(h, func(c *Class) { c.Ordered = true; c.StopPolicy = policy; c.Workers = 2; c.QueueSize = 32 })
		cfg.Instance = fmt.Sprintf("pod-%d", i)
		cfg.StatePath = filepath.Join(dir, fmt.Sprintf("pod-%d.db", i))
		cfg.DrainTimeout = time.Millisecond // leave work behind at each stop
		cfg.HardStopGrace = time.Second
		cfg.RevokeTimeout = time.Second
		cfg.LocalStateOnly = local
		rt, err := newRuntime(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return rt, start(t, rt, context.Background())
	}

	// Produce steadily in the background.
	// The producer ends with the test: a test that fails before it is
	// done must not have it report into a finished test (a panic that
	// took the package's other results with it, once under load).
	produceCtx, stopProducing := context.WithCancel(context.Background())
	produced := make(chan struct{})
	t.Cleanup(func() { stopProducing(); <-produced })
	go func() {
		defer close(produced)
		w := devbroker.NewWriter(b.broker.Addrs())
		defer devbroker.CloseWriter(w)
		for batch := range total / 100 {
			var msgs []kafka.Message
			for i := range 100 {
				n := batch*100 + i
				msgs = append(msgs, kafka.Message{Topic: "orders", Key: fmt.Appendf(nil, "key-%d", n%keys), Value: fmt.Appendf(nil, "%d", n)})
			}
			if err := w.WriteMessages(produceCtx, msgs...); err != nil {
				if produceCtx.Err() == nil {
					t.Error(err)
				}
				return
			}
			select { // paces production across the deploy
			case <-produceCtx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	rts := make([]*Runtime, instances)
	waits := make([]func() (*Report, error), instances)
	for i := range instances {
		rts[i], waits[i] = newInstance(i)
	}
	var reps []*Report
	commitMissed := 0
	for i := range instances {
		waitFor(t, "progress", func() bool { return handled.Load() > int64(1000*(i+1)) })
		rts[i].Shutdown(context.Background())
		rep, err := waits[i]()
		checkStop(t, err, &commitMissed)
		reps = append(reps, rep)
		rts[i], waits[i] = newInstance(i)
	}
	<-produced
	waitFor(t, "every record handled", func() bool {
		u, _ := b.counts()
		return u == total
	})
	for i := range instances {
		rts[i].Shutdown(context.Background())
		rep, err := waits[i]()
		checkStop(t, err, &commitMissed)
		reps = append(reps, rep)
	}
	unique, all := b.counts()
	if unique != total {
		t.Errorf("lost %d of %d", total-unique, total)
	}
	if got := b.committed(); got != total {
		t.Errorf("committed %d, want %d", got, total)
	}
	var snap, given, revoked int
	for _, r := range reps {
		snap += r.Snapshotted
		given += r.GivenBack
		revoked += r.Revoked
	}
	if local {
		for i := range instances {
			assertPending(t, filepath.Join(dir, fmt.Sprintf("pod-%d.db", i)), 0)
		}
	} else {
		last, wait := newInstance(instances) // an empty disk
		waitFor(t, "the last instance restored every partition", func() bool { return last.clog.restoredParts.Load() == 6 })
		rep := stopAndWait(t, last, wait)
		if rep.Repushed != 0 || rep.RestoredPartitions != 6 {
			t.Errorf("the changelog still holds %d saved messages (restored %d partitions)", rep.Repushed, rep.RestoredPartitions)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if policy == StopRedeliver && snap != 0 {
		t.Errorf("redeliver saved %d Kafka messages", snap)
	}
	t.Logf("policy %s: produced %d, lost %d, duplicates %d, order inversions %d; snapshotted %d, given back at stops %d, revoked at rebalances %d, final commits missed %d",
		policy, total, total-unique, all-unique, inversions, snap, given, revoked, commitMissed)
}

// checkStop accepts a clean stop, and counts one whose final commit was
// missed because a rebalance ended the generation during the stop: the
// generation's own end committed what was settled then, and Kafka
// delivers the rest again (duplicates, not losses).
func checkStop(t *testing.T, err error, missed *int) {
	t.Helper()
	switch {
	case err == nil:
	case errors.Is(err, ErrCommit):
		*missed++
	default:
		t.Fatal(err)
	}
}
