// Package rental is handoff's reference service: the class table and
// handlers of a rental platform's Kafka consumer, and the demo that runs it
// on an embedded broker. The command examples/rental runs it as a service
// (and its demo with no flags); the operator CLI's "handoff demo" runs the
// demo. It is internal so that the CLI does not depend on an example.
package rental

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime"
)

// Topics of the three classes.
const (
	TopicOrders     = "orders"
	TopicUsers      = "users"
	TopicHeartbeats = "heartbeats"
)

// Topics returns the service's topics.
func Topics() []string { return []string{TopicOrders, TopicUsers, TopicHeartbeats} }

// Options configures the handlers.
type Options struct {
	// Work is the simulated work per message (per batch call for the
	// heartbeats batch class: one bulk write); it honours the stop.
	Work time.Duration
	// WorkJitter spreads the work: each attempt's is drawn uniformly from
	// [Work-WorkJitter, Work+WorkJitter], clamped at 0, so completions
	// overtake each other as real handlers' do. Zero means every attempt
	// takes exactly Work; negative is an error.
	WorkJitter time.Duration
	// EffectsPath, if set, is a file that gets one line
	// "<topic> <partition> <offset> <key>" per handled message, each with
	// a single write.
	EffectsPath string
	// OnDone, if set, is called after each handled message, which it
	// must not keep: the classes recycle their messages
	// (runtime.Class.RecycleMessages).
	OnDone func(m *handoff.Message)
	// FailRate is the fraction of attempts that fail with a recoverable
	// error (drawn per attempt), to exercise retries, redeliveries and
	// dead letters. Zero means none.
	FailRate float64
	// Outages are simulated dependency outages: during each, every
	// attempt of its class fails with the recoverable [ErrOutage].
	Outages []Outage
	// DeferOutages starts the outages' clock at [Service.StartOutages]
	// instead of at New: no outage happens before it.
	DeferOutages bool
}

// Outage is a simulated outage of the database behind one class: from
// Start after [New] (the service's start) for Duration, every handler
// attempt of Class fails with [ErrOutage].
type Outage struct {
	Class           string
	Start, Duration time.Duration
}

// ParseOutage parses "CLASS:START:DURATION", for example
// "orders:5s:20s", the -outage flag's value.
func ParseOutage(s string) (Outage, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return Outage{}, fmt.Errorf("rental: outage %q: want CLASS:START:DURATION, for example orders:5s:20s", s)
	}
	start, err := time.ParseDuration(parts[1])
	if err != nil {
		return Outage{}, fmt.Errorf("rental: outage %q: START: %w", s, err)
	}
	d, err := time.ParseDuration(parts[2])
	if err != nil {
		return Outage{}, fmt.Errorf("rental: outage %q: DURATION: %w", s, err)
	}
	o := Outage{Class: parts[0], Start: start, Duration: d}
	return o, o.validate()
}

func (o Outage) validate() error {
	switch {
	case o.Class != "orders" && o.Class != "users" && o.Class != "heartbeats":
		return fmt.Errorf("rental: outage of unknown class %q: want orders, users or heartbeats", o.Class)
	case o.Start < 0:
		return fmt.Errorf("rental: outage of %s: START must not be negative, got %s", o.Class, o.Start)
	case o.Duration <= 0:
		return fmt.Errorf("rental: outage of %s: DURATION must be > 0, got %s", o.Class, o.Duration)
	}
	return nil
}

func (o Outage) String() string { return fmt.Sprintf("%s:%s:%s", o.Class, o.Start, o.Duration) }

// ErrOutage is the recoverable error of every attempt during a simulated
// outage of its class.
var ErrOutage = errors.New("rental: simulated database outage")

// ErrSimulated is the recoverable error of the FailRate attempts.
var ErrSimulated = errors.New("rental: simulated failure")

// ErrPoison is the permanent error of a message whose value contains
// "poison" until [Service.Cure] is called: a bug an operator fixes, then
// requeues the dead letters.
var ErrPoison = errors.New("rental: poison message")

// poison is what a poison message's value contains.
var poison = []byte("poison")

// Poisoned reports whether a message's value makes it poison (see
// ErrPoison): the check the handlers make on every message. The
// benchmark program's raw consumers make it too, so that a comparison
// with them counts the runtime's cost and not this one.
func Poisoned(value []byte) bool { return bytes.Contains(value, poison) }

// Service holds what the three classes share: the simulated work, the
// effects file and the demo's hook.
type Service struct {
	work     time.Duration
	jitter   time.Duration
	effects  *os.File
	onDone   func(m *handoff.Message)
	failRate float64
	cured    atomic.Bool
	started  atomic.Pointer[time.Time] // the outages' clock; nil until it starts
	outages  []Outage
	failed   []atomic.Int64 // attempts failed by each outage
}

// OutageFailed returns how many handler attempts the i-th outage of
// Options.Outages has failed so far.
func (h *Service) OutageFailed(i int) int64 { return h.failed[i].Load() }

// OutageWindow returns when the i-th outage of Options.Outages begins and
// ends, measured from New (or StartOutages); zero times while the clock
// has not started.
func (h *Service) OutageWindow(i int) (begin, end time.Time) {
	o := h.outages[i]
	started := h.started.Load()
	if started == nil {
		return time.Time{}, time.Time{}
	}
	return started.Add(o.Start), started.Add(o.Start + o.Duration)
}

// StartOutages starts the outages' clock now, if it has not started
// (see Options.DeferOutages).
func (h *Service) StartOutages() {
	now := time.Now()
	h.started.CompareAndSwap(nil, &now)
}

// Cure makes poison messages succeed from now on.
func (h *Service) Cure() { h.cured.Store(true) }

