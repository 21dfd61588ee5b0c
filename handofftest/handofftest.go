// Package handofftest runs one message class's real handler on the real
// runtime, in memory and without Kafka, so that a test can check what
// the runtime does with the handler's results: which messages are
// handled and after how many attempts, which become dead letters and
// with what error, which are parked behind a failed key, which wait for
// a delayed delivery. It is to handoff what net/http/httptest is to
// net/http and rivertest to river.
//
// A [Harness] is a [runtime.Runtime] with one class (or several, see
// [WithClasses]) and no Kafka topics, on a state file in the test's
// temporary directory, fed through [runtime.Runtime.Submit] and
// [runtime.Runtime.Schedule]. Everything
// after the handler returns is the runtime's own code, the same that runs
// in production: the class's RetryPolicy (retries in place with backoff,
// delayed redeliveries, dead letters), [handoff.Permanent], panics, the
// per-key ordering and parking of ordered classes, batches, the stop's
// snapshot and the re-push at the next start ([Harness.Restart]), and the
// class's middleware (and Config-level middleware, [WithMiddleware]).
// The harness only watches: a middleware of its own, outside the others,
// counts the attempts and notes their results and what the runtime
// decided after each ([Harness.History]), and the outcomes are read from
// the runtime (its pool stats and its state file). A dead letter
// discarded through [Harness.Runtime] (or the admin API) is an outcome
// too: [Discarded].
//
// # Stopping
//
// [Harness.Restart] and [Harness.Stop] run the runtime's real stop, with
// its DrainTimeout (30s) and HardStopGrace (5s) unless
// [WithDrainTimeout] and [WithHardStopGrace] say otherwise: a stop with a
// handler that waits for its context to end takes the whole drain, on
// the real clock outside a synctest bubble.
//
// # Time
//
// Backoffs, redelivery delays and a batch class's MaxWait take real time,
// as configured. Run the test inside testing/synctest's Test to make them
// take none: the runtime's timers then run on the bubble's fake clock,
// and [Harness.Wait] advances it (see the example of [Harness.Wait]).
//
// # What differs from production
//
// The class's Topics and DeadLetterTopic are dropped (there is no
// broker), so messages have a zero Origin unless the test sets one, and a
// dead letter is only kept in the state file. For a test at the Kafka
// level (topics, offsets, commits), run the runtime against the embedded
// broker of package github.com/handoff-go/handoff/devbroker.
package handofftest

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime"
)

// WaitTimeout bounds how long [Harness.Wait] waits for the messages to
// settle before it fails the test.
const WaitTimeout = 10 * time.Second

// Outcome is where a message stands.
type Outcome int

const (
	// Pending: the message is queued, running, waiting out a retry
	// backoff, or being released from a parked key.
	Pending Outcome = iota
	// Handled: an attempt succeeded (its handler, through the class's
	// middleware, returned nil; for a batch class, its batch did not
	// fail it).
	Handled
	// DeadLettered: it is a dead letter in the state file.
	DeadLettered
	// Parked: it waits in the state file behind its key's dead letter or
	// delayed redelivery (ordered classes).
	Parked
	// Scheduled: it waits in the state file for a due time, scheduled by
	// [Harness.Schedule] or as a failed message's delayed redelivery.
	Scheduled
	// Discarded: it was a dead letter, and the dead letter was discarded
	// (runtime.Runtime.Discard, through [Harness.Runtime] or the admin
	// API).
	Discarded
)

