package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/handoff-go/handoff/internal/deadop"
	"github.com/handoff-go/handoff/runtime"
)

// opTimeout bounds a runtime call of the group's dead letters: the
// group's listing (it reads the changelogs of the partitions this
// instance does not own) and an operation's start, status or cancel (a
// write to and a read of the meta topic). It stays under
// DefaultWriteTimeout, so that the answer says what took long.
const opTimeout = 20 * time.Second

// Parameters of a bulk requeue or discard besides the selection's
// (deadFilterParams).
var bulkParams = []string{"ids", "dry_run", "rate", "limit", "confirm"}

// bulkRequest is a parsed POST /api/dead/requeue or /api/dead/discard.
type bulkRequest struct {
	op      runtime.DeadOp
	confirm bool
}

// parseBulk reads a bulk operation's parameters from v: the selection
// (parseDeadFilter's parameters, or ids: dead letter IDs instead of a
// filter), dry_run and confirm (booleans), rate (dead letters per second
// for the whole group, >= 0, 0 no limit) and limit (0 to deadop.MaxIDs,
// 0 all). With strict, a parameter of another name is an error: a
// misspelt filter must not widen the selection to every dead letter.
func parseBulk(v url.Values, action string, strict bool) (bulkRequest, error) {
	if strict {
		for name := range v {
			if !slices.Contains(deadFilterParams, name) && !slices.Contains(bulkParams, name) {
				return bulkRequest{}, fmt.Errorf("admin: unknown parameter %q: the selection takes %s, and the operation %s",
					name, strings.Join(deadFilterParams, ", "), strings.Join(bulkParams, ", "))
			}
		}
	}
	filter, err := parseDeadFilter(v)
	if err != nil {
		return bulkRequest{}, err
	}
	b := bulkRequest{op: runtime.DeadOp{Action: action, Filter: filter}}
	for _, id := range v["ids"] {
		for id := range strings.SplitSeq(id, ",") {
			if id = strings.TrimSpace(id); id == "" {
				continue
			}
			if !validKey(id) {
				return bulkRequest{}, fmt.Errorf("admin: ids: %q is not a dead letter ID", short(id))
			}
			b.op.IDs = append(b.op.IDs, id)
		}
	}
	if len(b.op.IDs) > deadop.MaxIDs {
		return bulkRequest{}, fmt.Errorf("admin: ids names %d dead letters, at most %d", len(b.op.IDs), deadop.MaxIDs)
	}
	if len(b.op.IDs) > 0 && !selectsAll(filter) {
		return bulkRequest{}, fmt.Errorf("admin: ids and a filter are two ways to select: give one")
	}
	for _, f := range []struct {
		name string
		to   *bool
	}{{"dry_run", &b.op.DryRun}, {"confirm", &b.confirm}} {
		if *f.to, err = parseBool(v.Get(f.name)); err != nil {
			return bulkRequest{}, fmt.Errorf("admin: %s must be true or false, got %q", f.name, v.Get(f.name))
		}
	}
	if s := v.Get("rate"); s != "" {
		r, err := strconv.ParseFloat(s, 64)
		if err != nil || r < 0 || math.IsInf(r, 0) || math.IsNaN(r) {
			return bulkRequest{}, fmt.Errorf("admin: rate must be a number of dead letters per second >= 0 (0: no limit), got %q", s)
		}
		b.op.Rate = r
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > deadop.MaxIDs {
			return bulkRequest{}, fmt.Errorf("admin: limit must be an integer from 0 (all) to %d, got %q", deadop.MaxIDs, s)
		}
		b.op.Limit = n
	}
	return b, nil
}

// selectsAll reports whether f selects every dead letter (its order
// aside).
func selectsAll(f runtime.DeadFilter) bool {
	return f.Class == "" && f.Topic == "" && f.Partition == nil && f.Key == nil && f.ErrorContains == "" &&
		f.MinAttempts == 0 && f.Since.IsZero() && f.Until.IsZero() && f.FirstSince.IsZero() && f.FirstUntil.IsZero()
}

// parseBool reads a boolean parameter: "" is false; "on" (an HTML
// checkbox) is true.
func parseBool(s string) (bool, error) {
	switch s {
	case "":
		return false, nil
	case "on":
		return true, nil
	}
	return strconv.ParseBool(s)
}

