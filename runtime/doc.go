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
//     the group and close the state file. Leaving finishes a group join in
//     flight first (a member that exits with its join pending is given
//     partitions it never reads until its session expires), so it may use
//     what the earlier phases left of the stop's budget. Dead letters still
//     queued for a DeadLetterTopic get what is then left of it to be
//     published (the state file has them either way).
//
// Every call into kafka-go that can block during the stop is bounded, so a
// stop ends within its budget, DrainTimeout + HardStopGrace + FetchMaxWait
// + 4s (the snapshot, the commit, the reader closes, the leave), even when
// the broker stops answering. That sum must fit the
// orchestrator's termination grace (Kubernetes
// terminationGracePeriodSeconds).
//
// # Paging and the state file
//
// [Runtime.DeadLetters], [Runtime.Delayed], [Runtime.ParkedKeys],
// [Runtime.Requeue] and [Runtime.Discard] work on the open state file of a
// running runtime (they return [ErrNotRunning] otherwise); the listings
// page with an opaque [Cursor].
//
// # Metrics
//
// With Config.Registerer set, the runtime registers these metrics on it
// (never on the default registry):
//
//   - handoff_messages_total{class,outcome}: messages by outcome, one of
//     succeeded, retried, dead_lettered, redelivered, parked, released,
//     deferred, scheduled, delivered, requeued, requeued_done, discarded,
//     published, unpublished, held (the fields of [Report]; requeued_done
//     counts requeued dead letters that then succeeded).
//   - handoff_pool_queued, handoff_pool_waiting, handoff_pool_running and
//     handoff_pool_workers{class}: the class's pool right now (see
//     [ClassStats]).
//   - handoff_handler_duration_seconds{class}: histogram of handler time.
//   - handoff_drain_estimate_seconds{class} and
//     handoff_drain_over_budget{class}: how long the class's queued and
//     running work would take to drain, and 1 when that exceeds
//     DrainTimeout (checked once a second; a warning is logged then).
//   - handoff_ready: 1 while [Runtime.Ready].
//   - handoff_stop_phase_duration_seconds{phase} and
//     handoff_snapshot_messages: the phases of the last stop (quiesce,
//     drain, hard_stop, snapshot, commit, leave) and how many messages it
//     saved.
//   - handoff_state_records_pending, _dead, _parked and _delayed: records
//     in the state file's buckets, counted at each scrape.
//   - handoff_commit_lag{topic,partition}: high watermark minus committed
//     offset, as of the last fetch and commit.
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
//
// # Middleware
//
// Config.Middleware (every class) and Class.Middleware (one class) wrap
// the class's Handler, composed once by [New]: the runtime's first, the
// first of each list outermost. The chain runs inside what the runtime
// does before a handler (a message deferred by its deliver-at header or
// parked behind its key reaches no middleware) and inside the class's
// Timeout, whose deadline its context carries; handler time in the
// metrics includes the middleware's. Each attempt passes through the
// chain once, and the retry policy judges what the chain returns; the
// retry in place, redelivery or dead letter that follows is decided after
// the chain has returned, and [OnOutcome] tells a middleware which.
// [SetHeaders] changes the headers the message is saved with for its
// next steps (the otelhandoff package keeps an attempt's trace context
// so).
package runtime