// String returns the outcome's name in lower case.
func (o Outcome) String() string {
	switch o {
	case Pending:
		return "pending"
	case Handled:
		return "handled"
	case DeadLettered:
		return "dead-lettered"
	case Parked:
		return "parked"
	case Scheduled:
		return "scheduled"
	case Discarded:
		return "discarded"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// EventKind names one step of a message's history (see [Event]).
type EventKind int

const (
	// EventSucceeded: an attempt succeeded; the message is done.
	EventSucceeded EventKind = iota
	// EventRetried: an attempt failed and is retried in place after
	// Event.Wait.
	EventRetried
	// EventRedelivered: an attempt failed, the retries in place were used
	// up, and the message was saved for a delayed redelivery after
	// Event.Wait.
	EventRedelivered
	// EventDeadLettered: an attempt failed for good; the message became a
	// dead letter.
	EventDeadLettered
	// EventInterrupted: the hard stop cancelled the attempt; it is not
	// counted and the message runs again after the restart.
	EventInterrupted
	// EventHeld: the attempt failed while its class was suspended or
	// paused (or its failure suspended the class); it is not counted and
	// the message waits in place.
	EventHeld
	// EventDiscarded: the message's dead letter was discarded. It is not
	// an attempt: the harness notices it when it reads the state file
	// (in Wait, Result, Results or History).
	EventDiscarded
)

// String returns "succeeded", "retried", "redelivered", "dead_lettered",
// "interrupted", "held" (the names of runtime.OutcomeKind) or
// "discarded".
func (k EventKind) String() string {
	switch k {
	case EventSucceeded:
		return "succeeded"
	case EventRetried:
		return "retried"
	case EventRedelivered:
		return "redelivered"
	case EventDeadLettered:
		return "dead_lettered"
	case EventInterrupted:
		return "interrupted"
	case EventHeld:
		return "held"
	case EventDiscarded:
		return "discarded"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// eventOf maps the runtime's outcome of an attempt to an event kind.
func eventOf(k runtime.OutcomeKind) EventKind {
	switch k {
	case runtime.OutcomeSucceeded:
		return EventSucceeded
	case runtime.OutcomeRetried:
		return EventRetried
	case runtime.OutcomeRedelivered:
		return EventRedelivered
	case runtime.OutcomeDeadLettered:
		return EventDeadLettered
	case runtime.OutcomeInterrupted:
		return EventInterrupted
	}
	return EventHeld
}

// Event is one step of a message's history: an attempt and what the
// runtime decided after it, or the discard of its dead letter.
type Event struct {
	Kind EventKind
	// Attempt is the message's Attempt when the attempt ran (the failed
	// attempts counted before it); for EventDiscarded, the dead letter's
	// failed attempts.
	Attempt int
	// Err is the attempt's error text; empty when it succeeded. For
	// EventDiscarded, the dead letter's error.
	Err string
	// Wait is the backoff of EventRetried, the delay of
	// EventRedelivered; zero otherwise.
	Wait time.Duration
}

// String describes the event in one line, as "attempt 0: retried in
// 100ms: database down" or "discarded".
func (e Event) String() string {
	if e.Kind == EventDiscarded {
		return "discarded"
	}
	s := "attempt " + strconv.Itoa(e.Attempt) + ": " + e.Kind.String()
	if e.Wait > 0 {
		s += " in " + e.Wait.String()
	}
	if e.Err != "" {
		s += ": " + e.Err
	}
	return s
}

// Option configures a [Harness]; pass options to [New] or [Start].
type Option func(*options)

type options struct {
	classes      []runtime.Class
	middleware   []handoff.Middleware
	drain, grace time.Duration
}

// WithClasses runs cs beside the class given to [New] or [Start], as a
// service runs several (each in its pool; c.Topics and c.DeadLetterTopic
// are dropped as for the first). [Harness.Send] and [Harness.Schedule]
// hand a message to the class its Class field names, or to the first
// class when it is empty; [Harness.SendValues] sends to the first.
// Message IDs are the harness's, across its classes.
func WithClasses(cs ...runtime.Class) Option {
	return func(o *options) { o.classes = append(o.classes, cs...) }
}

// WithMiddleware sets the runtime's Config.Middleware: around every
// class's handler, outside each class's own Middleware, as in
// production (otelhandoff's, for instance). The harness's observer stays
// outermost, so it sees what the runtime judges.
func WithMiddleware(mw ...handoff.Middleware) Option {
	return func(o *options) { o.middleware = append(o.middleware, mw...) }
}

// WithDrainTimeout sets the runtime's DrainTimeout: how long
// [Harness.Stop] and [Harness.Restart] let the pools work before the
// hard stop. Zero keeps the runtime's default, 30s.
func WithDrainTimeout(d time.Duration) Option {
	return func(o *options) { o.drain = d }
}

// WithHardStopGrace sets the runtime's HardStopGrace: how long handlers
// cancelled by the hard stop get to return before they are recorded as
// interrupted. Zero keeps the runtime's default, 5s.
func WithHardStopGrace(d time.Duration) Option {
	return func(o *options) { o.grace = d }
}

// Result is what became of one message ID.
type Result struct {
	ID      string
	Outcome Outcome
	// Attempts counts the attempts the runtime made: for a handled
	// message the failed ones plus the one that succeeded, for a dead
	// letter (discarded or not) or a redelivery the failed ones (its
	// Message.Attempt), zero for a parked or scheduled message that has
	// not run.
	Attempts int
	// Calls counts the attempts that returned (through the class's
	// middleware, a batch's message once per batch call), over every
	// delivery of its ID (see [Harness.Redeliver]).
	Calls int
	// Err is a dead letter's error (a discarded one's too), or a delayed
	// redelivery's last one.
	Err string
	// Due is when a scheduled message will be delivered.
	Due time.Time
	// Redelivery is true for a scheduled message that is a failed
	// message's delayed redelivery.
	Redelivery bool
	// Message is the envelope as last seen: handed to the handler, or
	// stored in the state file.
	Message handoff.Message
}

// Harness runs a class (or several) on a runtime without Kafka. Make one
// with [New] in a test (it stops at the end of the test), or with [Start]
// outside one. Its methods must be called from one goroutine (the
// test's: they may fail the test), but for the handler, which may do
// anything.
type Harness struct {
	t       testing.TB // nil for Start: failures panic
	class   string     // the first class
	classes map[string]bool
	cfg     runtime.Config
	rt      *runtime.Runtime
	wait    chan result
	rep     *runtime.Report

	mu      sync.Mutex
	sent    []string                   // IDs in first-send order
	msgs    map[string]handoff.Message // the last message sent with each ID
	calls   map[string]int             // handler calls per ID
	handled map[string]handoff.Message // as handed to the handler when it succeeded
	order   []string                   // IDs in handling order, once per success
	history map[string][]Event         // per ID, in order
	dead    map[string]Result          // IDs last seen as dead letters, as then
	n       int                        // IDs given out
}

type result struct {
	rep *runtime.Report
	err error
}

// New starts a runtime that runs class c alone (or with the classes of
// [WithClasses]), with its handler (or batch handler), pool bounds,
// ordering, retry policy, timeout and stop policy, on a state file in
// t.TempDir(), without Kafka (c.Topics and c.DeadLetterTopic are
// dropped). The runtime logs warnings and errors to t.Output(). A bad
// class fails the test with runtime.New's error. The runtime is stopped
// gracefully by t.Cleanup, or earlier by [Harness.Stop].
func New(t testing.TB, c runtime.Class, opts ...Option) *Harness {
	t.Helper()
	h := newHarness(t, c, t.TempDir(), slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})), opts)
	h.start()
	t.Cleanup(func() { h.Stop() })
	return h
}

// Start is [New] outside a test (an Example, a TestMain, a tool): the
// state file goes in dir, which must exist, logs go to logger (nil
// discards them), and the caller stops the runtime with [Harness.Stop].
// Where New would fail the test, the harness's methods panic; Start
// itself returns the error of a bad class or a failed start.
func Start(c runtime.Class, dir string, logger *slog.Logger, opts ...Option) (h *Harness, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h = newHarness(nil, c, dir, logger, opts)
	defer func() {
		if v := recover(); v != nil {
			h, err = nil, fmt.Errorf("%v", v)
		}
	}()
	h.start()
	return h, nil
}

// newHarness makes a harness for c and the options' classes, not
// started.
func newHarness(t testing.TB, c runtime.Class, dir string, logger *slog.Logger, opts []Option) *Harness {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	h := &Harness{t: t, class: c.Name, classes: map[string]bool{}, msgs: map[string]handoff.Message{}, calls: map[string]int{},
		handled: map[string]handoff.Message{}, history: map[string][]Event{}, dead: map[string]Result{}}
	classes := append([]runtime.Class{c}, o.classes...)
	for i := range classes {
		classes[i].Topics, classes[i].DeadLetterTopic = nil, ""
		h.classes[classes[i].Name] = true
	}
	h.cfg = runtime.Config{
		StatePath:     filepath.Join(dir, "state.db"),
		Instance:      "handofftest",
		Classes:       classes,
		Logger:        logger,
		DrainTimeout:  o.drain,
		HardStopGrace: o.grace,
		// Outermost: it sees what the runtime judges, the result of the
		// class's whole middleware chain, per message (in a batch class
		// too).
		Middleware: append([]handoff.Middleware{h.observe}, o.middleware...),
	}
	return h
}

// observe is the harness's middleware: it notes each attempt's result,
// and what the runtime decided after it.
func (h *Harness) observe(next handoff.HandlerFunc) handoff.HandlerFunc {
	return func(ctx context.Context, m *handoff.Message) error {
		id, attempt := strings.Clone(m.ID), m.Attempt
		runtime.OnOutcome(ctx, func(o runtime.Outcome) {
			e := Event{Kind: eventOf(o.Kind), Attempt: attempt, Wait: o.Wait}
			if o.Err != nil {
				e.Err = o.Err.Error()
			}
			h.mu.Lock()
			h.history[id] = append(h.history[id], e)
			h.mu.Unlock()
		})
		err := next(ctx, m)
		h.note(m, err)
		return err
	}
}

// fatalf fails the test and ends it, or panics without a test.
func (h *Harness) fatalf(format string, args ...any) {
	if h.t == nil {
		panic(fmt.Sprintf(format, args...))
	}
	h.t.Helper()
	h.t.Fatalf(format, args...)
}

// errorf fails the test and goes on, or panics without a test.
func (h *Harness) errorf(format string, args ...any) {
	if h.t == nil {
		panic(fmt.Sprintf(format, args...))
	}
	h.t.Helper()
	h.t.Errorf(format, args...)
}

// start runs a new runtime on the harness's config and waits until it is
// ready.
func (h *Harness) start() {
	if h.t != nil {
		h.t.Helper()
	}
	rt, err := runtime.New(h.cfg)
	if err != nil {
		h.fatalf("handofftest: %v", err)
	}
	h.rt, h.rep = rt, nil
	h.wait = make(chan result, 1)
	go func() {
		rep, err := rt.Run(context.Background())
		h.wait <- result{rep, err}
	}()
	for !rt.Ready() {
		select {
		case r := <-h.wait:
			h.fatalf("handofftest: runtime did not start: %v", r.err)
		default:
		}
		time.Sleep(time.Millisecond) // the poll interval of the start, which has no event to wait on
	}
}

// note records one handler call's result for m.
func (h *Harness) note(m *handoff.Message, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	id := strings.Clone(m.ID)
	h.calls[id]++
	if err == nil {
		msg := *m
		msg.ID = id
		msg.Key = append([]byte(nil), m.Key...)
		msg.Value = append([]byte(nil), m.Value...)
		msg.Headers = append([]handoff.Header(nil), m.Headers...)
		h.handled[id] = msg
		h.order = append(h.order, id)
	}
}

// Runtime returns the runtime the harness runs (a new one after
// [Harness.Restart]), for what the harness has no method for, such as
// Requeue and Discard of dead letters.
func (h *Harness) Runtime() *runtime.Runtime { return h.rt }

// Send submits the messages, in order, to the class each one's Class
// names (the first class when it is empty), blocking while its pool is
// full. A message without an ID gets "msg-1", "msg-2", ... (in the copy
// sent; m is not changed). Sending an ID again delivers that message
// again, as Kafka does after a crash. It fails the test if the runtime
// refuses a message, or if its Class is not one of the harness's.
func (h *Harness) Send(ms ...*handoff.Message) {
	if h.t != nil {
		h.t.Helper()
	}
	for _, m := range ms {
		msg := h.track(m)
		if err := h.rt.Submit(context.Background(), msg.Class, &msg); err != nil {
			h.fatalf("handofftest: send %s: %v", msg.ID, err)
		}
	}
}

// SendValues sends one message per value to the first class, each with
// key and an ID given by Send, and returns the IDs.
func (h *Harness) SendValues(key string, values ...string) []string {
	if h.t != nil {
		h.t.Helper()
	}
	ids := make([]string, len(values))
	for i, v := range values {
		m := h.track(&handoff.Message{Key: []byte(key), Value: []byte(v)})
		ids[i] = m.ID
		if err := h.rt.Submit(context.Background(), m.Class, &m); err != nil {
			h.fatalf("handofftest: send %s: %v", m.ID, err)
		}
	}
	return ids
}

// Redeliver sends the message last sent with id again, from its first
// attempt, as Kafka redelivers a message whose offset was not committed
// when its consumer crashed: a handler must be idempotent under this.
func (h *Harness) Redeliver(id string) {
	if h.t != nil {
		h.t.Helper()
	}
	h.mu.Lock()
	m, ok := h.msgs[id]
	h.mu.Unlock()
	if !ok {
		h.fatalf("handofftest: redeliver %s: never sent", id)
	}
	h.Send(&m)
}

// Schedule hands m to the runtime's Schedule, to be delivered at at to
// the class its Class names (the first class when it is empty).
func (h *Harness) Schedule(m *handoff.Message, at time.Time) {
	if h.t != nil {
		h.t.Helper()
	}
	msg := h.track(m)
	if err := h.rt.Schedule(context.Background(), msg.Class, &msg, at); err != nil {
		h.fatalf("handofftest: schedule %s: %v", msg.ID, err)
	}
}

// track notes a message to be sent and returns the copy to send, with
// its class set.
func (h *Harness) track(m *handoff.Message) handoff.Message {
	if m.Class != "" && !h.classes[m.Class] {
		h.fatalf("handofftest: send %s: class %q is not one of the harness's", m.ID, m.Class)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	msg := *m
	if msg.Class == "" {
		msg.Class = h.class
	}
	if msg.ID == "" {
		h.n++
		msg.ID = "msg-" + strconv.Itoa(h.n)
	}
	if _, ok := h.msgs[msg.ID]; !ok {
		h.sent = append(h.sent, msg.ID)
	}
	h.msgs[msg.ID] = msg
	return msg
}

// Wait blocks until every message sent has settled: handled,
// dead-lettered, discarded, parked, or scheduled for later; nothing of
// the harness's classes is queued, running or waiting out a backoff. It fails the test after
// [WaitTimeout]. It polls every millisecond: inside a synctest bubble
// each poll advances the fake clock, so backoffs pass at once.
func (h *Harness) Wait() {
	if h.t != nil {
		h.t.Helper()
	}
	deadline := time.Now().Add(WaitTimeout)
	for {
		res, pending, err := h.settled()
		if err != nil {
			h.fatalf("handofftest: %v", err)
		}
		if pending == 0 && res != nil {
			return
		}
		if time.Now().After(deadline) {
			h.fatalf("handofftest: %d messages not settled after %s", pending, WaitTimeout)
		}
		time.Sleep(time.Millisecond) // the poll interval; see the doc
	}
}

// settled returns every sent message's result and how many are pending,
// or a nil map while the class's pool is busy.
func (h *Harness) settled() (map[string]Result, int, error) {
	busy := 0
	for _, cs := range h.rt.Stats() {
		if h.classes[cs.Name] {
			busy += cs.Queued + cs.Waiting + cs.Running
		}
	}
	if busy > 0 {
		return nil, busy, nil
	}
	res, err := h.results()
	if err != nil {
		return nil, 0, err
	}
	pending := 0
	for _, r := range res {
		if r.Outcome == Pending {
			pending++
		}
	}
	return res, pending, nil
}

// results reads every sent message's result: handled (seen by the
// handler wrapper), else dead-lettered, scheduled or parked (read from
// the state file), else discarded (a dead letter seen before, or made by
// an attempt, that is gone), else pending. A parked message whose key
// has no dead letter or redelivery any more is being released: pending.
func (h *Harness) results() (map[string]Result, error) {
	state, err := h.savedResults()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]Result, len(h.sent))
	for _, id := range h.sent {
		r := Result{Outcome: Pending, Message: h.msgs[id]}
		if m, ok := h.handled[id]; ok {
			r = Result{Outcome: Handled, Attempts: m.Attempt + 1, Message: m}
		} else if s, ok := state[id]; ok {
			r = s
			if s.Outcome == DeadLettered {
				h.dead[id] = s
			}
		} else if d, ok := h.discardedLocked(id); ok {
			r = d
		}
		r.ID, r.Calls = id, h.calls[id]
		out[id] = r
	}
	return out, nil
}