// bulkValues reads the parameters of a bulk operation from r: a JSON
// object (Content-Type application/json) or a form, URL-encoded or
// multipart, with the URL's query (a JSON body takes none). On failure
// it answers 400 (413 for a body over MaxBodyBytes) and returns false.
func (h *handler) bulkValues(w http.ResponseWriter, r *http.Request) (url.Values, bool) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		if !h.parseForm(w, r) {
			return nil, false
		}
		return r.Form, true
	}
	if r.URL.RawQuery != "" {
		writeError(w, http.StatusBadRequest, "admin: a JSON body carries the whole request: leave the URL's query empty")
		return nil, false
	}
	body, err := io.ReadAll(r.Body)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "admin: body of more than %d bytes", tooBig.Limit)
		return nil, false
	}
	if err == nil {
		var v url.Values
		if v, err = jsonValues(body); err == nil {
			return v, true
		}
	}
	writeError(w, http.StatusBadRequest, "admin: read the JSON body: %v", err)
	return nil, false
}

// jsonValues turns a JSON object of parameters into url.Values: strings
// as they are, numbers as written, booleans as true or false, null as
// absent, and ids as an array of strings.
func jsonValues(body []byte) (url.Values, error) {
	var obj map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(body))
	if err := d.Decode(&obj); err != nil {
		return nil, fmt.Errorf("want an object of parameters, e.g. {\"class\": \"orders\", \"dry_run\": true}: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	v := url.Values{}
	for name, raw := range obj {
		if name == "ids" {
			var ids []string
			if err := json.Unmarshal(raw, &ids); err != nil {
				return nil, fmt.Errorf("ids must be an array of dead letter IDs: %w", err)
			}
			v["ids"] = ids
			continue
		}
		var val any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&val); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		switch x := val.(type) {
		case nil:
		case string:
			v.Set(name, x)
		case json.Number:
			v.Set(name, x.String())
		case bool:
			v.Set(name, strconv.FormatBool(x))
		default:
			return nil, fmt.Errorf("%s must be a string, a number or a boolean", name)
		}
	}
	return v, nil
}

// groupDeadJSON is a dead letter of the group: the dead letter's JSON,
// the input partition whose changelog holds it ("" and -1 for one of no
// partition) and the instance that owns that partition ("" when none
// does now), as `handoff dead list --brokers --json` names them.
type groupDeadJSON struct {
	deadJSON
	InputTopic     string `json:"input_topic"`
	InputPartition int32  `json:"input_partition"`
	Owner          string `json:"owner"`
}

func toGroupDeadJSON(dl *runtime.GroupDeadLetter) groupDeadJSON {
	return groupDeadJSON{deadJSON: toDeadJSON(&dl.DeadLetter), InputTopic: dl.Topic, InputPartition: dl.Partition, Owner: dl.Owner}
}

// opJSON is a dead-letter operation: GET /api/dead/ops/{id}, an entry of
// GET /api/dead/ops, and the answer to a bulk requeue or discard.
type opJSON struct {
	// ID is absent for a dry run, which is not kept.
	ID     string `json:"id,omitempty"`
	Action string `json:"action"`
	// Selection is the filter it was made with, as the list's
	// parameters ({} for every dead letter); IDs, when it named dead
	// letters one by one, counts them.
	Selection map[string]string `json:"selection"`
	Matched   int               `json:"matched"`
	// Sample is a dry run's first dead letters (at most 20).
	Sample      []groupDeadJSON `json:"sample,omitempty"`
	Rate        float64         `json:"rate"`
	Limit       int             `json:"limit"`
	Who         string          `json:"who"`
	Via         string          `json:"via"`
	Started     time.Time       `json:"started,omitzero"`
	State       string          `json:"state"`
	Done        int             `json:"done"`
	Failed      int             `json:"failed"`
	FailedAgain int             `json:"failed_again"`
	Left        int             `json:"left"`
	Skipped     int             `json:"skipped"`
	Unreported  int             `json:"unreported"`
	CanceledBy  string          `json:"canceled_by,omitempty"`
	CanceledAt  time.Time       `json:"canceled_at,omitzero"`
	Owners      []ownerJSON     `json:"owners"`
}

// ownerJSON is one owner's part of an operation.
type ownerJSON struct {
	Instance    string `json:"instance"`
	State       string `json:"state"`
	Done        int    `json:"done"`
	Failed      int    `json:"failed"`
	FailedAgain int    `json:"failed_again"`
	Left        int    `json:"left"`
	Skipped     int    `json:"skipped"`
	// Rate is the owner's share of the operation's rate, per second, when
	// it reported (0: no limit).
	Rate  float64   `json:"rate"`
	Error string    `json:"error,omitempty"`
	At    time.Time `json:"at,omitzero"`
}

