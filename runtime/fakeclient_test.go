package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
)

// fakeClient is a third kclient.Client: an eager member that assigns
// every partition of records at once, in one session, and serves their
// records from memory. Its commits can be made to fail (failCommits)
// and its Close to hang until unhang is closed (hangClose), so that
// tests drive a generation and a stop through a member that misbehaves
// as a broker or a client may.
type fakeClient struct {
	records map[kclient.Partition][]kclient.Record
	// hwm is the high watermark the records report: above the last
	// offset, the partitions never catch up, so only the interval and
	// the stop commit.
	hwm         int64
	failCommits atomic.Bool
	// fenceCommits makes commits fail as a broker fences a member whose
	// generation ended (UNKNOWN_MEMBER_ID).
	fenceCommits atomic.Bool
	hangClose    bool
	// cooperative makes the session cooperative: its partitions come
	// with the test's calls of keeper.Assign and keeper.Revoke, as
	// franz-go's callbacks make them.
	cooperative bool
	keeper      kclient.Keeper // set by Join
	unhang      chan struct{}  // closed by the test: a hung Close returns

	mu        sync.Mutex
	committed map[kclient.Partition]int64 // the highest commit that succeeded
	commits   int                         // attempts, failed ones too

	loops   sync.WaitGroup // the session's quiesce after ctx ended
	endKeep context.CancelFunc
	kept    chan struct{} // closed when the keeper returned
	closed  chan struct{} // closed when Close returned
}

func newFakeClient(partitions int, perPartition int, hwm int64) *fakeClient {
	f := &fakeClient{records: map[kclient.Partition][]kclient.Record{}, hwm: hwm, unhang: make(chan struct{}),
		committed: map[kclient.Partition]int64{}, kept: make(chan struct{}), closed: make(chan struct{})}
	for p := range partitions {
		part := kclient.Partition{Topic: "orders", Partition: p}
		for o := range perPartition {
			f.records[part] = append(f.records[part], kclient.Record{Offset: int64(o), End: hwm,
				Key: []byte(fmt.Sprintf("k%d", o)), Value: []byte(fmt.Sprintf("v%d/%d", p, o))})
		}
	}
	return f
}

func (f *fakeClient) Join(ctx context.Context, _ []string, begin kclient.BeginFunc) error {
	keeper := begin(ctx, &fakeSession{f: f})
	f.keeper = keeper
	end, cancel := context.WithCancel(context.Background())
	f.endKeep = cancel
	go func() {
		defer close(f.kept)
		keeper.Keep(end)
	}()
	f.loops.Go(func() {
		<-ctx.Done()
		keeper.Quiesce()
	})
	return nil
}

func (f *fakeClient) Wait() { f.loops.Wait() }

func (f *fakeClient) Missing(context.Context, []string) (map[string]bool, error) {
	return map[string]bool{}, nil
}

func (f *fakeClient) Offsets(_ context.Context, ps []kclient.Partition) (map[kclient.Partition]kclient.Range, error) {
	offs := map[kclient.Partition]kclient.Range{}
	for _, p := range ps {
		offs[p] = kclient.Range{First: 0, Last: f.hwm}
	}
	return offs, nil
}

// Committed returns the fake's commits that succeeded.
func (f *fakeClient) Committed(_ context.Context, ps []kclient.Partition) (map[kclient.Partition]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	offs := map[kclient.Partition]int64{}
	for _, p := range ps {
		if o, ok := f.committed[p]; ok {
			offs[p] = o
		}
	}
	return offs, nil
}

func (f *fakeClient) Partitions(context.Context, []string) ([]kclient.Partition, error) {
	return nil, nil
}

// Close ends the session's keeper, as a client's close ends its
// membership; a hanging one first waits for unhang.
func (f *fakeClient) Close(time.Time) {
	defer close(f.closed)
	if f.hangClose {
		<-f.unhang
	}
	if f.endKeep != nil {
		f.endKeep()
		<-f.kept
	}
}

func (f *fakeClient) commitsMade() (map[kclient.Partition]int64, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[kclient.Partition]int64, len(f.committed))
	for p, o := range f.committed {
		out[p] = o
	}
	return out, f.commits
}

// fakeSession is the fake's one eager session.
type fakeSession struct{ f *fakeClient }

func (s *fakeSession) Eager() bool { return !s.f.cooperative }

func (s *fakeSession) Generation() int32 {
	if s.f.cooperative {
		return -1
	}
	return 1
}

func (s *fakeSession) Assigned() []kclient.Assigned {
	if s.f.cooperative {
		return nil
	}
	var ps []kclient.Assigned
	for p := range s.f.records {
		ps = append(ps, kclient.Assigned{Partition: p, Offset: 0})
	}
	return ps
}

