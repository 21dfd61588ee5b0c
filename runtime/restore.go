package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/changelog"
	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/snapshot"
)

// changelogConfig is the changelog client's configuration: the brokers,
// the connections (dial: TLS, SASL) and the client ID of the consumer's.
func (c *Config) changelogConfig(dial func(context.Context, string, string) (net.Conn, error), log *slog.Logger) changelog.Config {
	return changelog.Config{
		Brokers: c.Brokers, ClientID: c.ClientID, Group: c.Group, ConsumerProtocol: c.GroupProtocol == GroupProtocolConsumer, DialFunc: dial,
		Replication: c.ChangelogReplication, Timeout: c.ChangelogTimeout, Log: log,
	}
}

// restorer brings an assigned partition's state back from the changelog
// before the partition is fetched, and stops using a revoked partition's
// records: the consumer's partitionStates. It keeps no state
// of its own; what it restores and owns is the stateLog's.
type restorer struct {
	clog    *stateLog
	state   *stateFile
	classes map[string]*class
	order   []*class
	// fail makes a saved message of a class no longer configured a
	// dead letter (failures.orphan) and knows the dead letters a
	// requeue or discard holds (failures.requeues); nil (a test's) holds
	// none.
	fail *failures
	// sched is rewound after a restore (scheduler.wake) and forgets a
	// delayed record handed to a pool that left it unstarted
	// (scheduler.unhand), for a later restore here to deliver it again.
	sched *scheduler
	// handling ends the ties of an item taken out of its pool
	// (handling.outOfPool).
	handling *handling
	log      *slog.Logger
	// warn logs the follow's failures with backoff (follow.go).
	warn *logBackoff
	// locks orders a partition's restore, follows and revocation.
	locks partLocks
	// resumes learns the saved Kafka messages a restore re-pushes
	// (progress.go).
	resumes *resumes
	// stuck learns each failed restore and the one that succeeds
	// (stuck.go).
	stuck *stuckParts
	// revokeWait is half of RevokeTimeout (the generation's end waits
	// for the running Kafka messages after it): a revocation waits that
	// long for the requeued dead letters of its partition.
	revokeWait time.Duration
	// deletes holds the records of done messages until their batched
	// delete; a revocation deletes them at once (flushDone).
	deletes *snapshot.DoneQueue
}

// restoreRetryMax bounds the wait between two tries of a partition's
// restore.
const restoreRetryMax = 30 * time.Second

