// Package runtime is handoff's orchestrator: the main loop of a
// Kafka-consuming service. Each message class gets its own bounded pool;
// Kafka is read through a kafka-go consumer group, one reader per assigned
// partition; offsets are committed only for messages that are done or
// saved; a stop drains for a bounded time and saves the rest to a bbolt
// state file that the next start re-pushes first.
//
// The package name shadows the standard library's runtime; import it with
// an alias where both are needed:
//
//	import (
//		goruntime "runtime"
//
//		"github.com/handoff-go/handoff/runtime"
//	)
//
// # Message states and the commit rule
//
// A fetched message is queued in its class's pool, runs, and ends done or
// failed (a failed message is saved as a dead letter). At a stop, what has
// not finished is saved to the pending bucket of the state file. Offsets
// are committed per partition up to, never past, the lowest fetched offset
// that is neither done nor saved; a message counts as saved only once the
// bbolt transaction holding it has committed. So a graceful stop, or a
// crash at any moment, loses nothing: Kafka delivers again everything past
// the last commit.
//
// # Starting
//
// [Runtime.Run] opens the state file (a second process on the same file
// gets [snapshot.ErrLocked] naming the file after LockTimeout), re-pushes
// every saved message into its pool, oldest first, before the first fetch,
// and joins the consumer group. A saved record is deleted only when its
// message is done, so a crash during recovery loses nothing. A record that
// cannot be decoded moves to the quarantine bucket; one whose class no
// longer exists becomes a dead letter.
//
// # Stopping
//
// Cancelling Run's context, [Runtime.Shutdown] or [Runtime.Close] starts
// the stop, whose phases are logged and timed in the [Report]:
//
//  1. Quiesce: [Runtime.Ready] turns false, fetching stops (the partition
//     readers close in the background, joined in step 6).
//  2. Drain: pools keep working until empty or DrainTimeout. A second
//     signal (see [HandleSignals]) or Shutdown's context ending skips the
//     rest.
//  3. Hard stop: unstarted messages are taken out; running handlers get
//     their context cancelled with cause [ErrStopping] and HardStopGrace to
//     return. A handler that returns an error then is interrupted, not
//     failed: its attempt is not counted and it runs again after the
//     restart. One that has not returned is recorded as interrupted too.
//  4. Snapshot: everything taken out is saved in ONE bbolt transaction. If
//     that fails, those offsets are not committed and Run returns an error
//     with the count.
//  5. Commit: offsets by the rule above, at most 2s.
//  6. Wait for the readers to close (each at most FetchMaxWait + 1s), leave
//     the group (at most 1s) and close the state file.
//
// Every call into kafka-go that can block during the stop is bounded, so a
// stop ends within DrainTimeout + HardStopGrace + the snapshot + about 4s,
// even when the broker stops answering. That sum must fit the
// orchestrator's termination grace (Kubernetes
// terminationGracePeriodSeconds).
//
// # Rebalances
//
// Offset trackers belong to one consumer group generation. When kafka-go
// ends a generation, its partitions stop fetching and what is settled is
// committed before the generation's work returns; a late result of the old
// generation only marks trackers nobody commits any more, so it can never
// move the new generation's offsets. Messages of the old generation still
// in the pools run to the end; the new owner reads them again (at-least
// once).
package runtime
