package runtime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff/snapshot"
)

// ErrHandlerTimeout is the cause of a handler context whose class Timeout
// ran out. The handler has failed recoverably.
var ErrHandlerTimeout = errors.New("runtime: handler timeout")

// errDiverted is what the handler wrapper returns for a message it did not
// run but saved elsewhere (parked, or delayed by its header): the message
// is settled already and neither succeeded nor failed.
var errDiverted = errors.New("runtime: message diverted")

// Reasons recorded with saved messages.
const (
	reasonUnstarted   = "unstarted"
	reasonInterrupted = "interrupted"
	reasonBackoff     = "backoff"
	reasonFailed      = "failed"
	reasonRedelivery  = "redelivery"
	reasonScheduled   = "scheduled"
	reasonParked      = "parked"
	reasonUnknown     = "unknown class"
)

// handler wraps a class's handler: it parks messages of a blocked key,
// defers messages whose header asks for later delivery, and bounds the call
// by the class's Timeout.
func (r *Runtime) handler(c *class) func(context.Context, *item) error {
	return func(ctx context.Context, it *item) error {
		if it.src == fromKafka {
			if at, ok, err := deliverAt(&it.msg); err != nil {
				return err // permanent: a dead letter
			} else if ok && at.After(time.Now()) && r.deferDelivery(c, it, at) {
				return errDiverted
			}
		}
		if c.cfg.Ordered {
			if run, err := r.gate(c, it); !run {
				return err
			}
		}
		if c.cfg.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeoutCause(ctx, c.cfg.Timeout, ErrHandlerTimeout)
			defer cancel()
		}
		if r.metrics == nil && !sample(it) {
			return c.cfg.Handler(ctx, &it.msg)
		}
		began := time.Now()
		err := c.cfg.Handler(ctx, &it.msg)
		d := time.Since(began)
		c.svc.observe(d)
		r.metrics.observeHandler(c.index, d)
		return err
	}
}

// retry is every pool's RetryFunc: it counts the failed attempt and
// decides between a retry in place (returned to the pool) and what result
// does next.
func (r *Runtime) retry(c *class) func(*item, error) (time.Duration, bool) {
	return func(it *item, err error) (time.Duration, bool) {
		if errors.Is(err, errDiverted) {
			return 0, false
		}
		now := time.Now()
		it.msg.Attempt++
		if it.firstFailed.IsZero() {
			it.firstFailed = now
		}
		it.verdict, it.wait = c.cfg.Retry.decide(err, it.msg.Attempt, it.redeliveries, it.firstFailed, now, nil)
		if it.verdict == retryInPlace {
			r.inc(c, outRetried)
			r.log.Debug("handler failed; retrying in place", "class", c.cfg.Name, "id", it.msg.ID,
				"attempt", it.msg.Attempt, "wait", it.wait, "err", err)
			return it.wait, true
		}
		return 0, false
	}
}

// result is every pool's ResultFunc: done messages are settled, failed
// ones redelivered later or made dead letters.
func (r *Runtime) result(c *class) func(*item, error) {
	return func(it *item, err error) {
		switch {
		case err == nil:
			r.done(c, it)
		case errors.Is(err, errDiverted):
		case it.verdict == redeliverLater:
			r.redeliver(c, it, err)
		default:
			r.deadLetter(c, it, err)
		}
		r.leftPool(it)
		if it.src == fromKafka {
			// Nothing refers to a Kafka item once its result is in: the
			// pool is done with it and the handler must not keep it.
			// Items the stop or a rebalance takes out never get here.
			*it = item{}
			r.items.Put(it)
		}
	}
}

// leftPool ends an item's ties to the work that put it in a pool: a key's
// release waiting for it, a requeue in progress.
func (r *Runtime) leftPool(it *item) {
	if it.release != nil {
		it.release.Done()
		it.release = nil
	}
	if it.src == fromDead {
		r.requeueDone(it.key)
	}
}

