package runtime

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// kafka-go (v0.4.51) leaves the group when its ConsumerGroup is closed,
// but not on one path: a join that finishes at the close (the group was
// waiting for another member to rejoin) and whose sync then answers
// REBALANCE_IN_PROGRESS (the group began rebalancing again) makes its
// loop return without a LeaveGroup. The broker then counts the gone member
// in the next generation and gives it partitions, which stall until its
// session expires. memberWatch follows, from the group's own log lines,
// the member ID kafka-go joined with and whether it left with it, so the
// stop's leave phase can leave for it.
//
// The lines are kafka-go's (consumergroup.go); should a version word them
// differently the watch sees nothing and the stop is what it was.
const (
	kgJoined      = "Joined group %s as member %s in generation %d"
	kgJoinedLower = "joined group %s as member %s in generation %d"
	kgLeaving     = "Leaving group %s, member %s"
	kgLeaveFailed = "leave group failed for group, %v, and member, %v: %v"
)

type memberWatch struct {
	mu   sync.Mutex
	id   string // the member ID of kafka-go's last successful join
	left bool   // kafka-go sent LeaveGroup for id, and it did not fail
}

// logger returns next, noting the member lines on the way.
func (w *memberWatch) logger(next kafka.LoggerFunc) kafka.LoggerFunc {
	return func(format string, args ...any) {
		w.note(format, args)
		next(format, args...)
	}
}

// note takes in one of kafka-go's group log lines.
func (w *memberWatch) note(format string, args []any) {
	switch format {
	case kgJoined, kgJoinedLower, kgLeaving, kgLeaveFailed:
	default:
		return
	}
	if len(args) < 2 {
		return
	}
	id, ok := args[1].(string)
	if !ok || id == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch format {
	case kgJoined, kgJoinedLower:
		if id != w.id {
			w.id, w.left = id, false
		}
	case kgLeaving:
		if id == w.id {
			w.left = true
		}
	case kgLeaveFailed:
		if id == w.id {
			w.left = false
		}
	}
}

// stranded returns the member ID kafka-go joined with and did not leave
// with, or "". Call it once the group is closed.
func (w *memberWatch) stranded() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.left {
		return ""
	}
	return w.id
}

// leaveFor sends the LeaveGroup kafka-go did not send for member id,
// within wait. A member the broker no longer knows is not an error.
func (r *Runtime) leaveFor(id string, wait time.Duration) {
	client := &kafka.Client{Addr: kafka.TCP(r.cfg.Brokers...), Timeout: wait, Transport: r.transport(nil)}
	defer client.Transport.(*kafka.Transport).CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := client.LeaveGroup(ctx, &kafka.LeaveGroupRequest{GroupID: r.cfg.Group, Members: []kafka.LeaveGroupRequestMember{{ID: id}}})
	if err == nil {
		err = resp.Error
		for _, m := range resp.Members {
			if err == nil && m.Error != nil && !errors.Is(m.Error, kafka.UnknownMemberId) {
				err = m.Error
			}
		}
	}
	if err != nil && !errors.Is(err, kafka.UnknownMemberId) {
		r.log.Warn("leaving the group for a member kafka-go did not leave with failed; the broker will give it partitions until its session expires",
			"phase", "leave", "member", id, "err", err, "session_timeout", r.cfg.SessionTimeout)
		return
	}
	r.log.Info("left the group for a member kafka-go did not leave with", "phase", "leave", "member", id)
}