func toOpJSON(st *runtime.DeadOpStatus) opJSON {
	o := opJSON{
		ID: st.ID, Action: st.Action, Selection: selectionOf(st.Filter), Matched: st.Matched, Rate: st.Rate, Limit: st.Limit,
		Who: st.Who, Via: st.Via, Started: st.Started, State: st.State,
		Done: st.Done, Failed: st.Failed, FailedAgain: st.FailedAgain, Left: st.Left, Skipped: st.Skipped, Unreported: st.Unreported,
		CanceledBy: st.CanceledBy, CanceledAt: st.CanceledAt, Owners: make([]ownerJSON, len(st.Owners)),
	}
	for i := range st.Sample {
		o.Sample = append(o.Sample, toGroupDeadJSON(&st.Sample[i]))
	}
	for i, s := range st.Owners {
		o.Owners[i] = ownerJSON{Instance: s.Instance, State: s.State, Done: s.Done, Failed: s.Failed, FailedAgain: s.FailedAgain,
			Left: s.Left, Skipped: s.Skipped, Rate: s.Rate, Error: s.Err, At: s.At}
	}
	return o
}

// selectionOf returns f as the list's search parameters (those that
// select; order is left out): what the audit trail shows and what a
// request repeats.
func selectionOf(f runtime.DeadFilter) map[string]string {
	s := map[string]string{}
	set := func(name, v string) {
		if v != "" {
			s[name] = v
		}
	}
	set("class", f.Class)
	set("topic", f.Topic)
	if f.Partition != nil {
		s["partition"] = strconv.Itoa(*f.Partition)
	}
	if f.Key != nil {
		if utf8.Valid(f.Key) && !bytes.ContainsFunc(f.Key, func(r rune) bool { return r < 0x20 || r == 0x7f }) && len(f.Key) > 0 {
			s["key"] = string(f.Key)
		} else {
			s["key_b64"] = base64.StdEncoding.EncodeToString(f.Key)
		}
	}
	set("error", f.ErrorContains)
	if f.MinAttempts > 0 {
		s["min_attempts"] = strconv.Itoa(f.MinAttempts)
	}
	for _, t := range []struct {
		name string
		at   time.Time
	}{{"since", f.Since}, {"until", f.Until}, {"first_since", f.FirstSince}, {"first_until", f.FirstUntil}} {
		if !t.at.IsZero() {
			s[t.name] = t.at.UTC().Format(time.RFC3339Nano)
		}
	}
	return s
}

// selectionText is selectionOf as one line, for the dashboard: "all" for
// every dead letter.
func selectionText(f runtime.DeadFilter) string {
	s := selectionOf(f)
	if len(s) == 0 {
		return "all"
	}
	var parts []string
	for _, name := range deadFilterParams {
		if v, ok := s[name]; ok {
			parts = append(parts, name+"="+strconv.Quote(v))
		}
	}
	return strings.Join(parts, " ")
}

func (h *handler) apiBulkRequeue(w http.ResponseWriter, r *http.Request) {
	h.apiBulk(w, r, deadop.Requeue)
}

func (h *handler) apiBulkDiscard(w http.ResponseWriter, r *http.Request) {
	h.apiBulk(w, r, deadop.Discard)
}

// apiBulk serves POST /api/dead/requeue and /api/dead/discard: a dry
// run answers 200 with the count and a sample; an operation started
// answers 202 with its status and Location.
func (h *handler) apiBulk(w http.ResponseWriter, r *http.Request, action string) {
	if !h.authorizeBearer(w, r) {
		return
	}
	v, ok := h.bulkValues(w, r)
	if !ok {
		return
	}
	req, err := parseBulk(v, action, true)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%s", err)
		return
	}
	req.op.Who = who(r)
	st, err := h.startOp(r.Context(), req)
	var (
		unconfirmed *unconfirmedError
		tooMany     *tooManyError
	)
	switch {
	case errors.As(err, &unconfirmed), errors.As(err, &tooMany):
		writeError(w, http.StatusBadRequest, "admin: %s dead letters: %v", action, err)
		return
	case err != nil:
		h.opError(w, fmt.Sprintf("%s dead letters", action), err)
		return
	case req.op.DryRun:
		writeJSON(w, http.StatusOK, toOpJSON(&st))
		return
	}
	w.Header().Set("Location", basePath(r)+"api/dead/ops/"+url.PathEscape(st.ID))
	writeJSON(w, http.StatusAccepted, toOpJSON(&st))
}