// done settles a handled message and forgets its record.
func (r *Runtime) done(c *class, it *item) {
	switch it.src {
	case fromKafka:
		it.tr.settle(it.slot)
	case fromPending:
		r.delMu.Lock()
		r.delDone.pending = append(r.delDone.pending, it.key)
		r.delMu.Unlock()
	case fromDelayed:
		r.delMu.Lock()
		r.delDone.delayed = append(r.delDone.delayed, it.delayedKey)
		r.delMu.Unlock()
	case fromParked:
		r.logStoreErr("delete done parked message", it, r.store.Batch(func(tx *snapshot.Tx) error { return tx.DeleteParked(it.parkedKey) }))
	case fromDead:
		r.logStoreErr("delete requeued dead letter", it, r.store.Update(func(tx *snapshot.Tx) error { return tx.DeleteDead(it.key) }))
		r.inc(c, outRequeuedDone)
	}
	if c.cfg.Ordered {
		r.unblock(c, it)
	}
}

func (r *Runtime) logStoreErr(what string, it *item, err error) {
	if err != nil {
		r.log.Error("state file write failed; the message may run again after a restart", "op", what,
			"class", it.msg.Class, "id", it.msg.ID, "err", err)
	}
}

// deleteSource removes, inside tx, the record the item came from.
func deleteSource(tx *snapshot.Tx, it *item) error {
	switch it.src {
	case fromPending:
		return tx.DeletePending(it.key)
	case fromDelayed:
		return tx.DeleteDelayed(it.delayedKey)
	case fromParked:
		return tx.DeleteParked(it.parkedKey)
	}
	return nil
}

// moveTo saves the item elsewhere in the state file with save, deleting
// its source record in the same transaction, and then settles its offset:
// the offset counts as persisted once the transaction has committed. On
// failure nothing is settled, so Kafka delivers the message again after a
// restart. Workers' moves share transactions (one fsync for many).
func (r *Runtime) moveTo(it *item, what string, save func(tx *snapshot.Tx) error) bool {
	return r.move(r.store.Batch, it, what, save)
}

// moveNow is moveTo in a transaction of its own, for callers that hold a
// lock and must not wait for a shared one to fill.
func (r *Runtime) moveNow(it *item, what string, save func(tx *snapshot.Tx) error) bool {
	return r.move(r.store.Update, it, what, save)
}

func (r *Runtime) move(run func(func(*snapshot.Tx) error) error, it *item, what string, save func(tx *snapshot.Tx) error) bool {
	// save and deleteSource act only through tx: a Batch may run this
	// twice, the first time rolled back.
	err := run(func(tx *snapshot.Tx) error {
		// Delete first: a delayed record's new version has the same ID,
		// which SaveDelayed would take for a duplicate.
		if err := deleteSource(tx, it); err != nil {
			return err
		}
		return save(tx)
	})
	if err != nil {
		r.log.Error("state file write failed; offset stays uncommitted", "op", what,
			"class", it.msg.Class, "id", it.msg.ID, "err", err)
		return false
	}
	if it.src == fromKafka {
		it.tr.settle(it.slot)
	}
	return true
}

// deadLetter saves a failed message as a dead letter and, in an ordered
// class, parks its key.
func (r *Runtime) deadLetter(c *class, it *item, herr error) {
	rec := it.record(reasonFailed, herr, time.Now())
	if it.src == fromDead {
		// A requeued dead letter failed again: update it in place.
		if !r.moveTo(it, "update dead letter", func(tx *snapshot.Tx) error { return tx.PutDead(it.key, rec) }) {
			return
		}
	} else if !r.moveTo(it, "save dead letter", func(tx *snapshot.Tx) error { _, err := tx.SaveDead(rec); return err }) {
		return
	}
	r.inc(c, outDeadLettered)
	r.log.Warn("message became a dead letter", "class", c.cfg.Name, "id", it.msg.ID,
		"attempt", it.msg.Attempt, "err", herr)
	if c.cfg.Ordered {
		r.block(c, it)
	}
	r.publishDead(c, rec)
}