// savedResults returns, by message ID, the outcome the state file holds
// for the messages of the harness's classes: dead-lettered, scheduled
// (delayed or waiting for redelivery) or parked behind one of those. A
// message in several stores gets the first in that order.
func (h *Harness) savedResults() (map[string]Result, error) {
	state := map[string]Result{}
	blocked := map[string]bool{} // class + "\x00" + key
	if err := h.deadResults(state, blocked); err != nil {
		return nil, err
	}
	if err := h.delayedResults(state, blocked); err != nil {
		return nil, err
	}
	if err := h.parkedResults(state, blocked); err != nil {
		return nil, err
	}
	return state, nil
}

// deadResults adds the dead letters of the harness's classes to state
// and marks their keys in blocked (class + "\x00" + key).
func (h *Harness) deadResults(state map[string]Result, blocked map[string]bool) error {
	var cur runtime.Cursor
	for {
		dls, next, err := h.rt.DeadLetters("", cur, 1000)
		if err != nil {
			return fmt.Errorf("read dead letters: %w", err)
		}
		for _, d := range dls {
			if !h.classes[d.Message.Class] {
				continue
			}
			state[d.Message.ID] = Result{Outcome: DeadLettered, Attempts: d.Message.Attempt, Err: d.Err, Message: d.Message}
			blocked[d.Message.Class+"\x00"+string(d.Message.Key)] = true
		}
		if cur = next; cur == "" {
			return nil
		}
	}
}

