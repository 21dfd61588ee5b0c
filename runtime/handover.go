package runtime

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/changelog"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/runtime/internal/service"
)

// Handovers through the changelog's meta topic. Under the classic group
// protocol a member learns of a rebalance at its next heartbeat
// (HeartbeatInterval): when an instance leaves, or gives a partition up
// for a new member, its partitions wait that long for their next owner
// to join, sync and restore them, after the commit that ends them here.
// So the member that gave partitions away says so, in the meta topic,
// once its commit is done (kclient.Handovers: after a cooperative
// revocation, and after the leave), and every instance
// watches the topic with a fetch that the broker answers as soon as a
// record is there: told of a handover in its generation, a franz-go
// member joins the rebalance at once (kclient.Rejoiner). The heartbeat
// remains the way a member learns of a rebalance nobody announced (a
// member that crashed, a new member's join, which costs no partition a
// wait: the owners keep fetching until they revoke).
//
// The record is one key (rejoin), so the compacted topic keeps only the
// last. Earlier builds read the meta topic's pause/ and deadop/ keys and
// skip the others. Only franz-go members take part: kafka-go's sessions
// are eager, and it cannot join before its heartbeat.

// handoverKey is the meta topic's key of the last handover.
var handoverKey = []byte("rejoin")

// handoverWait bounds the write of a handover record, and so the stop's
// wait for the leave's (consumer.close).
const handoverWait = 2 * time.Second

// handoverValue is a handover record's value.
type handoverValue struct {
	Member     string    `json:"member"`
	Generation int32     `json:"generation"`
	At         time.Time `json:"at"`
}

// handovers announces this member's handovers and tells the client of
// the others'. Its watch is a service the consumer starts after its join
// and stops with its fetching; HandedOver works until the changelog
// closes, after the leave.
type handovers struct {
	service.Base
	log  *slog.Logger
	clog *stateLog
	// member is the client, when it can rejoin at once (franz-go); set
	// by the consumer's open. The watch runs only with one.
	member kclient.Rejoiner
	// writes are the announcements under way.
	writes sync.WaitGroup
}

// meta returns the changelog's client, nil with the changelog off
// (LocalStateOnly, no topics) or not yet open.
func (h *handovers) meta() *changelog.Client {
	if h == nil || h.clog == nil || !h.clog.on() {
		return nil
	}
	return h.clog.client
}

// HandedOver writes that member gave partitions away in generation gen
// (kclient.Handovers), on a goroutine of its own: the client calls it
// in its revocation callback, which holds up this member's polls and
// its rejoin. It does not block; wait joins the writes.
func (h *handovers) HandedOver(member string, gen int32) {
	cl := h.meta()
	if cl == nil {
		return
	}
	h.writes.Go(func() { h.write(cl, member, gen) })
}

// wait blocks until the announcements under way are written or failed,
// each within handoverWait.
func (h *handovers) wait() { h.writes.Wait() }

// write writes the handover record and waits for the broker's
// acknowledgement, at most handoverWait; a failure is logged at Debug:
// the others learn of the rebalance at their heartbeat instead.
func (h *handovers) write(cl *changelog.Client, member string, gen int32) {
	v, err := json.Marshal(handoverValue{Member: member, Generation: gen, At: time.Now()})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), handoverWait)
		_, err = cl.WriteMeta(ctx, handoverKey, v)
		cancel()
	}
	if err != nil {
		h.log.Debug("handover not announced; the other members learn of the rebalance at their next heartbeat",
			"topic", cl.MetaTopic(), "generation", gen, "err", err)
	}
}

// Start runs the watch until Stop when the changelog is on and the
// client can rejoin at once; see service.Service.
func (h *handovers) Start(ctx context.Context) error {
	if h.member == nil || h.meta() == nil {
		h.Base.Stop() // nothing to watch: stopped, so a Stop returns at once
		return nil
	}
	return h.StartLoop(ctx, h.watch)
}

// watch reads the meta topic's handover records written from its
// start on, and tells the client of each, until ctx ends.
func (h *handovers) watch(ctx context.Context) {
	cl := h.meta()
	from := int64(-1)
	for failures := 0; ctx.Err() == nil; {
		var err error
		if from < 0 {
			from, err = cl.MetaEnd(ctx)
			if err != nil {
				from = -1
			}
		}
		var recs []changelog.Rec
		if err == nil {
			recs, from, err = cl.WatchMeta(ctx, from)
		}
		if err != nil {
			failures++
			if failures == 1 || failures%60 == 0 {
				h.log.Debug("watching the meta topic for handovers failed; retrying", "topic", cl.MetaTopic(), "failures", failures, "err", err)
			}
			if !sleep(ctx, min(time.Duration(failures)*100*time.Millisecond, 2*time.Second)) {
				return
			}
			continue
		}
		failures = 0
		for _, r := range recs {
			h.told(r)
		}
	}
}

// told tells the client of the handover record r, if it is one.
func (h *handovers) told(r changelog.Rec) {
	if string(r.Key) != string(handoverKey) || r.Value == nil {
		return
	}
	var v handoverValue
	if err := json.Unmarshal(r.Value, &v); err != nil {
		h.log.Debug("undecodable handover record in the meta topic skipped", "offset", r.Offset, "err", err)
		return
	}
	if h.member.Rejoin(v.Member, v.Generation) {
		h.log.Debug("rejoining the group at once: another member handed partitions over",
			"member", v.Member, "generation", v.Generation)
	}
}
