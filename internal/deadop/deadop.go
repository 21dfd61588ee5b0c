// Package deadop is the format of the group's dead-letter operations in
// the changelog's meta topic (<group>.handoff-meta, compacted, one
// partition): a bulk requeue or discard asked through any instance (or
// the CLI), carried out by the owners of the dead letters it names, its
// progress and its cancel. The runtime (which writes requests, follows
// them and carries out its part) and the CLI (which writes requests and
// reads progress) share it, so both read and write the same records.
//
// Three kinds of records, each a JSON value under its own key:
//
//	deadop/<op ID>                     Request: what to do to which dead letters, who asked
//	deadop/<op ID>/cancel              Cancel: who cancelled, when
//	deadop/<op ID>/status/<instance>   Status: one owner's progress on its part
//
// A Request names its dead letters by their group-wide IDs (runtime
// DeadLetter.Key), resolved by the requester from the group's listing
// when it was made: an owner acts on the IDs it owns that are still dead
// letters, so an ID requeued once (it left the dead letters) is never
// requeued again, also after its partition moved to another owner in
// the middle of the operation. Keys other than these are not this
// package's (pause/<class> records share the topic); Parse says so.
//
// A writer of a Request (the runtime's StartDeadOp, the CLI) sets At to
// now, or to the latest last failure of the dead letters it names when
// that is later (an owner acts only on those that last failed no later
// than At), and, for a request with a Rate, StartAt about 1.5 s after
// At, so that the owners, each following the topic every second, begin
// together. A Status's Rate is its owner's current share of the rate.
package deadop

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Actions a Request can ask for.
const (
	Requeue = "requeue"
	Discard = "discard"
)

// States of an owner's part (Status.State).
const (
	Running  = "running"
	Done     = "done"
	Canceled = "canceled"
)

// MaxIDs bounds the dead letters one Request names: about 40 bytes an
// ID keeps a request under the meta topic's default 1 MB record size.
const MaxIDs = 20000

// Filter is the selection a Request was made with, kept for the audit
// trail (what the operator asked for); the IDs are what is acted on.
// The fields are runtime.DeadFilter's, times in RFC 3339.
type Filter struct {
	Class         string    `json:"class,omitempty"`
	Topic         string    `json:"topic,omitempty"`
	Partition     *int      `json:"partition,omitempty"`
	Key           *string   `json:"key,omitempty"`
	ErrorContains string    `json:"error_contains,omitempty"`
	MinAttempts   int       `json:"min_attempts,omitempty"`
	Since         time.Time `json:"since,omitzero"`
	Until         time.Time `json:"until,omitzero"`
	FirstSince    time.Time `json:"first_since,omitzero"`
	FirstUntil    time.Time `json:"first_until,omitzero"`
}

// Request is one bulk operation. Rate is in dead letters per second for
// the whole group (0: no limit): an owner with n of the Request's IDs
// takes the share Rate*n/len(IDs), so that the owners together go at
// Rate. Who is the token's name or the client's address; Via the
// instance (or "cli") that wrote it. At is when it was made, no earlier
// than the last failure of any dead letter it names: an owner acts only
// on those that last failed no later than At (a requeued one that failed
// again is not requeued again by the same request).
type Request struct {
	ID     string    `json:"id"`
	Action string    `json:"action"`
	IDs    []string  `json:"ids"`
	Filter Filter    `json:"filter"`
	Rate   float64   `json:"rate,omitempty"`
	Limit  int       `json:"limit,omitempty"`
	Who    string    `json:"who"`
	Via    string    `json:"via"`
	At     time.Time `json:"at"`
	// StartAt, when set, is when the owners begin (the runtime sets it
	// a second and a half after At for a rate-limited request, so that
	// every owner, following the topic about every second, begins with
	// the others and the group goes at Rate from the start). An owner
	// that sees the request later begins at once.
	StartAt time.Time `json:"start_at,omitzero"`
}

// Cancel stops a Request: owners stop taking its IDs, what they did
// stays done.
type Cancel struct {
	Who string    `json:"who"`
	At  time.Time `json:"at"`
}

// Status is one owner's progress on a Request: Done acted on, Failed
// acted on and failed (FailedAgain: a requeued message that is a dead
// letter again), Left still to do of the IDs it owns, Skipped named IDs
// it owns that were no longer dead letters. An owner writes it as it
// goes and once more when its part ends (State Done or Canceled).
type Status struct {
	Instance    string `json:"instance"`
	State       string `json:"state"`
	Done        int    `json:"done"`
	Failed      int    `json:"failed,omitempty"`
	FailedAgain int    `json:"failed_again,omitempty"`
	Left        int    `json:"left"`
	Skipped     int    `json:"skipped,omitempty"`
	// Rate is the owner's share of the request's rate when it wrote the
	// status (dead letters per second; 0 for none or no limit): the
	// other owners reckon with it what it has left by now.
	Rate float64   `json:"rate,omitempty"`
	Err  string    `json:"err,omitempty"`
	At   time.Time `json:"at"`
}

// Timing both writers of requests rely on. StartDelay is how long after
// it is written a rate-limited request begins (Request.StartAt): owners
// follow the meta topic about every second, so that they begin together
// and the group goes at the rate from the start. An owner, after its last
// requeue, waits at most Settle for the requeued messages to end (to count
// those that failed again); a request nobody has reported on yet shows as
// running for StartGrace besides Settle after it begins, since the
// owners' first statuses are on their way. So by ReportGrace after a
// request begins, every owner with something to do has reported on it.
const (
	StartDelay  = 1500 * time.Millisecond
	Settle      = 10 * time.Second
	StartGrace  = 3 * time.Second
	ReportGrace = Settle + StartGrace
)