// delayedResults adds the delayed messages of the harness's classes not
// already in state as Scheduled, and marks in blocked the keys of those
// waiting for redelivery.
func (h *Harness) delayedResults(state map[string]Result, blocked map[string]bool) error {
	var cur runtime.Cursor
	for {
		ds, next, err := h.rt.Delayed(cur, 1000)
		if err != nil {
			return fmt.Errorf("read delayed messages: %w", err)
		}
		for _, d := range ds {
			if !h.classes[d.Message.Class] {
				continue
			}
			if _, ok := state[d.Message.ID]; !ok {
				state[d.Message.ID] = Result{Outcome: Scheduled, Attempts: d.Message.Attempt, Err: d.Err, Due: d.Due,
					Redelivery: d.Redelivery, Message: d.Message}
			}
			if d.Redelivery {
				blocked[d.Message.Class+"\x00"+string(d.Message.Key)] = true
			}
		}
		if cur = next; cur == "" {
			return nil
		}
	}
}

// parkedResults adds the parked messages of the harness's classes not
// already in state as Parked, those of the keys marked in blocked only.
func (h *Harness) parkedResults(state map[string]Result, blocked map[string]bool) error {
	keys, err := h.rt.ParkedKeys()
	if err != nil {
		return fmt.Errorf("read parked keys: %w", err)
	}
	for _, k := range keys {
		if !h.classes[k.Class] {
			continue
		}
		ms, err := h.rt.Parked(k.Class, k.Key)
		if err != nil {
			return fmt.Errorf("read parked messages: %w", err)
		}
		for _, m := range ms {
			if _, ok := state[m.ID]; !ok && blocked[k.Class+"\x00"+string(k.Key)] {
				state[m.ID] = Result{Outcome: Parked, Attempts: m.Attempt, Message: m}
			}
		}
	}
	return nil
}