// New opens the effects file, if any. Close it with [Service.Close].
func New(opts Options) (*Service, error) {
	if opts.FailRate < 0 || opts.FailRate > 1 {
		return nil, fmt.Errorf("rental: fail rate must be in [0, 1], got %v", opts.FailRate)
	}
	if opts.WorkJitter < 0 {
		return nil, fmt.Errorf("rental: work jitter must not be negative, got %s", opts.WorkJitter)
	}
	for _, o := range opts.Outages {
		if err := o.validate(); err != nil {
			return nil, err
		}
	}
	h := &Service{work: opts.Work, jitter: opts.WorkJitter, onDone: opts.OnDone, failRate: opts.FailRate,
		outages: append([]Outage(nil), opts.Outages...), failed: make([]atomic.Int64, len(opts.Outages))}
	if opts.EffectsPath != "" {
		f, err := os.OpenFile(opts.EffectsPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("rental: open effects file: %w", err)
		}
		h.effects = f
	}
	if !opts.DeferOutages {
		h.StartOutages()
	}
	return h, nil
}

// Close closes the effects file.
func (h *Service) Close() error {
	if h.effects != nil {
		return h.effects.Close()
	}
	return nil
}

// Classes is the service's class table: each class its own pool size and
// failure policy. Orders are ordered per order key, so a failed order
// parks that order's later changes; user messages get delayed
// redeliveries; heartbeats are many and cheap: a batch class (up to 64
// per call, a partial batch waits at most 5ms, 4 calls at once) with one
// quick retry per message.
func (h *Service) Classes() []runtime.Class {
	quick := runtime.RetryPolicy{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	// Orders retry with the runtime's default backoff (100ms doubling):
	// with quick retries the few orders running when their database goes
	// down ran out of attempts in about 30ms, before ten attempts had
	// failed and the class was suspended (the rental outage test saw 2 and
	// 8 such dead letters in 2 of 9 runs).
	orders := runtime.RetryPolicy{MaxAttempts: 3}
	users := quick
	users.Redeliveries, users.RedeliveryDelay = 2, time.Second
	beats := quick
	beats.MaxAttempts = 2
	// Every class recycles its messages: the handlers, and OnDone's
	// callers (which keep an ID at most), keep no *Message past the call.
	return []runtime.Class{
		{Name: "orders", Topics: []string{TopicOrders}, Handler: h.handle, Workers: 8, QueueSize: 64, Ordered: true, Retry: orders,
			RecycleMessages: true},
		{Name: "users", Topics: []string{TopicUsers}, Handler: h.handle, Workers: 4, QueueSize: 32, Retry: users, RecycleMessages: true},
		{Name: "heartbeats", Topics: []string{TopicHeartbeats}, BatchHandler: h.handleBatch, MaxBatch: 64, MaxWait: 5 * time.Millisecond,
			Workers: 4, QueueSize: 256, Retry: beats, RecycleMessages: true},
	}
}

// down reports whether class's simulated database is down now.
func (h *Service) down(class string) bool {
	if len(h.outages) == 0 {
		return false
	}
	started := h.started.Load()
	if started == nil {
		return false
	}
	since := time.Since(*started)
	for i, o := range h.outages {
		if o.Class == class && since >= o.Start && since < o.Start+o.Duration {
			h.failed[i].Add(1)
			return true
		}
	}
	return false
}

// workTime is one attempt's simulated work: Work, spread by WorkJitter.
func (h *Service) workTime() time.Duration {
	if h.jitter == 0 {
		return h.work
	}
	return max(h.work-h.jitter+time.Duration(rand.Int64N(int64(2*h.jitter)+1)), 0)
}

// handle simulates the work, honouring the stop, then records the effect
// with a single write.
func (h *Service) handle(ctx context.Context, m *handoff.Message) error {
	if err := h.simulate(ctx); err != nil {
		return err
	}
	return h.finish(m)
}

// handleBatch is the heartbeats class's batch handler: one simulated
// bulk write for the batch (Work once per call, as a bulk insert costs
// about one round trip), then each message is checked and its effect
// recorded as handle does; the messages that fail are named in a
// BatchError, the others are done.
func (h *Service) handleBatch(ctx context.Context, ms []*handoff.Message) error {
	if err := h.simulate(ctx); err != nil {
		return err // interrupted by the stop: every message runs again
	}
	var be handoff.BatchError
	for i, m := range ms {
		if err := h.finish(m); err != nil {
			be.Fail(i, err)
		}
	}
	return be.Err()
}

// simulate waits one attempt's simulated work, or returns the cause of
// the stop that cut it short.
func (h *Service) simulate(ctx context.Context) error {
	if d := h.workTime(); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
	}
	return nil
}

// finish decides a worked message's result (a simulated outage, poison,
// simulated failure) and records the effect of a handled one with a
// single write.
func (h *Service) finish(m *handoff.Message) error {
	if h.down(m.Class) {
		return ErrOutage
	}
	if !h.cured.Load() && Poisoned(m.Value) {
		return handoff.Permanent(ErrPoison)
	}
	if h.failRate > 0 && rand.Float64() < h.failRate {
		return ErrSimulated
	}
	if h.effects != nil {
		line := make([]byte, 0, 64)
		line = append(line, m.Origin.Topic...)
		line = append(line, ' ')
		line = strconv.AppendInt(line, int64(m.Origin.Partition), 10)
		line = append(line, ' ')
		line = strconv.AppendInt(line, m.Origin.Offset, 10)
		line = append(line, ' ')
		line = append(line, m.Key...)
		line = append(line, '\n')
		if _, err := h.effects.Write(line); err != nil {
			return fmt.Errorf("rental: write effect of %s: %w", m.ID, err)
		}
	}
	if h.onDone != nil {
		h.onDone(m)
	}
	return nil
}
