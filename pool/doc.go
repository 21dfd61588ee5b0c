// Package pool runs one message class's handlers: a bounded number of
// workers behind a bounded queue, with optional per-key ordering, a drain
// and a hard stop that hands back everything not handled.
//
// A [Pool] is generic over its item type, so the caller can carry its own
// bookkeeping with each item at no extra cost. It knows nothing of Kafka,
// of the runtime or of the state file. A pool holds no goroutine while
// idle.
//
// # What pond does and what the pool does
//
// github.com/alitto/pond/v2 runs the goroutines: each pool owns one pond
// pool of Workers, and every pond task is a worker loop that takes items
// until none is ready, then exits. pond bounds the goroutines and reuses
// them; its own queue stays empty (there are never more loops than
// Workers) and its panic recovery is off. Everything an item goes through
// is this package's: admission and the QueueSize bound (pond's blocking
// submit honours only the pool's own context, not the caller's), the
// per-key FIFOs of Ordered, retry timers, panic recovery into
// *handoff.PanicError, Drain, and Stop's hand-back of every item not
// handled, which pond cannot do: once its context is cancelled a pond
// future cannot tell a task that ran from one that never started. One
// pond task per item instead of per loop measured 3.8 times slower than
// raw pond from lock contention, so the loop holds the pool's lock for
// the hand-off of one item to the next.
//
// # Backpressure
//
// [Pool.Submit] blocks while [Config.QueueSize] items are accepted and not
// running (queued, or waiting out a retry delay), until there is room, the
// caller's ctx ends or [Pool.Stop] begins. Waiting Submits get room first
// come, first served, and items start in submission order as far as their
// keys allow.
//
// [Pool.SubmitFirst] is for items accepted once before (messages saved at
// a stop and re-pushed): it is served before every waiting Submit and
// SubmitBatch, in a lane of QueueSize more, so its items start before
// anything submitted after them and a few of them never wait for a
// worker, however busy the class.
//
// [Pool.SubmitBatch] hands several items over in one operation, as that
// many Submits one after the other would (the same order, backpressure
// and ctx): one lock for the items there is room for, and at most one
// worker loop woken; each loop that starts an item wakes the next while
// ready items outnumber the loops on their way.
//
// # Batch handlers
//
// With [Config.BatchHandler] a worker takes up to [Config.MaxBatch] ready
// items under one lock and calls the handler once for them; a worker
// that finds fewer ready waits up to [Config.MaxWait] for more, while
// they stay queued (Stop, Remove, Hold and Drain see them as any queued
// item). Each item of a call then settles on its own, with its own error:
// retried, reported, interrupted by Stop or a straggler, and in an
// Ordered pool its key's next item becomes ready. A call holds at most
// one item per key, since only a key's first item is ready.
//
// # Rate
//
// With [Config.Rate] the pool starts at most Rate items a second across
// its workers, in bursts of up to [Config.Burst] (a token bucket from
// golang.org/x/time/rate). A worker waits for its token before it takes
// a ready item, so the item stays queued: it counts against QueueSize
// (Submit pushes back), Stop hands it back as unstarted and ends the
// wait at once. Every start takes a token, retries too; with a
// BatchHandler each item of a call takes one.
//
// # Ordering
//
// With [Config.Ordered], items with the same key run one at a time in
// submission order; items with different keys run in parallel. Among the
// items whose key is free the oldest starts first, so a single-worker pool
// runs everything in submission order. The next item of a key starts only
// after the previous one's ResultFunc has returned, so a caller can record
// the outcome before it is overtaken. Items waiting behind a busy key
// count against QueueSize.
//
// # Retries
//
// With [Config.RetryFunc], a failed attempt may be retried instead of
// reported: the item waits out a delay without holding a worker, then runs
// again ahead of the items accepted after it. In an Ordered pool its key
// stays busy meanwhile, so per-key order holds while other keys flow.
// Waiting items count against QueueSize, so a class whose items keep
// failing slows its own submitters down rather than growing without bound.
//
// # Results
//
// Each accepted item ends in exactly one way: done or failed (reported to
// [Config.ResultFunc] and counted in [Stats]), or handed back by
// [Pool.Stop] as unstarted, waiting (out a retry delay) or interrupted. A
// panic in a handler is recovered, logged with its stack and reported as a
// *handoff.PanicError; the worker survives.
//
// # Stopping
//
// [Pool.Drain] waits until nothing runs or is ready to run, without
// refusing new items; call it once nothing submits any more. It waits
// for the retries whose delay ends before its context's deadline, not for
// later ones. [Pool.Stop] is the hard stop: it refuses new
// items, takes out the unstarted and the waiting ones, cancels the
// handlers' context with a cause and waits a bounded grace for them.
// Handlers that return an error once cancelled, and those still running
// after the grace (stragglers), are returned as interrupted: at-least-once
// delivery means they will run again.
package pool