// unconfirmedError is a discard of more than one dead letter without
// confirm: nothing was discarded.
type unconfirmedError struct{ n int }

func (e *unconfirmedError) Error() string {
	return fmt.Sprintf("the selection holds %d dead letters: a discard of more than one needs confirm=true (nothing was discarded)", e.n)
}

// tooManyError is a selection without a limit of more dead letters than
// one operation takes: nothing was started.
type tooManyError struct{ n int }

func (e *tooManyError) Error() string {
	return fmt.Sprintf("the selection matches %d dead letters, more than the %d one operation takes: set a limit (the oldest first) or narrow it",
		e.n, deadop.MaxIDs)
}

// startOp starts req's operation (or dry run) through the runtime, as
// req.op.Who, within opTimeout. A filter is counted first: without a
// limit, a selection over deadop.MaxIDs is refused with a *tooManyError.
// A discard that is not a dry run and not confirmed is refused with an
// *unconfirmedError when it selects more than one dead letter (counted
// by a dry run when it names IDs).
func (h *handler) startOp(ctx context.Context, req bulkRequest) (runtime.DeadOpStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	n := -1 // how many it selects; -1 unknown
	if len(req.op.IDs) == 0 {
		_, _, total, err := h.rt.GroupDeadLetters(ctx, req.op.Filter, "", 1)
		if err != nil {
			return runtime.DeadOpStatus{}, err
		}
		if req.op.Limit == 0 && total > deadop.MaxIDs {
			return runtime.DeadOpStatus{}, &tooManyError{n: total}
		}
		n = total
		if req.op.Limit > 0 {
			n = min(n, req.op.Limit)
		}
	}
	if req.op.Action == deadop.Discard && !req.op.DryRun && !req.confirm {
		if n < 0 {
			dry := req.op
			dry.DryRun = true
			st, err := h.rt.StartDeadOp(ctx, dry)
			if err != nil {
				return st, err
			}
			n = st.Matched
		}
		if n > 1 {
			return runtime.DeadOpStatus{}, &unconfirmedError{n: n}
		}
	}
	return h.rt.StartDeadOp(ctx, req.op)
}

func (h *handler) apiOps(w http.ResponseWriter, r *http.Request) {
	if !h.authorizeRead(w, r) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	ops, err := h.rt.DeadOps(ctx)
	if err != nil {
		h.opError(w, "list dead letter operations", err)
		return
	}
	out := struct {
		Ops []opJSON `json:"ops"`
	}{Ops: make([]opJSON, len(ops))}
	for i := range ops {
		out.Ops[i] = toOpJSON(&ops[i])
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) apiOp(w http.ResponseWriter, r *http.Request) {
	if !h.authorizeRead(w, r) {
		return
	}
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	st, err := h.rt.DeadOpStatus(ctx, id)
	if err != nil {
		h.opError(w, "get dead letter operation "+id, err)
		return
	}
	writeJSON(w, http.StatusOK, toOpJSON(&st))
}

func (h *handler) apiOpCancel(w http.ResponseWriter, r *http.Request) {
	if !h.authorizeBearer(w, r) {
		return
	}
	id := r.PathValue("id")
	st, err := h.cancelOp(r.Context(), id, who(r))
	if err != nil {
		h.opError(w, "cancel dead letter operation "+id, err)
		return
	}
	writeJSON(w, http.StatusOK, toOpJSON(&st))
}

// cancelOp cancels operation id as who and returns its status after,
// within opTimeout.
func (h *handler) cancelOp(ctx context.Context, id, who string) (runtime.DeadOpStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if err := h.rt.CancelDeadOp(ctx, id, who); err != nil {
		return runtime.DeadOpStatus{}, err
	}
	return h.rt.DeadOpStatus(ctx, id)
}

// opError answers a failed runtime call of the group's dead letters:
// what names the call.
func (h *handler) opError(w http.ResponseWriter, what string, err error) {
	status := statusOf(err)
	msg := err.Error()
	switch {
	case errors.Is(err, deadop.ErrBad):
		status = http.StatusBadRequest
	case errors.Is(err, context.DeadlineExceeded):
		msg = fmt.Sprintf("no answer within %s (the changelogs or the meta topic are slow to read): %v", opTimeout, err)
	}
	if status == http.StatusInternalServerError {
		h.log.Error("admin request failed", "what", what, "err", err)
	}
	writeError(w, status, "admin: %s: %s", what, msg)
}