// Kinds of record (Parse's kind).
const (
	KindRequest = "request"
	KindCancel  = "cancel"
	KindStatus  = "status"
)

const prefix = "deadop/"

// RequestKey, CancelKey and StatusKey are the meta topic's keys of an
// operation's records.
func RequestKey(op string) []byte { return []byte(prefix + op) }
func CancelKey(op string) []byte  { return []byte(prefix + op + "/cancel") }
func StatusKey(op, instance string) []byte {
	return []byte(prefix + op + "/status/" + instance)
}

// ErrBad is wrapped by the errors of Validate and Parse.
var ErrBad = errors.New("deadop: bad record")

// Validate checks what an owner relies on: an ID, a known action, at
// least one and at most MaxIDs IDs, a rate not below 0.
func (r *Request) Validate() error {
	switch {
	case r.ID == "" || strings.Contains(r.ID, "/"):
		return fmt.Errorf("%w: operation ID %q (empty or with a /)", ErrBad, r.ID)
	case r.Action != Requeue && r.Action != Discard:
		return fmt.Errorf("%w: operation %s: action %q, want %q or %q", ErrBad, r.ID, r.Action, Requeue, Discard)
	case len(r.IDs) == 0:
		return fmt.Errorf("%w: operation %s names no dead letter", ErrBad, r.ID)
	case len(r.IDs) > MaxIDs:
		return fmt.Errorf("%w: operation %s names %d dead letters, at most %d", ErrBad, r.ID, len(r.IDs), MaxIDs)
	case r.Rate < 0:
		return fmt.Errorf("%w: operation %s: rate %v below 0", ErrBad, r.ID, r.Rate)
	}
	return nil
}

// Record is one decoded record of Parse: Op is its operation's ID, and
// one of Request, Cancel and Status is set by Kind. A nil value (a
// tombstone) decodes with none set.
type Record struct {
	Kind     string
	Op       string
	Instance string // a Status's
	Request  *Request
	Cancel   *Cancel
	Status   *Status
}

// Parse decodes the meta topic's record k, v. ok is false for a key that
// is not an operation's (a pause's); err wraps ErrBad for an operation's
// record that does not decode or a request that does not Validate.
func Parse(k, v []byte) (rec Record, ok bool, err error) {
	rest, found := strings.CutPrefix(string(k), prefix)
	if !found {
		return Record{}, false, nil
	}
	op, tail, slash := strings.Cut(rest, "/")
	if op == "" {
		return Record{}, true, fmt.Errorf("%w: key %q names no operation", ErrBad, k)
	}
	rec.Op = op
	switch {
	case !slash: // deadop/<op>, not deadop/<op>/: one key per record
		rec.Kind = KindRequest
	case tail == "cancel":
		rec.Kind = KindCancel
	case strings.HasPrefix(tail, "status/") && len(tail) > len("status/"):
		rec.Kind, rec.Instance = KindStatus, tail[len("status/"):]
	default:
		return Record{}, true, fmt.Errorf("%w: key %q", ErrBad, k)
	}
	if v == nil {
		return rec, true, nil
	}
	switch rec.Kind {
	case KindRequest:
		rec.Request = new(Request)
		err = json.Unmarshal(v, rec.Request)
		if err == nil && rec.Request.ID != op {
			err = fmt.Errorf("request of %q under the key of %q", rec.Request.ID, op)
		}
		if err == nil {
			err = rec.Request.Validate()
		}
	case KindCancel:
		rec.Cancel = new(Cancel)
		err = json.Unmarshal(v, rec.Cancel)
	case KindStatus:
		rec.Status = new(Status)
		err = json.Unmarshal(v, rec.Status)
	}
	if err != nil && !errors.Is(err, ErrBad) {
		err = fmt.Errorf("%w: %s: %w", ErrBad, k, err)
	}
	return rec, true, err
}

// Encode returns the JSON value of a Request, Cancel or Status.
func Encode(v any) ([]byte, error) {
	switch v.(type) {
	case *Request, *Cancel, *Status, Request, Cancel, Status:
		return json.Marshal(v)
	}
	return nil, fmt.Errorf("deadop: cannot encode %T", v)
}

// Progress sums the owners' statuses of one operation: Left is what the
// owners that reported still have; an operation is over when it is
// cancelled or every reporting owner is done and no ID is unaccounted
// for (Done+Failed+Skipped+Left covers the request's IDs).
type Progress struct {
	Done, Failed, FailedAgain, Left, Skipped int
	// Unreported is the number of the request's IDs no owner has
	// reported on yet.
	Unreported int
	Over       bool
}

// Sum adds statuses up for req (cancel non-nil when it was cancelled).
func Sum(req *Request, cancel *Cancel, statuses []Status) Progress {
	var p Progress
	allDone := true
	for _, s := range statuses {
		p.Done += s.Done
		p.Failed += s.Failed
		p.FailedAgain += s.FailedAgain
		p.Left += s.Left
		p.Skipped += s.Skipped
		if s.State == Running {
			allDone = false
		}
	}
	p.Unreported = max(0, len(req.IDs)-p.Done-p.Failed-p.Skipped-p.Left)
	p.Over = cancel != nil || (allDone && p.Unreported == 0 && p.Left == 0)
	return p
}
