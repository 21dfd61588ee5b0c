package runtime

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff"
)

// This file holds what the runtime tells a class's middleware about an
// attempt: the chain built at New, and the outcome of each attempt once
// the runtime has decided it.

// chain composes a class's handler with the runtime's and the class's
// middleware, the runtime's outermost, and reports whether there is any
// (and so an attempt context per attempt).
func chain(cfg *Config, cc *Class) (h handoff.HandlerFunc, hooked bool, err error) {
	inner := cc.Handler
	if cc.BatchHandler != nil {
		inner = batchJoin // each message's chain ends in its batch (batch.go)
	}
	if inner == nil || len(cfg.Middleware) == 0 && len(cc.Middleware) == 0 {
		return cc.Handler, false, nil
	}
	mw := append(append([]handoff.Middleware(nil), cfg.Middleware...), cc.Middleware...)
	if h = handoff.Chain(inner, mw...); h == nil {
		return nil, false, fmt.Errorf("%w: class %q: a middleware returned a nil handler", ErrConfig, cc.Name)
	}
	return h, true, nil
}

// checkMiddleware reports the nil entries of Middleware with bad.
func checkMiddleware(mw []handoff.Middleware, owner string, bad func(string, ...any)) {
	for i, m := range mw {
		if m == nil {
			bad("%sMiddleware %d is nil", owner, i)
		}
	}
}

// OutcomeKind names what the runtime did with a message after an attempt.
type OutcomeKind int

const (
	// OutcomeSucceeded: the attempt returned nil; the message is done.
	OutcomeSucceeded OutcomeKind = iota
	// OutcomeRetried: the attempt failed and the message is retried in
	// place after Outcome.Wait.
	OutcomeRetried
	// OutcomeRedelivered: the attempt failed, the retries in place are
	// used up and the message is saved for a delayed redelivery after
	// Outcome.Wait.
	OutcomeRedelivered
	// OutcomeDeadLettered: the attempt failed for good (a permanent
	// error, or the policy's retries and redeliveries are used up) and
	// the message is saved as a dead letter.
	OutcomeDeadLettered
	// OutcomeInterrupted: the hard stop cancelled the attempt (it returned
	// an error after the cancel, or did not return within HardStopGrace),
	// or the attempt failed on the stop's refusal ([ErrNotRunning], from
	// a Submit or Requeue once the stop had begun). The attempt is not
	// counted, nor seen as a dependency outage (SuspendPolicy), and the
	// message runs again: after the restart, or at the partition's next
	// owner.
	OutcomeInterrupted
	// OutcomeHeld: the attempt failed while its class is suspended (a
	// dependency outage, see SuspendPolicy) or paused, or its failure
	// suspended the class. The attempt is not counted; the message waits
	// in place and runs again as a probe or once the class resumes.
	OutcomeHeld
)

// String returns "succeeded", "retried", "redelivered", "dead_lettered",
// "interrupted" or "held".
func (k OutcomeKind) String() string {
	switch k {
	case OutcomeSucceeded:
		return "succeeded"
	case OutcomeRetried:
		return "retried"
	case OutcomeRedelivered:
		return "redelivered"
	case OutcomeDeadLettered:
		return "dead_lettered"
	case OutcomeInterrupted:
		return "interrupted"
	case OutcomeHeld:
		return "held"
	}
	return fmt.Sprintf("OutcomeKind(%d)", int(k))
}

// Outcome is what the runtime decided for a message after one attempt.
type Outcome struct {
	Kind OutcomeKind
	// Err is the error the attempt returned (nil when it succeeded).
	Err error
	// Wait is how long until the next attempt: the backoff of
	// OutcomeRetried, the delay of OutcomeRedelivered; zero otherwise.
	Wait time.Duration
	// Attempt is the message's failed attempts once this one is counted
	// (Message.Attempt of the next attempt, if there is one).
	Attempt int
}

