// Package runtime is handoff's orchestrator: the main loop of a
// Kafka-consuming service. Each message class gets its own bounded pool;
// Kafka is read through a consumer group, with franz-go (the default) or
// kafka-go (see Choosing a Kafka client); offsets are committed only for
// messages that are done or saved; a stop drains for a bounded time and saves the rest to a bbolt
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
// failed (a failed message is saved as a dead letter). Offsets are
// committed per partition up to, never past, the lowest fetched offset
// that is neither done nor moved into a durable record (a dead letter, a
// redelivery, a delayed or parked record); a record counts as durable only
// once the bbolt transaction holding it has committed and, unless
// Config.LocalStateOnly is set, its changelog write has been acknowledged
// (see State that outlives the pod). At a stop, what has not finished is
// saved to the pending bucket of the state file, with each partition's
// progress (which offsets past the commit are not done), but its offsets
// are not committed: the saved records give the partition's next owner
// their order and attempt counts and let it skip the work already done,
// while Kafka keeps the messages. So a graceful stop, or a crash at any
// moment, loses nothing, even for a next owner that cannot read the saved
// state (an older version, a deleted changelog topic): Kafka delivers
// again everything past the last commit.
//
// # State that outlives the pod
//
// The state file is a local copy, not the only one. Every write to it for
// a class with topics (the stop's snapshot, dead letters, messages parked
// behind a failed key of an Ordered class, delayed and deliver-at
// messages, redeliveries, requeues and discards; a delete is written as a
// tombstone) is also written to a compacted Kafka topic,
// <Group>.<topic>.handoff-changelog, with as many partitions as the input
// topic. [Runtime.Run] creates a missing one at start with
// cleanup.policy=compact and replication Config.ChangelogReplication
// (zero: the broker's default).
//
// Every record belongs to a partition, and changelog partition p holds the
// records of input partition p. A Kafka message belongs to its own
// partition. A message with no partition (submitted with [Runtime.Submit]
// or scheduled) belongs to the partition of its class's first topic that
// its key hashes to with Kafka's default partitioner (murmur2), or its ID
// when it has no key, so it moves with the Kafka messages of its key. A
// class without topics has no changelog: its records are in the state
// file only, which must survive the restart for them.
//
// The commit rule counts a message as saved once both the bbolt
// transaction and the changelog write (acknowledged by every in-sync
// replica, within Config.ChangelogTimeout) have succeeded; a failed
// changelog write is a failed save, and the offset behind it is not
// committed. While running, a write that committed to the file but not to
// the changelog keeps its message's offset uncommitted, and a background
// loop sends it again every second until it succeeds. At the stop, a
// snapshot that cannot reach the changelog within ChangelogTimeout (and
// the stop's budget) takes its Kafka messages back out of the file, so
// Kafka delivers them again to the partition's next owner, and keeps its
// submitted messages in the file, to be sent at the next start.
//
// Restore: on each assignment, before a partition's first fetch, its
// changelog is read from the file's checkpoint for that partition (from
// the start when the file is new, on an empty disk) up to the high
// watermark and applied to the file: the last write of a record wins, a
// tombstone deletes it. Then the partition's saved messages are re-pushed,
// its keys blocked by a dead letter or a redelivery and their parked
// messages are restored, and its delayed messages go to the scheduler. So
// the partition's next owner, on a new disk or not, runs the previous
// owner's saved messages before anything newer of the same key. A file
// that survived a restart reads only the changelog written since its
// checkpoints. The records of a partition revoked from this instance stay
// in the file, unused; the partition's next owner has them from the
// changelog. An instance that begins owning a partition writes an owner
// marker naming its file to the partition's changelog before fetching
// it; a file assigned a partition that another file owned since (or that
// it has no checkpoint for) does not trust its copy: the partition is
// read from its start and its records in the file are replaced by what
// the changelog holds, since the tombstones of what the other owner
// finished may have expired (delete.retention.ms).
//
// A file written without the changelog (LocalStateOnly, or 0.2.0) sends
// every record it holds to the changelog at its first start with it,
// before joining the group; deletions made meanwhile cannot be sent, so
// a message may then run twice, never be lost. The [Report] fields Restored and RestoredPartitions tell what
// the restores brought back.
//
// Following: while it owns a partition, an instance reads what other
// instances write to that partition's changelog, every second, and puts
// it to work as a restore does. A message scheduled through an instance
// that does not own its key's partition is so delivered when due by the
// owner, within about a second; a submitted message that another
// instance saved at its stop runs on the owner, and one it dead-lettered
// is listed by the owner, which can requeue it. [Report].Followed counts
// these records.
//
// Fencing: each state file writes under a random file ID of its own, so a
// stalled former owner whose writes land late can only cause duplicates:
// it never deletes the state the new owner wrote.
//
// Config.LocalStateOnly turns all of this off and keeps the behaviour of
// the versions before 0.3.0: no changelog is created, read or written,
// the state file is the only copy, and it must survive every restart (a
// persistent volume). A start on a new file while the group has committed
// offsets is then logged at Warn and sets
// handoff_state_file_new_with_commits.
//
// The changelog topics need these ACLs for the group's principal: CREATE
// (or topics created beforehand), WRITE, READ and DESCRIBE on
// <Group>.*.handoff-changelog.
//
// # Starting
//
// [Runtime.Run] opens the state file (a second process on the same file
// gets [snapshot.ErrLocked] naming the file after LockTimeout), re-pushes
// every saved message into its pool, oldest first, before the first fetch,
// checks that every configured topic exists (see [Class.WaitForTopics])
// and joins the consumer group; [Runtime.Ready] is true once all of that
// is done and the first generation has arrived (with the changelog, and
// its partitions have read their changelogs), and false again while a
// partition it owns is stuck: its fetch, or its restore before the first
// fetch, has failed for longer than Config.StuckAfter (1 minute by
// default) with no success since, which one ERROR per episode names with
// its error. With the changelog, the
// saved Kafka messages of a partition are re-pushed when the partition is
// assigned, after its restore and before its first fetch (see State that
// outlives the pod). A saved record is deleted only when its
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
//     readers close in the background, joined in step 6), [Runtime.Submit]
//     and [Runtime.Requeue] return [ErrNotRunning]. [Runtime.Schedule]
//     still saves its message, until step 4, so a handler's follow-up
//     work survives the stop: it runs after the restart. A handler that
//     fails on the stop's ErrNotRunning is not seen as an outage and its
//     attempt is not counted: it is saved, and runs again after the
//     restart.
//  2. Drain: pools keep working until empty or DrainTimeout, waiting for
//     the retries in place due before then. A second signal (see
//     [HandleSignals]) or Shutdown's context ending skips the rest.
//  3. Hard stop: unstarted messages are taken out; running handlers get
//     their context cancelled with cause [ErrStopping] and HardStopGrace to
//     return. A handler that returns an error then is interrupted, not
//     failed: its attempt is not counted and it runs again after the
//     restart. One that has not returned is recorded as interrupted too.
//  4. Snapshot: everything taken out is saved in ONE bbolt transaction,
//     with each partition's progress, and written to the changelog within
//     ChangelogTimeout. The saved Kafka messages' offsets are never
//     committed (see the commit rule above). If the transaction fails,
//     Run returns an error with the count; if the changelog write fails,
//     the snapshot's Kafka messages are taken back out of the file (see
//     State that outlives the pod).
//  5. Commit: offsets by the rule above, at most 2s. A commit the group
//     refuses because a rebalance the stop overlapped ended the
//     generation (the member fenced) is no failure: the partitions' new
//     owners read again what was settled since the last commit, so the
//     stop is clean, with a warning.
//  6. Wait for the readers to close (each at most FetchMaxWait + 1s), leave
//     the group and close the state file. Leaving finishes a group join in
//     flight first (a member that exits with its join pending is given
//     partitions it never reads until its session expires), so it may use
//     what the earlier phases left of the stop's budget. Dead letters still
//     queued for a DeadLetterTopic get what is then left of it to be
//     published (the state file has them either way).
//
// Every call into the Kafka client that can block during the stop is bounded, so a
// stop ends within its budget, DrainTimeout + HardStopGrace + FetchMaxWait
// + 4s (the snapshot, the commit, the reader closes, the leave), even when
// the broker stops answering. That sum, with ChangelogTimeout for the
// snapshot's changelog write, must fit the orchestrator's termination
// grace (Kubernetes terminationGracePeriodSeconds).
//
// # Outages: suspension and pause
//
// A dependency outage is not a property of a message: when a class's
// recoverable failures reach [SuspendPolicy.After] attempts in a row,
// of at least three distinct messages, with no success between them, or
// a handler returns
// [handoff.Unavailable], the class is suspended as a whole. It takes no
// new messages (its partitions' fetching waits; the group membership
// stays; other classes are not slowed), keeps those it holds with their
// attempt counts (no failure of the suspension counts toward
// MaxAttempts), and one probe at a time retries a held message with
// backoff until a handler succeeds; then it runs at full concurrency.
// [Runtime.Pause] and [Runtime.Resume] do the same by hand; a pause is
// kept in the state file and, with the changelog, in the topic
// <Group>.handoff-meta, which every instance reads at its start and
// follows while it runs: a pause or resume through one instance holds for
// the whole group within about a second.
// [ClassStats].Hold tells the state.
//
// # Rate limits
//
// [Class].RateLimit bounds how fast a class's handlers start messages,
// across its workers: every start takes a token (fetched, submitted,
// re-pushed, redelivered or requeued messages, and retries in place; in
// a batch class each message of a batch). A worker waits for its token
// holding its worker, the message still queued, so a limited class's
// queue fills and its own fetching waits, not another class's. The wait
// is not handler time. The drain goes on at the limit; the hard stop ends
// the waits at once and saves the waiting messages as unstarted. The zero
// value means no limit. See [RateLimit].
//
// # Batches
//
// A class with a BatchHandler instead of a Handler gets up to MaxBatch
// messages per call (a bulk insert). Batching changes how messages are
// handed to the handler, nothing else: each message keeps its own attempt
// count, retries, dead letter, parking, commit and stop, exactly as in a
// class of single messages.
//
//   - Which messages share a batch: those that come up to run in the
//     class's pool while the batch fills, in the order they start. A batch
//     starts its call once one of the class's Workers call slots is free
//     and it has MaxBatch messages, or MaxWait after its first message
//     came in (without middleware: after the free worker began waiting
//     for them, while they stay queued in the pool). A message
//     diverted before it runs (deferred by its deliver-at header, parked
//     behind its key) joins no batch. In an Ordered class a key's next
//     message comes up only once the previous one's result is in, so a
//     batch holds at most one message per key: per-key order holds, and a
//     key's failure parks its later messages before any of them runs.
//   - How the result decides the messages: nil, every message is done; a
//     [handoff.BatchError], the messages it names fail, each with its own
//     error, and the others are done; any other error (a panic included)
//     fails every message with it. Each failed message then goes its own
//     way by the class's RetryPolicy: a retry in place joins a later
//     batch after its backoff (with Attempt counted), a redelivery is
//     delayed, a [handoff.Permanent] one or one out of attempts becomes a
//     dead letter (in an Ordered class, parking its key).
//   - The stop: a batch still filling when the hard stop begins is not
//     called; its messages are interrupted (without middleware they are
//     still queued, and the stop takes them back unstarted). A batch whose call is running
//     gets the cancelled context; the messages it then fails (all of them
//     for a plain error, the BatchError's entries otherwise) are
//     interrupted, saved and handled again after the restart, and none is
//     counted as an attempt; those it leaves done are done. A call that
//     has not returned after HardStopGrace leaves all its messages
//     interrupted (stragglers).
//   - Middleware (Config.Middleware, Class.Middleware) runs per message:
//     each message of a batch class passes through the chain on its own,
//     once per attempt and with its own attempt context ([OnOutcome],
//     [SetHeaders]), and the chain's innermost handler puts the message
//     it is given into the batch and returns that message's result. A
//     middleware that returns without calling next keeps its message out
//     of the batch; the time a middleware sees includes the wait for the
//     batch and the call.
//   - Timeout bounds each batch call. Counts ([Report], [ClassStats],
//     handoff_messages_total) are per message. The drain estimate uses the
//     call's time divided by its messages, with Workers calls at once;
//     handoff_handler_duration_seconds observes each call and
//     handoff_batch_messages{class} its size. The drain waits at most
//     MaxWait more for the last partial batch.
//
// Without middleware the pool of a batch class makes the batches itself:
// Workers workers, each taking up to MaxBatch ready messages at once.
// With middleware it has (Workers+1)×MaxBatch worker goroutines (Workers
// batches running and one filling), since each message passes through the
// chain on its own. QueueSize defaults to Workers×MaxBatch.
//
// # Paging and the state file
//
// [Runtime.DeadLetters], [Runtime.Delayed], [Runtime.ParkedKeys],
// [Runtime.Parked], [Runtime.Requeue] and [Runtime.Discard] work on the open state file of a
// running runtime (they return [ErrNotRunning] otherwise); the listings
// page with an opaque [Cursor].
//
// # Connecting to a secured cluster
//
// Config.TLS, Config.SASL and Config.ClientID apply to every connection
// the runtime makes, on either client. PLAIN and SCRAM are kafka-go's
// sasl.Mechanism implementations
// ([github.com/handoff-go/handoff/kafkasec.Mechanism] builds them by
// name); the runtime's own dialer performs the handshake for either
// client. Any other sasl.Mechanism plugs in, such as the Amazon MSK IAM
// signer of github.com/segmentio/kafka-go/sasl/aws_msk_iam_v2 with TLS on.
// Before the recovery and the join, [Runtime.Run] connects to a bootstrap
// broker: a refused TLS handshake or SASL authentication ends it with a
// [*kafkasec.ConnectError] naming the broker, the mechanism and the user
// (never the password); brokers that do not answer yet are waited for,
// with a warning per attempt, 1s to 30s apart. Refused connections during
// the run are logged (once per 10s) and counted in
// handoff_kafka_auth_errors_total; the runtime keeps running, and
// partitions that need a new connection wait until the settings are fixed
// (nothing is lost: what is not committed is read again).
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
//   - handoff_handler_duration_seconds{class,outcome}: histogram of handler
//     calls, a sample of one call in 8 (its count is about an eighth of
//     the calls; each batch call in a batch class), outcome succeeded,
//     failed, timed_out or panicked;
//     handoff_handler_errors_total{class}: every call that failed or
//     panicked.
//   - handoff_pool_queued, handoff_pool_waiting, handoff_pool_running and
//     handoff_pool_workers{class}: the class's pool right now (see
//     [ClassStats]).
//   - handoff_batch_messages{class}: histogram of messages per call of a
//     batch class.
//   - handoff_drain_estimate_seconds{class} and
//     handoff_drain_over_budget{class}: how long the class's queued and
//     running work would take to drain (running handlers counted by the
//     time they have run so far), and 1 when that exceeds DrainTimeout
//     (checked once a second; a warning is logged then).
//   - handoff_consumer_lag_messages{topic,partition}: last stable offset
//     (high watermark with ReadUncommitted) minus the group's committed
//     offset of each partition this instance holds, asked of the brokers
//     every CommitInterval; a partition's series is removed when it
//     leaves this instance (rebalance, stop).
//   - handoff_oldest_unsettled_age_seconds{class}: age of the class's
//     oldest fetched message that is neither done nor saved.
//   - handoff_rebalances_total, handoff_commit_failures_total,
//     handoff_fetch_errors_total{topic} and
//     handoff_dead_letter_publish_failures_total{class}.
//   - handoff_dead_letter_oldest_age_seconds{class}: age of the class's
//     oldest dead letter of the partitions this instance owns (since it
//     was saved or last failed), sampled every 30s; 0 when none.
//   - handoff_dead_letters_dropped_total{class,reason}: dead letters the
//     class's bound dropped from the state, reason="age"
//     (Class.DeadLetterRetention) or "count" (Class.MaxDeadLetters).
//   - handoff_dead_letter_ops_total{action,outcome}: dead letters this
//     instance acted on for the group's dead-letter operations
//     (Runtime.StartDeadOp, and a Requeue or Discard asked through
//     another instance), action="requeue" or "discard",
//     outcome="done", "failed" or "skipped".
//   - handoff_state_write_failures_total{target}: writes of the state that
//     failed, to the state file (target="file": a full, lost or read-only
//     disk) or, after the file committed, to its changelog
//     (target="changelog"). The log says what each one left uncommitted.
//   - handoff_state_file_lost_total: times the state file was found
//     deleted or replaced while running (checked every second and at the
//     stop's end). A deleted file is written back at once from the one
//     the runtime has open, and the runtime goes on with it: nothing is
//     lost. A file another process put at the path is left alone, and the
//     runtime is not ready until the path holds its file again.
//   - handoff_stuck_partitions: the partitions this instance owns that are
//     stuck (their fetch, or restore from the changelog before the first
//     fetch, has failed for longer than Config.StuckAfter with no success
//     since; the runtime is not ready while there is one), and
//     handoff_partition_stuck_seconds{topic,partition}: how long each
//     stuck one has failed (only stuck partitions have a series).
//   - handoff_ready: 1 while [Runtime.Ready]; handoff_start_time_seconds:
//     when [New] ran, the start of every counter.
//   - handoff_build_info{version,go_version,client}: always 1, labelled
//     with [handoff.Version], the Go version and Config.Client;
//     handoff_drain_timeout_seconds: Config.DrainTimeout.
//   - handoff_stop_phase_duration_seconds{phase} and
//     handoff_snapshot_messages: the phases of the last stop (quiesce,
//     drain, hard_stop, snapshot, commit, leave) and how many messages it
//     saved. The stop sets them, so only a process that keeps serving its
//     metrics after Run returns shows them to a scrape; a service that
//     exits then has the same figures in the stop's log lines ("stop
//     phase done", "stop complete") and in the [Report].
//   - handoff_state_records{bucket}: records in the state file's pending,
//     dead, parked and delayed buckets, counted at each scrape.
//   - handoff_state_file_new_with_commits: 1 when this run started on a
//     new state file (empty when Run opened it: no record, no meta of a
//     previous run) while the group had committed offsets for the
//     configured topics, which is logged at Warn ("state file is new but
//     the group has commits: was a disk lost?"); 0 otherwise.
//   - handoff_kafka_auth_errors_total{step}: connections to the brokers
//     refused at step tls_handshake, sasl_handshake or sasl_authentication.
//   - handoff_class_suspended{class} and handoff_class_paused{class}: 1
//     while the class is suspended by a detected outage (see
//     [SuspendPolicy]) or paused ([Runtime.Pause]);
//     handoff_class_suspensions_total{class}; and
//     handoff_class_suspended_seconds{class} (the current suspension so
//     far, 0 when none) and handoff_class_suspended_seconds_total{class}.
//   - handoff_share_acks_total{class,ack}: records of a share class
//     accepted, rejected (dead letters) or released to its share group;
//     handoff_share_renewals_total{class} and
//     handoff_share_ack_errors_total{class}. Only with share classes.
//
// # Share classes
//
// A class with [Class.ShareGroup] consumes its topics through a Kafka
// share group (KIP-932, Queues for Kafka; Kafka 4.2 or later, franz-go
// only) instead of the consumer group: the broker hands each record to
// one member under a time lock, whatever its partition, so the class
// scales past its topics' partition count, and the records an instance
// did not finish go back to the broker at once for the other members.
// It was tested against the embedded broker's implementation of the
// protocol (franz-go's kfake), not against Apache Kafka itself.
//
// Its member polls one batch at a time, of at most QueueSize + Workers
// records, and only once every record of its last poll is settled: a
// poll accepts what the last one left unacknowledged, and a record
// fetched ahead would wait under a lock that nothing renews. Every
// record it holds (queued, running, waiting out a backoff, suspended)
// has its lock renewed from half its duration on (at least every 10s). A
// paused share class releases what has not started and, once what runs
// is done, leaves its share group until the resume. A record is accepted
// when it is done or saved for a delayed delivery, rejected once its
// dead letter is saved (its [HeaderDeliveryCount] is the broker's
// delivery count), released when its save fails.
//
// It gives no order (Ordered is refused), no delayed redeliveries of
// the Retry policy (refused: a released record is redelivered at once),
// and its dead letters and delayed records (HeaderDeliverAt, Schedule)
// stay in the state file alone, as a class without topics' do: no
// changelog, since no instance owns a partition of a share group.
//
// Its stop: the quiesce ends the polling and releases the records not
// started; the drain runs on, renewing the locks of the records still
// held and accepting what finishes; the hard stop releases what is left
// (unstarted, waiting, interrupted) instead of saving it; then the
// acknowledgements are flushed and the member leaves the group. Nothing
// is snapshotted; [Report].ShareReleased counts the releases. A record
// at the group's delivery limit (share.delivery.count.limit) that the
// stop would release is saved as a dead letter instead: the broker
// would archive it unseen. The delivery count is not the attempt count:
// each stop that releases a record adds a delivery.
//
// # Rebalances
//
// Offset trackers belong to one partition's stay with this instance. When
// a rebalance takes partitions away, they stop fetching, their unstarted
// messages are given back, running ones get RevokeTimeout, and what is
// settled is committed before the client rejoins; a late result only marks
// trackers nobody commits any more, so it can never move the offsets of the
// partition's next owner. Messages still running then finish; the new
// owner reads them again (at-least once). On kafka-go every rebalance
// revokes all partitions; on franz-go only those that move.
//
// # Choosing a Kafka client
//
// [Config.Client] picks the library: [ClientFranzGo] (the default) or
// [ClientKafkaGo]. Both keep the same commit rule, stop phases, metrics and
// logs. kafka-go's group is eager and dynamic: every restart of an
// instance is a rebalance of the whole group, its partitions move to
// others while it is down, and its snapshot's keys may then run out of
// order across instances (StopSnapshot). franz-go's member is
// cooperative-sticky (only moving partitions are revoked) and, with
// Config.Instance set, static: a restart within SessionTimeout gets its
// own partitions back, nothing moves and nothing is revoked elsewhere.
// franz-go also fetches per broker rather than per partition, which keeps
// hundreds of partitions cheap. Choose franz-go for services that deploy
// often or hold many partitions; set Instance to a stable, unique name (a
// StatefulSet pod's) and SessionTimeout above a restart's duration. A group
// can move from kafka-go to franz-go by a rolling restart (franz-go also
// offers kafka-go's range assignor until the last kafka-go member is gone).
//
// [Config.GroupProtocol] set to [GroupProtocolConsumer] makes the franz-go
// member join with the consumer group protocol of KIP-848: the broker
// assigns the partitions and moves them one member at a time through the
// heartbeats, with no group-wide join for a slow member to hold up. The
// runtime's side is the same: a revoked partition's handlers are waited
// for and its offsets committed (in the member's epoch) before the broker
// hands it on, and the stop commits and leaves as under the classic
// protocol. It needs Kafka 4.0 or later brokers with the protocol enabled
// (the start fails, naming the option, against brokers that do not serve
// it), and kafka-go does not have it ([New] refuses it). The broker sets
// the session timeout and heartbeat interval then
// (group.consumer.session.timeout.ms, group.consumer.heartbeat.interval.ms),
// not SessionTimeout. The rebalance and stop tests run on it against the
// embedded broker's (kfake's) implementation of the protocol.
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