// redeliver stores a failed message for a delayed redelivery.
func (r *Runtime) redeliver(c *class, it *item, herr error) {
	it.redeliveries++
	due := time.Now().Add(it.wait)
	rec := it.record(reasonRedelivery, herr, time.Now())
	if !r.moveTo(it, "save delayed redelivery", func(tx *snapshot.Tx) error { return saveDelayed(tx, due, rec) }) {
		it.redeliveries--
		return
	}
	r.inc(c, outRedelivered)
	r.log.Info("message failed; redelivery scheduled", "class", c.cfg.Name, "id", it.msg.ID,
		"attempt", it.msg.Attempt, "redelivery", it.redeliveries, "due", due, "err", herr)
	if c.cfg.Ordered {
		r.block(c, it)
	}
	r.sched.wake(due)
}

// deferDelivery stores a Kafka message whose header asks for a later
// delivery, and reports whether it did; if not, the message runs now
// rather than wait in memory.
func (r *Runtime) deferDelivery(c *class, it *item, at time.Time) bool {
	rec := it.record(reasonScheduled, nil, time.Now())
	if !r.moveTo(it, "save delayed message", func(tx *snapshot.Tx) error { return saveDelayed(tx, at, rec) }) {
		return false
	}
	r.inc(c, outDeferred)
	r.sched.wake(at)
	return true
}

// errDuplicateDelayed is returned when a message to delay has the ID of
// one already waiting, which would drop it.
var errDuplicateDelayed = errors.New("runtime: a delayed message with this ID is already waiting")

// saveDelayed stores rec due at due, refusing to drop it as a duplicate.
func saveDelayed(tx *snapshot.Tx, due time.Time, rec snapshot.Record) error {
	added, err := tx.SaveDelayed(snapshot.Delayed{Due: due, Record: rec})
	if err != nil {
		return err
	}
	if !added[0] {
		return fmt.Errorf("%w: %s", errDuplicateDelayed, rec.Message.ID)
	}
	return nil
}

// publishDead sends a dead letter to the class's DeadLetterTopic, if any.
// The state file keeps it whatever happens here.
func (r *Runtime) publishDead(c *class, rec snapshot.Record) {
	if c.cfg.DeadLetterTopic == "" || r.dlq == nil {
		return
	}
	m := rec.Message
	headers := []kafka.Header{
		{Key: HeaderClass, Value: []byte(c.cfg.Name)},
		{Key: HeaderID, Value: []byte(m.ID)},
		{Key: HeaderAttempts, Value: strconv.AppendInt(nil, int64(m.Attempt), 10)},
		{Key: HeaderError, Value: []byte(rec.Err)},
	}
	if m.Origin.IsKafka() {
		headers = append(headers,
			kafka.Header{Key: HeaderOriginTopic, Value: []byte(m.Origin.Topic)},
			kafka.Header{Key: HeaderOriginPartition, Value: strconv.AppendInt(nil, int64(m.Origin.Partition), 10)},
			kafka.Header{Key: HeaderOriginOffset, Value: strconv.AppendInt(nil, m.Origin.Offset, 10)})
	}
	for _, h := range m.Headers {
		headers = append(headers, kafka.Header{Key: h.Key, Value: h.Value})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.dlq.WriteMessages(ctx, kafka.Message{Topic: c.cfg.DeadLetterTopic, Key: m.Key, Value: m.Value, Headers: headers})
	if err != nil {
		r.log.Error("dead letter not published; it stays in the state file", "class", c.cfg.Name, "id", m.ID,
			"topic", c.cfg.DeadLetterTopic, "err", err)
		return
	}
	r.inc(c, outPublished)
}

// openDLQ makes the writer for dead-letter topics when a class has one. It
// has its own transport, closed with it.
func (r *Runtime) openDLQ() {
	for _, c := range r.order {
		if c.cfg.DeadLetterTopic != "" {
			r.dlq = &kafka.Writer{
				Addr:                   kafka.TCP(r.cfg.Brokers...),
				Balancer:               &kafka.Hash{},
				RequiredAcks:           kafka.RequireAll,
				BatchTimeout:           time.Millisecond,
				AllowAutoTopicCreation: false,
				Transport:              &kafka.Transport{},
			}
			return
		}
	}
}

func (r *Runtime) closeDLQ() {
	if r.dlq == nil {
		return
	}
	if err := r.dlq.Close(); err != nil {
		r.log.Warn("dead-letter writer close failed", "err", err)
	}
	r.dlq.Transport.(*kafka.Transport).CloseIdleConnections()
}