// discardedLocked reports whether the message with id, which is not
// handled and not in the state file, was a dead letter (seen so by an
// earlier read, or made one by its last attempt): then its dead letter
// was discarded, noted once in its history, and its result says so.
func (h *Harness) discardedLocked(id string) (Result, bool) {
	hist := h.history[id]
	last := len(hist) - 1
	if last >= 0 && hist[last].Kind == EventDiscarded {
		d := h.dead[id]
		return Result{Outcome: Discarded, Attempts: d.Attempts, Err: d.Err, Message: d.Message}, true
	}
	d, seen := h.dead[id]
	if !seen && (last < 0 || hist[last].Kind != EventDeadLettered) {
		return Result{}, false
	}
	if !seen {
		d = Result{Attempts: hist[last].Attempt + 1, Err: hist[last].Err, Message: h.msgs[id]}
		h.dead[id] = d
	}
	h.history[id] = append(hist, Event{Kind: EventDiscarded, Attempt: d.Attempts, Err: d.Err})
	return Result{Outcome: Discarded, Attempts: d.Attempts, Err: d.Err, Message: d.Message}, true
}

// Result returns what became of the message with id, as of now.
func (h *Harness) Result(id string) Result {
	if h.t != nil {
		h.t.Helper()
	}
	res, err := h.results()
	if err != nil {
		h.fatalf("handofftest: %v", err)
	}
	r, ok := res[id]
	if !ok {
		h.fatalf("handofftest: no message %s was sent", id)
	}
	return r
}