// restorePartition is the consumer's states.restore with the changelog on
// (restorer.restore, changelog.go): it brings partition p's state
// back (once, which calls restored once p's state is in the file and p
// is owned here) before its fetch loop starts, trying again with a
// growing wait while it fails: fetching the partition before its saved
// messages are back would run later messages of a key before earlier
// ones. It returns false when ctx ended first (the partition was
// revoked, or the stop began).
func (rs *restorer) restorePartition(ctx context.Context, p kclient.Partition, restored func()) bool {
	wait := time.Second
	for {
		err := rs.once(ctx, p, restored)
		if err == nil {
			rs.stuck.restored(p)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		rs.stuck.restoreFailed(p, err)
		rs.log.Error("partition state not restored from the changelog; its fetching waits", "partition", p.String(),
			"err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		wait = min(2*wait, restoreRetryMax)
	}
}

// once applies p's changelog to the state file and makes this file p's
// owner in the changelog (snapshot.Changelog.Restore: rebuilding p's
// records after a break), then recovers p's records as the start
// recovers a file: its pending records re-pushed,
// the keys its dead letters and redeliveries block, its parked keys, and
// its delayed records handed to the scheduler (which delivers only
// records of partitions restored here).
func (rs *restorer) once(ctx context.Context, p kclient.Partition, restored func()) error {
	l, c := rs.clog, rs.clog.cl()
	started := time.Now()
	if err := l.learn(ctx, p.Topic); err != nil {
		return err
	}
	if err := rs.noticePartition(ctx, p); err != nil { // repartition.go
		return err
	}
	unlock := rs.locks.lock(p, nil)
	res, err := c.Restore(ctx, part(p))
	unlock()
	if err != nil {
		return fmt.Errorf("restore %s from %s: %w", p, l.client.Topic(p.Topic), err)
	}
	applied := res.Applied
	for _, de := range applied.Bad {
		rs.log.Error("undecodable changelog record skipped", "partition", p.String(), "err", de)
	}
	rep := &Report{}
	v := recovery{state: rs.state, classes: rs.classes, order: rs.order, fail: rs.fail,
		orphans: &orphans{}, log: rs.log, want: c.RoutedTo(part(p)), pushed: l}
	v.resume, v.elsewhere = rs.resumes, rs.resumes.run(func(context.Context) []kclient.Partition { return []kclient.Partition{p} })
	restored()
	if err := v.run(ctx, rep); err != nil {
		c.Disown(part(p), false)
		return err
	}
	rs.moveAfterRestore(ctx, p, res.Misrouted)
	rs.sched.wake(time.Unix(0, 0)) // its delayed records, from the start
	n := len(applied.Pending) + len(applied.Dead) + len(applied.Delayed) + len(applied.Parked)
	l.restored.Add(int64(n))
	l.restoredParts.Add(1)
	l.repushed.Add(int64(rep.Repushed))
	l.blockedKeys.Add(int64(rep.BlockedKeys))
	l.unknownClass.Add(int64(rep.UnknownClass))
	rs.log.Info("partition state restored", "partition", p.String(), "changelog_records", res.Read, "restored", n,
		"deleted", applied.Deleted, "repushed", rep.Repushed, "blocked_keys", rep.BlockedKeys, "took", time.Since(started))
	return nil
}

// revokePartition is the consumer's states.revoked with the changelog on
// (restorer.revoked, changelog.go): p's records stop being used
// here. The scheduler no longer delivers its delayed records, the keys
// of ordered classes its dead letters and redeliveries block, or whose
// parked messages are being released, are dropped here (its next owner
// may finish the blockers and releases the keys; a restore here builds
// them again), and its re-pushed saved messages, delivered delayed ones
// and parked ones of those keys not yet started leave the pools (their
// records stay in the file, for the partition's next owner and for this
// instance if it gets the partition back).
func (rs *restorer) revokePartition(p kclient.Partition) {
	l := rs.clog
	// A follow of p under way ends first: what it pushed is taken back
	// below with the rest.
	defer rs.locks.revoke(p)()
	l.cl().Disown(part(p), true)
	for _, c := range rs.order {
		var dropped map[string]bool
		if c.keys != nil {
			dropped = c.keys.forget(p)
		}
		match := func(it *item) bool {
			switch it.src {
			case fromPending, fromDelayed, fromDead:
				// A requeued dead letter not started: its record stays
				// a dead letter, for the partition's next owner.
				q, ok := l.partitionOf(it.env())
				return ok && q == p
			case fromParked:
				// Pushed by the key's release; or by one before the key
				// was blocked again, and unblocked it would run past its
				// new blocker.
				return dropped[string(it.env().Key)]
			}
			return false
		}
		for _, it := range c.pool.Remove(match) {
			if it.src == fromDelayed {
				rs.sched.unhand(it.extOrZero().delayedKey)
			}
			rs.handling.outOfPool(it)
		}
	}
	rs.awaitRequeues(p)
	rs.flushDone(p)
}

// flushDone deletes at once, from the file and the changelog, the
// records of done messages queued for the next batched delete
// (snapshot.DeleteInterval): those of p's delayed and re-pushed messages
// that ended just before its revocation are gone when its next owner
// restores it, rather than run again there. Those of messages still
// running end later (see Known limits).
func (rs *restorer) flushDone(p kclient.Partition) {
	if err := rs.state.store.FlushDeletes(rs.deletes, rs.doneDeleted); err != nil {
		rs.state.writeFailed(err)
		rs.log.Error("records of done messages not deleted at a revocation; the partition's next owner may run them again",
			"partition", p.String(), "err", err)
	}
}

// doneDeleted is told of the records of done messages once deleted: the
// scheduler and the changelog's pushed marks forget them.
func (rs *restorer) doneDeleted(d snapshot.DoneRecords) {
	rs.sched.forget(d.Delayed...)
	rs.clog.unmarkPushed(d.Pending...)
}

// awaitRequeues waits, up to revokeWait, for the requeues and discards
// of p's dead letters still under way here (running in a pool, or
// claimed by a Requeue or Discard about to hand it over) to end, as the
// generation's end waits for p's running Kafka messages: the record's
// delete (or update, when it fails again) then reaches the changelog
// before the partition's next owner restores it, so that owner does not
// requeue it again. Past revokeWait it logs how many still run (the
// next owner may run them again: at least once).
func (rs *restorer) awaitRequeues(p kclient.Partition) {
	if rs.fail == nil {
		return
	}
	deadline := time.Now().Add(rs.revokeWait)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		n, err := rs.requeuesOf(p)
		if err != nil || n == 0 {
			return
		}
		if time.Now().After(deadline) {
			rs.log.Warn("requeued dead letters of a revoked partition still running; its next owner may requeue them again",
				"topic", p.Topic, "partition", p.Partition, "running", n, "waited", rs.revokeWait)
			return
		}
		<-t.C
	}
}

// requeuesOf counts the dead letters claimed by a requeue or a discard
// whose records belong to p.
func (rs *restorer) requeuesOf(p kclient.Partition) (int, error) {
	keys := rs.fail.requeues.claimed()
	if len(keys) == 0 {
		return 0, nil
	}
	n := 0
	err := rs.state.store.EachDeadOf(keys, func(_ uint64, rec *snapshot.Record) {
		if q, ok := rs.clog.partitionOf(&rec.Message); ok && q == p {
			n++
		}
	})
	return n, err
}