func (s *fakeSession) Commit(offsets map[string]map[int]int64) error {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commits++
	if f.failCommits.Load() {
		return errors.New("fake: the coordinator is gone")
	}
	if f.fenceCommits.Load() {
		return fmt.Errorf("fake: orders/0: %w", kerr.UnknownMemberID)
	}
	for topic, parts := range offsets {
		for p, off := range parts {
			k := kclient.Partition{Topic: topic, Partition: p}
			f.committed[k] = max(f.committed[k], off)
		}
	}
	return nil
}

func (s *fakeSession) Source(_ context.Context, a kclient.Assigned) kclient.Source {
	return &fakeSource{recs: s.f.records[a.Partition]}
}

// fakeSource serves a partition's records, then blocks until ctx ends.
type fakeSource struct{ recs []kclient.Record }

func (s *fakeSource) Next(ctx context.Context) (kclient.Record, bool) {
	if len(s.recs) == 0 {
		<-ctx.Done()
		return kclient.Record{}, false
	}
	r := s.recs[0]
	s.recs = s.recs[1:]
	return r, true
}

func (s *fakeSource) Ready() int { return len(s.recs) }

func (s *fakeSource) Close() {}

// TestConsumerFakeClient builds the consumer component without a Runtime
// or a broker: a fake client's session, a feed that settles each record
// as it comes, and the keeper's caught-up commit. Every partition is
// committed to its end, the stop's final commit has nothing left, and
// closing the client ends the keeper.
func TestConsumerFakeClient(t *testing.T) {
	t.Parallel()
	const parts, n = 3, 50
	f := newFakeClient(parts, n, n) // the last record catches its partition up
	var ready readiness
	k := newConsumer(fakeConsumerConfig(f, &ready, func(func(*tracker) bool) int { return 0 }))
	if err := k.open(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := k.join(ctx, []string{"orders"}); err != nil {
		t.Fatal(err)
	}
	if !ready.joined.Load() {
		t.Error("an eager session began without joining")
	}
	waitFor(t, "every partition committed to its end", func() bool {
		c, _ := f.commitsMade()
		for p := range parts {
			if c[kclient.Partition{Topic: "orders", Partition: p}] != n {
				return false
			}
		}
		return true
	})
	cancel()
	k.wait()
	if g := k.fetchingGen(); g != nil {
		t.Error("the generation is still fetching after the quiesce")
	}
	_, before := f.commitsMade()
	if err := k.finalCommit(); err != nil {
		t.Fatalf("final commit: %v", err)
	}
	if _, after := f.commitsMade(); after != before {
		t.Errorf("the final commit sent %d commits with nothing moved", after-before)
	}
	k.close(time.Now().Add(time.Second))
	select {
	case <-f.kept:
	default:
		t.Error("the keeper still runs after the client closed")
	}
}

// fakeConsumerConfig is a consumerConfig of no Runtime: its client is f,
// its feed settles each record as it comes (and signals a partition
// caught up at its last record), giveBack is the revocations' give-back.
func fakeConsumerConfig(f *fakeClient, ready *readiness, giveBack func(func(*tracker) bool) int) consumerConfig {
	return consumerConfig{
		log: slog.New(slog.DiscardHandler), logs: newLogBackoff(), metrics: nil, group: "g",
		commitInterval: time.Hour, revokeTimeout: time.Second,
		newClientFunc: func(kclient.Config) (kclient.Client, error) { return f, nil },
		feedFunc: func(string) fetchFunc {
			return func(ctx context.Context, tr *tracker, src kclient.Source, caughtUp chan<- struct{}) {
				defer src.Close()
				for {
					rec, ok := src.Next(ctx)
					if !ok {
						return
					}
					tr.settle(tr.add(rec.Offset, 0))
					if rec.Offset+1 >= rec.End {
						tr.caughtUp.Store(true)
						select {
						case caughtUp <- struct{}{}:
						default:
						}
					}
				}
			}
		},
		giveBackFunc: giveBack,
		epoch:        time.Now(),
		ready:        ready,
		alive:        new(liveness),
		stuck:        newStuckParts(time.Minute, slog.New(slog.DiscardHandler)),
	}
}

// TestGenerationCooperative drives a cooperative session's keeper
// without a Runtime or a broker, as franz-go's callbacks do: nothing is
// fetched nor joined before the first assignment; assigned partitions
// are fetched and committed; a revocation stops only its partition,
// gives back its messages and commits it; a loss drops its partition
// without a commit.
func TestGenerationCooperative(t *testing.T) {
	t.Parallel()
	const n = 20
	f := newFakeClient(2, n, n)
	f.cooperative = true
	var ready readiness
	var gaveBack atomic.Int64
	k := newConsumer(fakeConsumerConfig(f, &ready, func(mine func(*tracker) bool) int {
		gaveBack.Add(1)
		return 0
	}))
	if err := k.open(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := k.join(ctx, []string{"orders"}); err != nil {
		t.Fatal(err)
	}
	g := k.gen.Load()
	if ready.joined.Load() || len(g.trackers()) != 0 {
		t.Fatalf("before any assignment: joined %v, %d partitions", ready.joined.Load(), len(g.trackers()))
	}
	p0, p1 := kclient.Partition{Topic: "orders", Partition: 0}, kclient.Partition{Topic: "orders", Partition: 1}
	f.keeper.Assign(3, []kclient.Assigned{{Partition: p0, Offset: 0}, {Partition: p1, Offset: 0}})
	if !ready.joined.Load() || g.id.Load() != 3 || len(g.trackers()) != 2 {
		t.Fatalf("assigned: joined %v, generation %d, %d partitions", ready.joined.Load(), g.id.Load(), len(g.trackers()))
	}
	waitFor(t, "both partitions committed to their end", func() bool {
		c, _ := f.commitsMade()
		return c[p0] == n && c[p1] == n
	})
	f.keeper.Revoke([]kclient.Partition{p0}, false)
	if trs := g.trackers(); len(trs) != 1 || trs[0].partitionName() != p1 {
		t.Fatalf("after revoking %s: %d partitions left", p0, len(trs))
	}
	if gaveBack.Load() == 0 {
		t.Error("the revocation gave nothing back")
	}
	_, before := f.commitsMade()
	f.keeper.Revoke([]kclient.Partition{p1}, true)
	if len(g.trackers()) != 0 {
		t.Fatalf("after losing %s: %d partitions left", p1, len(g.trackers()))
	}
	if _, after := f.commitsMade(); after != before {
		t.Errorf("a lost partition was committed (%d commits)", after-before)
	}
	cancel()
	k.wait()
	k.close(time.Now().Add(time.Second))
	select {
	case <-f.kept:
	default:
		t.Error("the keeper still runs after the client closed")
	}
}

// fakeStop runs a Runtime on f (the broker check goes to a real embedded
// broker; the group is f) with one StopRedeliver class whose handler
// blocks on offset 5 of partition 0 until its context ends, stops it once
// everything else is handled, and returns the stop's report and error.
// The blocked message is given back at the hard stop, so the commit rule
// allows committing partition 0 to 5, never past.
func fakeStop(t *testing.T, f *fakeClient, before func()) (*Report, error, time.Duration) {
	t.Helper()
	b := setup(t, 1, "orders")
	var handled atomic.Int64
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		if m.Origin.Partition == 0 && m.Origin.Offset == 5 {
			<-ctx.Done()
			return context.Cause(ctx)
		}
		handled.Add(1)
		return nil
	}, func(c *Class) { c.StopPolicy = StopRedeliver })
	cfg.CommitInterval = time.Hour
	cfg.DrainTimeout = 100 * time.Millisecond
	cfg.HardStopGrace = 100 * time.Millisecond
	cfg.LocalStateOnly = true // the group is the fake; the changelog would be the broker's
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rt.kafka.cfg.newClientFunc = func(kclient.Config) (kclient.Client, error) { return f, nil }
	wait := start(t, rt, context.Background())
	waitFor(t, "ready", rt.Ready)
	total := 0
	for _, recs := range f.records {
		total += len(recs)
	}
	waitFor(t, "all but the blocked message handled", func() bool { return handled.Load() == int64(total-1) })
	if before != nil {
		before()
	}
	began := time.Now()
	rt.Shutdown(context.Background())
	rep, err := wait()
	took := time.Since(began)
	// The stop's budget, what the leave gives a client's Close beyond
	// it, and a second for what follows the leave (the publisher, the
	// state file's close).
	if limit := rt.cfg.stopBudget() + rt.kafka.closeGrace() + time.Second; took > limit {
		t.Errorf("the stop took %s, beyond its budget and the client's close grace (%s)", took, limit)
	}
	return rep, err, took
}