// Results returns what became of every message sent, in the order their
// IDs were first sent.
func (h *Harness) Results() []Result {
	if h.t != nil {
		h.t.Helper()
	}
	res, err := h.results()
	if err != nil {
		h.fatalf("handofftest: %v", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Result, len(h.sent))
	for i, id := range h.sent {
		out[i] = res[id]
	}
	return out
}

// Handled returns the IDs of the messages handled so far, in the order
// their handlers succeeded; an ID handled twice (redelivered) is listed
// twice.
func (h *Harness) Handled() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.order...)
}

// History returns what happened to the message with id, in order: each
// attempt (over every delivery of the ID, across restarts) with what the
// runtime decided after it, and the discard of its dead letter. An
// attempt still running has no event yet; a message that never ran
// (parked, scheduled) has none. It may be called after [Harness.Stop]
// (a discard is then noticed only if an earlier call saw it). It fails
// the test if no message with id was sent.
func (h *Harness) History(id string) []Event {
	if h.t != nil {
		h.t.Helper()
	}
	if h.rep == nil {
		h.Result(id) // notices a discard
	}
	h.mu.Lock()
	_, sent := h.msgs[id]
	hist := append([]Event(nil), h.history[id]...)
	h.mu.Unlock()
	if !sent {
		h.fatalf("handofftest: no message %s was sent", id)
	}
	return hist
}

