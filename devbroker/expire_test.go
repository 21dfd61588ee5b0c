package devbroker

import (
	"context"
	"flag"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var noExpiry = flag.Bool("no-expiry", false,
	"run TestDepartedJoinerExpires with Config.DisableSessionExpiry, against kfake's own session handling (fails about half the runs)")

// TestDepartedJoinerExpires is the regression test for a member whose
// JoinGroup was parked when its connection closed (issue 11, item 4). A
// holds all six partitions; B's JoinGroup parks while the group waits for
// A; B's connection closes; A rejoins and, as leader, gives B three
// partitions. Kafka expires B one session timeout later and the group
// rebalances B's partitions to A. kfake does so only when its send of B's
// join response won the race against the closed connection.
//
// The members speak the versions kafka-go's ConsumerGroup does (JoinGroup
// v2, SyncGroup and Heartbeat v0), so B's member ID never appears in a
// request of B's.
func TestDepartedJoinerExpires(t *testing.T) {
	s := setup(t, Config{Partitions: 6, DisableSessionExpiry: *noExpiry})
	ctx, b, a := s.ctx, s.b, s.a
	bm := s.dial("b")
	s.park(bm)

	// B goes away before its response. Half-close and read until the
	// broker closes its side: the broker has then seen B's connection end.
	if err := bm.w.conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = bm.w.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, bm.w.conn); err != nil {
		t.Logf("reading B's connection to its end: %v", err)
	}

	// A rejoins and leads a generation with B, giving B half.
	rejoined := time.Now()
	members := a.join(ctx)
	var bID string
	for _, m := range members {
		if m != a.id {
			bID = m
		}
	}
	if len(members) != 2 || bID == "" {
		t.Fatalf("generation %d has members %v, want A (%s) and B", a.gen, members, a.id)
	}
	a.sync(ctx, map[string][]int32{a.id: {0, 1, 2}, bID: {3, 4, 5}})

	// A heartbeats as a client does and rejoins when told to; it must
	// end up alone with all six partitions within a few session timeouts.
	deadline := rejoined.Add(3 * testSession)
	hb := time.NewTicker(testSession / 5) // A's heartbeat interval
	defer hb.Stop()
	for {
		if a.heartbeat(ctx) == codeRebalanceInProgress {
			took := time.Since(rejoined)
			members := a.join(ctx)
			all := map[string][]int32{}
			for _, m := range members {
				all[m] = nil
			}
			all[a.id] = []int32{0, 1, 2, 3, 4, 5}
			a.sync(ctx, all)
			if slices.Equal(members, []string{a.id}) {
				if took < testSession {
					t.Fatalf("B expired %s after A's rejoin, before its %s session timeout", took, testSession)
				}
				t.Logf("B expired, its partitions back with A, %s after A's rejoin", took)
				break
			}
		}
		if time.Now().After(deadline) {
			g := b.Cluster().GroupInfo(testGroup)
			t.Fatalf("%s after A's rejoin B still holds partitions: group %s generation %d members %+v",
				time.Since(rejoined).Round(time.Millisecond), g.State, g.Epoch, g.Members)
		}
		select {
		case <-hb.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	g := b.Cluster().GroupInfo(testGroup)
	if len(g.Members) != 1 || g.Members[0].MemberID != a.id || g.Members[0].NumAssigned() != 6 {
		t.Fatalf("group %s members %+v, want A (%s) alone with six partitions", g.State, g.Members, a.id)
	}
}

// TestParkedJoinerNotExpired checks the expiry leaves alone a member
// whose JoinGroup waits in a rebalance for longer than its session timeout,
// as Kafka does: B's join parks while A, heartbeating, takes two session
// timeouts to rejoin; B must then be in A's generation, get its partitions
// and keep them while it heartbeats.
func TestParkedJoinerNotExpired(t *testing.T) {
	s := setup(t, Config{Partitions: 2})
	ctx, b, a := s.ctx, s.b, s.a
	bm := s.dial("b")
	bJoin := s.park(bm)
	parked := time.Now()
	hb := time.NewTicker(testSession / 5) // A's heartbeat interval
	defer hb.Stop()
	for time.Since(parked) < 2*testSession {
		if c := a.heartbeat(ctx); c != codeRebalanceInProgress {
			t.Fatalf("A's heartbeat while B is parked: error code %d, want %d", c, codeRebalanceInProgress)
		}
		select {
		case <-hb.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}

	members := a.join(ctx)
	resp, err := bm.w.receive(ctx, bJoin)
	if err != nil {
		t.Fatal(err)
	}
	bResp := resp.(*kmsg.JoinGroupResponse)
	if bResp.ErrorCode != 0 || !slices.Contains(members, bResp.MemberID) {
		t.Fatalf("B's parked join: error code %d, member %s; A's generation: %v", bResp.ErrorCode, bResp.MemberID, members)
	}
	bm.id, bm.gen = bResp.MemberID, bResp.Generation
	a.sync(ctx, map[string][]int32{a.id: {0}, bm.id: {1}})
	bm.follow(ctx, []int32{1})

	// Both heartbeat for two session timeouts: nobody may be expired.
	stable := time.Now()
	for time.Since(stable) < 2*testSession {
		if c := a.heartbeat(ctx); c != 0 {
			t.Fatalf("A's heartbeat: error code %d", c)
		}
		if c := bm.heartbeat(ctx); c != 0 {
			t.Fatalf("B's heartbeat: error code %d", c)
		}
		select {
		case <-hb.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	if g := b.Cluster().GroupInfo(testGroup); g.State != "Stable" || g.Epoch != a.gen || len(g.Members) != 2 {
		t.Fatalf("group %s generation %d members %+v, want Stable generation %d with A and B", g.State, g.Epoch, g.Members, a.gen)
	}
}

// The group, topic and session timeout of the tests' members.
const (
	testGroup   = "g"
	testTopic   = "t"
	testSession = time.Second
)

// groupSetup is a broker with topic testTopic whose group testGroup has
// one member, A, leading it and holding every partition.
type groupSetup struct {
	t   *testing.T
	ctx context.Context
	b   *Broker
	a   *testMember
}

// setup starts the broker from cfg (its Topics set to testTopic) and has
// A join. Everything it opens closes when the test ends.
func setup(t *testing.T, cfg Config) *groupSetup {
	t.Helper()
	cfg.Topics = []string{testTopic}
	b, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	s := &groupSetup{t: t, ctx: ctx, b: b}
	s.a = s.dial("a")
	s.a.join(ctx)
	var all []int32
	for p := range int32(cfg.Partitions) {
		all = append(all, p)
	}
	s.a.sync(ctx, map[string][]int32{s.a.id: all})
	return s
}

// dial connects a new member, not yet joined.
func (s *groupSetup) dial(clientID string) *testMember {
	s.t.Helper()
	w, err := dialWire(s.ctx, s.b.Addr(), clientID)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = w.Close() })
	return &testMember{t: s.t, w: w}
}

// park sends m's first JoinGroup, which parks because the group must wait
// for A to rejoin, and returns it once the group shows m waiting.
func (s *groupSetup) park(m *testMember) *kmsg.JoinGroupRequest {
	s.t.Helper()
	req := joinRequest("")
	if err := m.w.send(s.ctx, req); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.b.Cluster().WaitGroupInfo(s.ctx, testGroup, func(g *kfake.GroupInfo) bool {
		return g != nil && g.State == "PreparingRebalance" && len(g.Members) == 2
	}); err != nil {
		s.t.Fatalf("waiting for the parked JoinGroup: %v", err)
	}
	return req
}

// testMember is a member of testGroup driven request by request over one
// connection.
type testMember struct {
	t   *testing.T
	w   *wireConn
	id  string
	gen int32
}

func joinRequest(memberID string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 2
	req.Group = testGroup
	req.MemberID = memberID
	req.SessionTimeoutMillis = int32(testSession / time.Millisecond)
	req.RebalanceTimeoutMillis = 20_000 // longer than the test: no barrier times out
	req.ProtocolType = "consumer"
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{testTopic}
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name = "range"
	p.Metadata = meta.AppendTo(nil)
	req.Protocols = append(req.Protocols, p)
	return req
}

// join joins (or rejoins) the group, which must make m its leader, and
// returns the generation's member IDs, sorted.
func (m *testMember) join(ctx context.Context) []string {
	m.t.Helper()
	resp := m.do(ctx, joinRequest(m.id)).(*kmsg.JoinGroupResponse)
	if resp.ErrorCode != 0 {
		m.t.Fatalf("JoinGroup: error code %d", resp.ErrorCode)
	}
	m.id, m.gen = resp.MemberID, resp.Generation
	if resp.LeaderID != m.id {
		m.t.Fatalf("JoinGroup: leader %s, want %s", resp.LeaderID, m.id)
	}
	var ids []string
	for _, mm := range resp.Members {
		ids = append(ids, mm.MemberID)
	}
	slices.Sort(ids)
	return ids
}

// sync sends the leader's SyncGroup with assign (member -> partitions of
// testTopic) and checks m got its share.
func (m *testMember) sync(ctx context.Context, assign map[string][]int32) {
	m.t.Helper()
	m.syncGroup(ctx, assign, assign[m.id])
}

// follow sends a follower's SyncGroup and checks m got want.
func (m *testMember) follow(ctx context.Context, want []int32) {
	m.t.Helper()
	m.syncGroup(ctx, nil, want)
}

func (m *testMember) syncGroup(ctx context.Context, assign map[string][]int32, want []int32) {
	m.t.Helper()
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.Generation, req.MemberID = testGroup, m.gen, m.id
	for id, parts := range assign {
		a := kmsg.NewConsumerMemberAssignment()
		at := kmsg.NewConsumerMemberAssignmentTopic()
		at.Topic, at.Partitions = testTopic, parts
		a.Topics = append(a.Topics, at)
		ga := kmsg.NewSyncGroupRequestGroupAssignment()
		ga.MemberID, ga.MemberAssignment = id, a.AppendTo(nil)
		req.GroupAssignment = append(req.GroupAssignment, ga)
	}
	resp := m.do(ctx, req).(*kmsg.SyncGroupResponse)
	if resp.ErrorCode != 0 {
		m.t.Fatalf("SyncGroup: error code %d", resp.ErrorCode)
	}
	var got kmsg.ConsumerMemberAssignment
	if err := got.ReadFrom(resp.MemberAssignment); err != nil {
		m.t.Fatalf("SyncGroup: assignment: %v", err)
	}
	if len(got.Topics) != 1 || !slices.Equal(got.Topics[0].Partitions, want) {
		m.t.Fatalf("SyncGroup: got %+v, want %v of %s", got.Topics, want, testTopic)
	}
}

// heartbeat returns the heartbeat's error code: 0, or 27 when the group is
// rebalancing.
func (m *testMember) heartbeat(ctx context.Context) int16 {
	m.t.Helper()
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.Generation, req.MemberID = testGroup, m.gen, m.id
	resp := m.do(ctx, req).(*kmsg.HeartbeatResponse)
	if c := resp.ErrorCode; c != 0 && c != codeRebalanceInProgress {
		m.t.Fatalf("Heartbeat: error code %d", c)
	}
	return resp.ErrorCode
}

func (m *testMember) do(ctx context.Context, req kmsg.Request) kmsg.Response {
	m.t.Helper()
	resp, err := m.w.request(ctx, req)
	if err != nil {
		m.t.Fatal(err)
	}
	return resp
}
