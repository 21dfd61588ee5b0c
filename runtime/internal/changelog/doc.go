// Package changelog does the Kafka side of the state changelog: every
// write to the state file of a class with topics is also written to a
// compacted topic, and a partition's next owner reads it back before it
// fetches the partition, as Kafka Streams restores its stores.
//
// # Topics
//
// Input topic t of group g has the changelog topic
// g.t.handoff-changelog ([Client.Topic]), with t's partition count:
// its partition p holds input partition p's state. The pauses of
// classes, which are not per partition, go to g.handoff-meta
// ([Client.MetaTopic]), one partition, read whole at the start. All are
// compacted (cleanup.policy=compact): the last record of a key wins, a
// record with a nil value (a tombstone) deletes the key.
//
// # Clients
//
// A [Client] holds two franz-go (kgo) clients whatever Kafka client the
// runtime uses: a producer (acks from all in-sync replicas, idempotent,
// records on explicit partitions) for [Client.Send] and
// [Client.WriteMeta], and a client with no group for the topic checks
// and the reads, which are plain Fetch requests to each partition's
// leader: no read joins a group or commits an offset. Both dial through
// [Config.DialFunc], which carries TLS and SASL.
//
// # Blocking
//
// [New] does no I/O. [Client.Ensure] blocks until the brokers answered
// its metadata, creation and config requests, or ctx ends.
// [Client.Send] only queues; the wait func it returns blocks until
// every record is acknowledged, [Config.Timeout] passed, or its ctx
// ended. [Client.Read] and [Client.ReadMetaFrom] block until they reached
// the end offset they found at their start, fn failed, or ctx ended.
// [Client.WriteMeta] blocks as a Send and its wait. [Client.Close]
// fails what is queued and does not wait for any broker.
package changelog