// TestStopFinalCommitFails: a member whose final commit fails. The stop
// ends within its budget, reports ErrCommit, and nothing is committed:
// not partition 0 past its given-back offset 5, nor anything else.
func TestStopFinalCommitFails(t *testing.T) {
	t.Parallel()
	f := newFakeClient(2, 10, 1000)
	rep, err, took := fakeStop(t, f, func() { f.failCommits.Store(true) })
	if !errors.Is(err, ErrCommit) {
		t.Fatalf("Run: %v, want ErrCommit", err)
	}
	committed, tries := f.commitsMade()
	if len(committed) != 0 {
		t.Errorf("committed %v through a member whose commits fail", committed)
	}
	if tries == 0 {
		t.Error("no commit was tried")
	}
	if rep.GivenBack != 1 {
		t.Errorf("given back %d, want the blocked message", rep.GivenBack)
	}
	t.Logf("stop took %s (%d commits tried)", took, tries)
}

// TestStopFinalCommitFenced: a final commit the group refuses because it
// fenced the member (its generation ended during the stop: a rebalance
// the stop overlapped) loses nothing, since the partitions' new owners
// read again what was settled since the last commit; the stop is clean,
// as kafka-go's generation that ended during the stop already was. On
// franz-go it made the stop ErrCommit (rental exiting 1).
func TestStopFinalCommitFenced(t *testing.T) {
	t.Parallel()
	f := newFakeClient(2, 10, 1000)
	rep, err, _ := fakeStop(t, f, func() { f.fenceCommits.Store(true) })
	if err != nil {
		t.Fatalf("Run: %v, want a clean stop", err)
	}
	if committed, tries := f.commitsMade(); len(committed) != 0 || tries == 0 {
		t.Errorf("committed %v in %d tries through a fenced member", committed, tries)
	}
	if rep.GivenBack != 1 {
		t.Errorf("given back %d, want the blocked message", rep.GivenBack)
	}
}

