package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// Config describes one pool. [New] copies it; changing it afterwards has no
// effect.
type Config[T any] struct {
	// Name is the message class the pool serves. It names the pool in
	// errors and is the "class" attribute of its logs. Required.
	Name string

	// Workers is the most handlers that run at once. It must be > 0; there
	// is no default.
	Workers int

	// QueueSize is the most items the pool holds accepted but not running.
	// While it holds that many, [Pool.Submit] blocks. In an Ordered pool the
	// items waiting behind a busy key count too, and so do items waiting
	// out a retry delay (see RetryFunc), so a class whose items keep failing
	// pushes back on its own submitters. A retry never waits for room: it
	// may take the pool over QueueSize by up to Workers items, and Submit
	// waits until the pool is back under it. [Pool.SubmitFirst] (saved
	// messages re-pushed) has a lane of its own of QueueSize more, so the
	// pool may hold up to 2×QueueSize then. It must be > 0; there is no
	// default (an unbounded queue is what this package exists to avoid).
	QueueSize int

	// Ordered makes items with the same key (see KeyFunc) run one at a time,
	// in submission order; items with different keys still run in parallel.
	// The next item of a key starts only after the previous one's handler
	// and ResultFunc have returned; among items whose key is free, the
	// oldest starts first. False means items start in submission order but
	// may run and finish in any order.
	Ordered bool

	// KeyFunc gives an item's ordering key. It is called once per item, in
	// Submit or SubmitBatch, on the caller's goroutine (in SubmitBatch with
	// the pool's lock held: it must be quick and must not call the pool).
	// Required when Ordered, and must be nil otherwise (a key without
	// ordering is most likely a forgotten Ordered). The pool keeps a 64-bit
	// hash of the key (hash/maphash, seeded per pool), not the string, so
	// the string may be a view of bytes that change after the call; two
	// different keys whose hashes collide (about one pair in 2^64) are
	// ordered as one key, which delays their items but never reorders them.
	KeyFunc func(v T) string

	// Handler handles one item. Its context is cancelled only by
	// [Pool.Stop], with the cause given to Stop (context.Cause). A panic is
	// recovered and becomes a *handoff.PanicError; the worker survives.
	// Exactly one of Handler and BatchHandler is required.
	Handler func(ctx context.Context, v T) error

	// BatchHandler, instead of Handler, handles up to MaxBatch items in
	// one call: a worker takes the ready items (in the order Handler's
	// workers would start them) under one lock, calls BatchHandler once,
	// and settles each item on its own with errs[i], which the handler
	// sets (errs has len(vs), all nil on entry: nil means done). Each
	// item then goes on exactly as with Handler: RetryFunc, ResultFunc,
	// [Pool.Stop]'s interrupted and stragglers, an Ordered key's next
	// item. Workers bounds the calls at once. A panic gives every item of
	// the call a *handoff.PanicError. vs and errs are the pool's, valid
	// only until BatchHandler returns. Its context is Handler's. Nil
	// means Handler.
	BatchHandler func(ctx context.Context, vs []T, errs []error)

	// MaxBatch is the most items of one BatchHandler call. It must be > 0
	// with BatchHandler and zero without it.
	MaxBatch int

	// MaxWait is how long a worker that finds fewer than MaxBatch items
	// ready waits for more before it calls BatchHandler with what it has.
	// Only one worker waits so at a time; while the pool holds MaxBatch
	// ready items or more, calls start at once. The waiting items stay
	// queued: [Pool.Stop] hands them back as unstarted, [Pool.Remove]
	// takes them, [Pool.Hold] keeps them, [Pool.Drain] waits for them.
	// Zero means no wait: a worker calls with whatever is ready. It must
	// not be negative, and zero without BatchHandler.
	MaxWait time.Duration

	// ResultFunc, if set, is called on the worker goroutine once Handler has
	// returned: err nil means done, non-nil means failed (a recovered panic
	// arrives as *handoff.PanicError). In an Ordered pool it returns before
	// the next item of the same key starts. It is not called for items
	// [Pool.Stop] reports as interrupted. It must not panic and must not
	// call Stop. Nil means results are only counted in [Pool.Stats].
	ResultFunc func(v T, err error)

	// RetryFunc, if set, is called on the worker goroutine when Handler
	// returns an error or panics (not for an item interrupted by
	// [Pool.Stop]), before ResultFunc. Retry true means the attempt is not
	// reported (no ResultFunc, Retried counted instead of Failed): the item
	// runs again after after (zero or less: at once) without holding a
	// worker meanwhile, ahead of the items accepted after it, its key still
	// busy in an Ordered pool. A waiting item counts against QueueSize, is
	// not waited for by [Pool.Drain] and is handed back by Stop in
	// [StopResult.Waiting]. With a pointer T, RetryFunc may update the item
	// and the next attempt sees it. It must not block, panic or call Stop.
	// Nil means every error is reported to ResultFunc.
	RetryFunc func(v T, err error) (after time.Duration, retry bool)

	// Rate, above zero, bounds how fast the pool starts items: Rate a
	// second on average, across all its workers, with bursts of up to
	// Burst (a token bucket, golang.org/x/time/rate). A worker that finds
	// an item ready waits for its token before it takes the item, holding
	// its worker slot and not the pool's lock: the item stays queued
	// meanwhile, so it counts against QueueSize (Submit blocks once the
	// queue is full), [Pool.Stop] hands it back as unstarted, [Pool.Remove]
	// takes it and [Pool.Drain] waits for it. The wait ends when Stop
	// begins; it is not part of the item's running time (see
	// [Pool.RunningTimes]). Every start takes a token, a retry's next
	// attempt too; with BatchHandler every item of a call takes one, so a
	// call holds at most Burst items. Zero means no limit, at no cost per
	// item; negative, NaN or infinite is an error.
	Rate float64

	// Burst is how many items may start at once after a pause at Rate
	// (the bucket's size). It must be > 0 with Rate, and zero without it.
	Burst int

	// Logger receives the pool's logs, with "component"="pool" and
	// "class"=Name added. Nil discards them.
	Logger *slog.Logger
}