// OnOutcome registers f to be told what the runtime did with the message
// of the attempt whose context is ctx, once it has decided: retried in
// place, redelivered later, made a dead letter, done, or interrupted by
// the hard stop. It is how a middleware learns what follows a failure,
// which the runtime decides only after the chain has returned.
//
// OnOutcome reports false, and never calls f, when ctx is not an
// attempt's context: the runtime gives one to the handler chain of each
// class that has middleware (Config.Middleware or Class.Middleware), and
// to no other. Register before the chain returns. f is called once per
// attempt, on the goroutine that decides the attempt (a worker's, or the
// stop's for an interrupted one), after the state file write that the
// outcome needs was tried: a failed write is logged, and the message is
// then kept in memory or read again from Kafka, never lost. By then the
// message's Attempt counts this attempt if it failed (Outcome.Attempt);
// read what f needs of the message before the chain returns. f must be
// quick and must not keep the message. When the attempt was decided
// already (a handler the hard stop gave up waiting for), f is called at
// once.
func OnOutcome(ctx context.Context, f func(Outcome)) bool {
	a, ok := ctx.Value(attemptKey{}).(*attempt)
	if !ok {
		return false
	}
	a.mu.Lock()
	if !a.told {
		a.fns = append(a.fns, f)
		a.mu.Unlock()
		return true
	}
	out := a.out
	a.mu.Unlock()
	f(out)
	return true
}

// SetHeaders sets m.Headers to hs for the attempt whose context is ctx,
// the message's envelope, and reports whether it did. The runtime saves
// the message with these headers wherever it goes next (a retry in place,
// a redelivery, a stop's snapshot, a dead letter and its publish). Use it
// rather than assigning m.Headers: it is ordered before the stop's save of
// a handler that the hard stop gave up waiting for, and once the stop
// has saved such a message SetHeaders leaves it alone and reports false.
// Call it before the chain returns: once it has, the runtime reads the
// envelope to decide the attempt, and SetHeaders reports false.
// hs must be a slice of the caller's own (never the old one's array
// written over: it may be shared). Outside an attempt's context (a class
// without middleware, or a chain called directly) it just sets m.Headers.
func SetHeaders(ctx context.Context, m *handoff.Message, hs []handoff.Header) bool {
	a, ok := ctx.Value(attemptKey{}).(*attempt)
	if !ok {
		m.Headers = hs
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.told || a.returned {
		return false
	}
	m.Headers = hs
	// m is the envelope the attempt's handler was handed, or a copy a
	// middleware passed on: the envelope the runtime saves is the item's.
	if a.msg != nil {
		a.msg.Headers = hs
	}
	return true
}

type attemptKey struct{}

// attempt is the context of one attempt of a class with middleware: its
// parent's, plus the outcome callbacks registered with OnOutcome. Being
// the context itself, it costs one allocation per attempt.
type attempt struct {
	context.Context
	// msg is the item's envelope, the one the attempt's handler was
	// handed.
	msg  *handoff.Message
	mu   sync.Mutex
	fns  []func(Outcome)
	told bool
	out  Outcome
	// returned is set once the chain has returned: the runtime then
	// copies and saves the envelope, and SetHeaders leaves it alone.
	returned bool
}

func (a *attempt) Value(key any) any {
	if key == (attemptKey{}) {
		return a
	}
	return a.Context.Value(key)
}

// tell tells the attempt's callbacks its outcome, once.
func (a *attempt) tell(out Outcome) {
	a.mu.Lock()
	if a.told {
		a.mu.Unlock()
		return
	}
	a.told = true
	a.out = out
	fns := a.fns
	a.fns = nil
	a.mu.Unlock()
	for _, f := range fns {
		f(out)
	}
}

// begin returns the context of a new attempt of it, kept in it until the
// attempt's outcome is told. The caller calls its end once the chain has
// returned.
func (it *item) begin(ctx context.Context) *attempt {
	a := &attempt{Context: ctx, msg: it.env()}
	it.attempt.Store(a)
	return a
}

// end marks the attempt's chain returned (or panicked): from then on
// SetHeaders refuses, as the runtime reads the envelope to decide the
// attempt.
func (a *attempt) end() {
	a.mu.Lock()
	a.returned = true
	a.mu.Unlock()
}

// tellOutcome tells the callbacks of it's attempt, if any, its outcome.
func (it *item) tellOutcome(kind OutcomeKind, err error, wait time.Duration) {
	// A load first: most items had no attempt (a class without
	// middleware), and a load costs less than a swap.
	if it.attempt.Load() == nil {
		return
	}
	a := it.attempt.Swap(nil)
	if a == nil {
		return
	}
	a.tell(Outcome{Kind: kind, Err: err, Wait: wait, Attempt: it.env().Attempt})
}

// attemptSlot is the item's field for its current attempt.
type attemptSlot = atomic.Pointer[attempt]