// TestStopLeaveHangs: a member whose leave never returns. The final
// commit goes through (partition 0 to offset 5, where the given-back
// message is; partition 1 to its end), and the stop still ends within
// its budget and the client's close grace, with a warning, leaving the
// close behind.
func TestStopLeaveHangs(t *testing.T) {
	t.Parallel()
	f := newFakeClient(2, 10, 1000)
	f.hangClose = true
	_, err, took := fakeStop(t, f, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	committed, _ := f.commitsMade()
	want := map[kclient.Partition]int64{{Topic: "orders", Partition: 0}: 5, {Topic: "orders", Partition: 1}: 10}
	for p, w := range want {
		if committed[p] != w {
			t.Errorf("%s committed to %d, want %d", p, committed[p], w)
		}
	}
	select {
	case <-f.closed:
		t.Error("the hung close returned before it was released")
	default:
	}
	close(f.unhang) // the test's cleanup: the close left behind ends
	<-f.closed
	t.Logf("stop took %s", took)
}

// TestRevokeGivesBackBeforeKeysGo checks the order of a revocation's
// steps: the revoked partition's unstarted Kafka messages leave the pools
// (giveBackFunc) before its records stop being used here (states.revoked,
// which drops the ordered classes' keys its dead letters block). In the
// other order a queued message of a key blocked by a dead letter of the
// partition comes up to run in between, finds its key no longer blocked
// and runs ahead of the key's parked messages (a per-key order inversion
// seen in examples/rental's TestProcessDeployEmptyDisks under load).
func TestRevokeGivesBackBeforeKeysGo(t *testing.T) {
	t.Parallel()
	const n = 20
	f := newFakeClient(1, n, n)
	f.cooperative = true
	var ready readiness
	var mu sync.Mutex
	var steps []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, s)
	}
	cfg := fakeConsumerConfig(f, &ready, func(mine func(*tracker) bool) int {
		note("give back")
		return 0
	})
	cfg.states = notedStates{note}
	k := newConsumer(cfg)
	if err := k.open(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		k.wait()
		k.close(time.Now().Add(time.Second))
	}()
	if err := k.join(ctx, []string{"orders"}); err != nil {
		t.Fatal(err)
	}
	p0 := kclient.Partition{Topic: "orders", Partition: 0}
	f.keeper.Assign(3, []kclient.Assigned{{Partition: p0, Offset: 0}})
	waitFor(t, "the partition committed to its end", func() bool {
		c, _ := f.commitsMade()
		return c[p0] == n
	})
	f.keeper.Revoke([]kclient.Partition{p0}, false)
	mu.Lock()
	defer mu.Unlock()
	first := slices.Index(steps, "give back")
	rev := slices.Index(steps, "revoked "+p0.String())
	if first < 0 || rev < 0 || first > rev {
		t.Errorf("revocation steps %q: the unstarted messages must be given back before the partition's keys are dropped", steps)
	}
}

// notedStates is a consumer's partitionStates that restores nothing (as
// with the changelog off) and notes each revoked partition.
type notedStates struct{ note func(string) }

func (notedStates) restore(context.Context, kclient.Partition, func()) bool { return true }

func (s notedStates) revoked(p kclient.Partition) { s.note("revoked " + p.String()) }