// validate reports every problem of cfg at once.
func (cfg *Config[T]) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("pool %q: "+format, append([]any{cfg.Name}, args...)...))
	}
	if cfg.Name == "" {
		bad("Name is required")
	}
	if cfg.Workers <= 0 {
		bad("Workers must be > 0, got %d", cfg.Workers)
	}
	if cfg.QueueSize <= 0 {
		bad("QueueSize must be > 0, got %d", cfg.QueueSize)
	}
	if cfg.Ordered && cfg.KeyFunc == nil {
		bad("KeyFunc is required when Ordered")
	}
	if !cfg.Ordered && cfg.KeyFunc != nil {
		bad("KeyFunc is set but Ordered is false")
	}
	switch {
	case cfg.Handler == nil && cfg.BatchHandler == nil:
		bad("Handler or BatchHandler is required")
	case cfg.Handler != nil && cfg.BatchHandler != nil:
		bad("Handler and BatchHandler are both set")
	}
	if cfg.BatchHandler != nil && cfg.MaxBatch <= 0 {
		bad("MaxBatch must be > 0 with a BatchHandler, got %d", cfg.MaxBatch)
	}
	if cfg.BatchHandler == nil && (cfg.MaxBatch != 0 || cfg.MaxWait != 0) {
		bad("MaxBatch and MaxWait need a BatchHandler")
	}
	if cfg.MaxWait < 0 {
		bad("MaxWait must not be negative, got %s", cfg.MaxWait)
	}
	switch {
	case cfg.Rate < 0 || math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0):
		bad("Rate must be a finite number >= 0, got %v", cfg.Rate)
	case cfg.Rate > 0 && cfg.Burst <= 0:
		bad("Burst must be > 0 with Rate, got %d", cfg.Burst)
	case cfg.Rate == 0 && cfg.Burst != 0:
		bad("Burst needs Rate")
	}
	return errors.Join(errs...)
}