// RequireHandled reports a test error unless the message with id was
// handled after attempts attempts, and returns its result.
func (h *Harness) RequireHandled(id string, attempts int) Result {
	if h.t != nil {
		h.t.Helper()
	}
	r := h.Result(id)
	if r.Outcome != Handled || r.Attempts != attempts {
		h.errorf("handofftest: %s is %s after %d attempts, want handled after %d%s", id, r.Outcome, r.Attempts, attempts, r.errText())
	}
	return r
}

// RequireDeadLettered reports a test error unless the message with id is
// a dead letter whose error contains errText, and returns its result.
func (h *Harness) RequireDeadLettered(id, errText string) Result {
	if h.t != nil {
		h.t.Helper()
	}
	r := h.Result(id)
	if r.Outcome != DeadLettered || !strings.Contains(r.Err, errText) {
		h.errorf("handofftest: %s is %s%s, want dead-lettered with an error containing %q", id, r.Outcome, r.errText(), errText)
	}
	return r
}

// RequireParked reports a test error unless the message with id is
// parked behind its key, and returns its result.
func (h *Harness) RequireParked(id string) Result {
	if h.t != nil {
		h.t.Helper()
	}
	r := h.Result(id)
	if r.Outcome != Parked {
		h.errorf("handofftest: %s is %s%s, want parked", id, r.Outcome, r.errText())
	}
	return r
}

// RequireScheduled reports a test error unless the message with id waits
// for a due time, and returns its result.
func (h *Harness) RequireScheduled(id string) Result {
	if h.t != nil {
		h.t.Helper()
	}
	r := h.Result(id)
	if r.Outcome != Scheduled {
		h.errorf("handofftest: %s is %s%s, want scheduled", id, r.Outcome, r.errText())
	}
	return r
}

// String describes the result in one line: its ID, outcome and
// attempts, then its error if any, as "msg-2 dead-lettered after 1
// attempt: permanent: card declined".
func (r Result) String() string {
	s := r.ID + " " + r.Outcome.String()
	switch {
	case r.Attempts == 1:
		s += " after 1 attempt"
	case r.Attempts > 1:
		s += " after " + strconv.Itoa(r.Attempts) + " attempts"
	}
	if r.Err != "" {
		s += ": " + r.Err
	}
	return s
}

func (r Result) errText() string {
	if r.Err == "" {
		return ""
	}
	return " (error: " + r.Err + ")"
}

// Restart stops the runtime gracefully (what is unfinished is saved to
// the state file) and starts a new one on the same state file, which
// re-pushes the saved messages first, as a deploy does. It returns the
// stop's report.
func (h *Harness) Restart() *runtime.Report {
	if h.t != nil {
		h.t.Helper()
	}
	rep := h.Stop()
	h.start()
	return rep
}

// Stop stops the runtime gracefully and returns its report; it fails
// the test if Run returned an error. Later calls return the same report.
func (h *Harness) Stop() *runtime.Report {
	if h.t != nil {
		h.t.Helper()
	}
	if h.rep != nil {
		return h.rep
	}
	if err := h.rt.Shutdown(context.Background()); err != nil {
		h.errorf("handofftest: stop: %v", err)
	}
	r := <-h.wait
	if r.err != nil {
		h.errorf("handofftest: runtime: %v", r.err)
	}
	h.rep = r.rep
	if h.rep == nil {
		h.rep = &runtime.Report{}
	}
	return h.rep
}
