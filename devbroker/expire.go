package devbroker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka error codes the expiry and its tests read (the protocol's numbers,
// as kfake's kerr package names them).
const (
	codeUnknownMemberID     int16 = 25
	codeRebalanceInProgress int16 = 27
)

// expiryTick is how often the expiry looks at the groups it watches: a
// silent member goes at most about two ticks after its session timeout.
const expiryTick = 100 * time.Millisecond

// expiry removes a classic-group member that has been silent for longer
// than its session timeout, so that its group rebalances its partitions, as
// a Kafka coordinator does and kfake at times does not.
//
// kfake arms a member's session timer only when it hands the member's
// JoinGroup response to a live connection (reply in kfake's groups.go);
// when the connection closed while the join was parked, that send races the
// closed connection and about half the time no timer is armed. The
// pending-sync timer that would remove a member that never synced is
// stopped by the leader's SyncGroup (completeLeaderSync, clearPendingSync).
// Such a member stays in the group, holding the partitions the leader gave
// it, for good.
//
// The expiry watches the group requests that name a member (JoinGroup,
// SyncGroup, Heartbeat, OffsetCommit, LeaveGroup) through kfake's control
// hooks, without handling them. Every tick it reads the membership of each
// group it has seen a JoinGroup for; in a Stable group no request is parked
// and every member must heartbeat, so a member not heard from for its
// session timeout, counted from when it was last heard from or the group
// was first seen Stable at its generation, whichever is later, is gone. The
// expiry then sends kfake a LeaveGroup for it, as the member itself would
// have, and kfake rebalances the group. Groups that are rebalancing are
// left to kfake, whose rebalance and pending-sync timers remove members
// that do not join or sync.
type expiry struct {
	c    *kfake.Cluster
	dial func(ctx context.Context, clientID string) (*wireConn, error) // the broker's own connection
	log  *slog.Logger

	mu     sync.Mutex
	groups map[string]*watchedGroup
	// departed is, by group and member ID, the static members of
	// consumer-protocol groups that left for now (see expire848.go).
	departed map[string]map[string]departedMember
	// instances is the instance ID of each static member of a
	// consumer-protocol group, by member ID, from its join.
	instances map[string]string

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// watchedGroup is what the expiry knows of one group.
type watchedGroup struct {
	// session is the longest session timeout any of the group's
	// JoinGroups asked for: the timeout of a member whose JoinGroup
	// carried no member ID (a first join before v4, as kafka-go sends),
	// so that the expiry never expires a member before its own timeout.
	session time.Duration
	members map[string]*watchedMember
	// touched is when a request for the group was last seen, so that a
	// sweep acting on an older view of the group keeps newer knowledge.
	touched time.Time
	// stableSince is when the group was first seen Stable at generation
	// stableGen; zero means it was not Stable at the last sweep.
	stableGen   int32
	stableSince time.Time
}

// watchedMember is what the expiry knows of one member.
type watchedMember struct {
	session time.Duration // from its own JoinGroup; zero means unknown
	heard   time.Time     // last request naming it
}

// startExpiry installs the control hooks and starts the sweep; close stops
// it. dial opens a connection to c.
func startExpiry(c *kfake.Cluster, dial func(context.Context, string) (*wireConn, error), log *slog.Logger) *expiry {
	e := &expiry{c: c, dial: dial, log: log.With("component", "devbroker_expiry"), groups: map[string]*watchedGroup{},
		departed: map[string]map[string]departedMember{}, instances: map[string]string{}}
	for _, k := range []kmsg.Key{kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.OffsetCommit, kmsg.LeaveGroup, kmsg.ConsumerGroupHeartbeat} {
		c.ControlKey(int16(k), e.observe)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	e.wg.Go(func() { e.run(ctx) })
	return e
}

// close stops the sweep and waits for it, aborting a LeaveGroup in flight.
// It must run before the cluster closes: a sweep blocks reading a closed
// cluster's groups. Safe to call more than once.
func (e *expiry) close() {
	e.stop()
	e.wg.Wait()
}

// observe is the control hook: it notes who the request names and leaves
// the request to kfake. It runs on kfake's request loop.
func (e *expiry) observe(req kmsg.Request) (kmsg.Response, error, bool) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		g := e.groups[r.Group]
		if g == nil {
			g = &watchedGroup{members: map[string]*watchedMember{}}
			e.groups[r.Group] = g
		}
		session := time.Duration(r.SessionTimeoutMillis) * time.Millisecond
		g.session = max(g.session, session)
		if m := e.heard(r.Group, r.MemberID, now); m != nil {
			m.session = session
		}
	case *kmsg.SyncGroupRequest:
		e.heard(r.Group, r.MemberID, now)
	case *kmsg.HeartbeatRequest:
		e.heard(r.Group, r.MemberID, now)
	case *kmsg.OffsetCommitRequest:
		e.heard(r.Group, r.MemberID, now)
	case *kmsg.ConsumerGroupHeartbeatRequest:
		e.observeConsumer(r, now)
	case *kmsg.LeaveGroupRequest:
		if g := e.groups[r.Group]; g != nil {
			g.touched = now
			delete(g.members, r.MemberID) // before v3
			for _, m := range r.Members {
				delete(g.members, m.MemberID)
			}
		}
	}
	return nil, nil, false
}

// heard notes a request from member of group at now and returns the
// member, or nil when the group is not watched or member is empty. e.mu is
// held.
func (e *expiry) heard(group, member string, now time.Time) *watchedMember {
	g := e.groups[group]
	if g == nil {
		return nil
	}
	g.touched = now
	if member == "" {
		return nil
	}
	m := g.members[member]
	if m == nil {
		m = &watchedMember{}
		g.members[member] = m
	}
	m.heard = now
	return m
}

func (e *expiry) run(ctx context.Context) {
	t := time.NewTicker(expiryTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.sweep(ctx)
		e.sweepDeparted(ctx)
	}
}

// sweep expires the silent members of every watched group.
func (e *expiry) sweep(ctx context.Context) {
	e.mu.Lock()
	names := make([]string, 0, len(e.groups))
	for name := range e.groups {
		names = append(names, name)
	}
	e.mu.Unlock()
	for _, name := range names {
		asked := time.Now()
		info := e.c.GroupInfo(name) // blocks on the cluster's loop
		if gone := e.silent(name, info, asked, time.Now()); len(gone) > 0 {
			e.leave(ctx, name, gone)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// silent updates the watch of group from info, read at asked, and returns
// the members silent past their session timeout at now. A group that is
// gone or empty is no longer watched; its next JoinGroup watches it again.
func (e *expiry) silent(group string, info *kfake.GroupInfo, asked, now time.Time) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.groups[group]
	if g == nil {
		return nil
	}
	if info == nil || info.State == "Empty" || info.State == "Dead" {
		if g.touched.Before(asked) {
			delete(e.groups, group)
		}
		return nil
	}
	if info.State != "Stable" {
		g.stableSince = time.Time{}
		return nil
	}
	if g.stableSince.IsZero() || g.stableGen != info.Epoch {
		g.stableGen, g.stableSince = info.Epoch, now
	}
	in := make(map[string]bool, len(info.Members))
	var gone []string
	for _, gm := range info.Members {
		in[gm.MemberID] = true
		session, since := g.session, g.stableSince
		if m := g.members[gm.MemberID]; m != nil {
			if m.session > 0 {
				session = m.session
			}
			if m.heard.After(since) {
				since = m.heard
			}
		}
		if now.Sub(since) > session {
			gone = append(gone, gm.MemberID)
		}
	}
	for id, m := range g.members {
		if !in[id] && m.heard.Before(asked) {
			delete(g.members, id)
		}
	}
	return gone
}

// leave sends kfake a LeaveGroup for members of group. A failure is logged
// and the next sweep tries again.
func (e *expiry) leave(ctx context.Context, group string, members []string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	log := e.log.With("group", group)
	w, err := e.dial(ctx, "devbroker-expiry")
	if err != nil {
		log.WarnContext(ctx, "expire silent members", "members", members, "err", err)
		return
	}
	defer w.Close()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Version = 5
	req.Group = group
	for _, id := range members {
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID = id
		m.Reason = kmsg.StringPtr("session timeout expired (devbroker)")
		req.Members = append(req.Members, m)
	}
	kresp, err := w.request(ctx, req)
	if err != nil {
		log.WarnContext(ctx, "expire silent members", "members", members, "err", err)
		return
	}
	resp := kresp.(*kmsg.LeaveGroupResponse)
	if resp.ErrorCode != 0 {
		log.WarnContext(ctx, "expire silent members", "members", members, "error_code", resp.ErrorCode)
		return
	}
	for _, m := range resp.Members {
		switch m.ErrorCode {
		case 0:
			log.InfoContext(ctx, "silent member expired", "member", m.MemberID)
		case codeUnknownMemberID: // it left or kfake expired it meanwhile
		default:
			log.WarnContext(ctx, "expire silent member", "member", m.MemberID, "error_code", m.ErrorCode)
		}
	}
}
