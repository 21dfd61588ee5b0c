package admin

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/handoff-go/handoff/internal/deadop"
	"github.com/handoff-go/handoff/runtime"
)

//go:embed dashboard.html
var dashboardHTML string

var dashboardTmpl = template.Must(template.New("dashboard").Funcs(template.FuncMap{
	"seconds": fmtSeconds,
	"when":    fmtTime,
	"short":   short,
	"pct":     func(f float64) string { return strconv.Itoa(int(math.Round(f*100))) + "%" },
	"bar":     func(f float64) string { return strconv.FormatFloat(100*min(max(f, 0), 1), 'f', 1, 64) + "%" },
	// seg escapes a class name for one segment of a URL path, where
	// html/template leaves "/", "?", "#" and "%" as they are.
	"seg": url.PathEscape,
}).Parse(dashboardHTML))

// How many rows the dashboard shows per table.
const (
	pageDead    = 50
	pageParked  = 20
	pageDelayed = 20
)

// page is what the dashboard template renders.
type page struct {
	Base    string
	Nonce   string
	Refresh int64 // milliseconds; 0 means no reload
	Now     time.Time

	instanceJSON
	Classes         []classView
	TokenConfigured bool
	LoggedIn        bool // an admin session: the buttons work
	// ReadConfigured: Options.ReadToken is set; CanRead: the page may
	// show messages (no ReadToken, or a session); Session is the
	// session's role ("" none, "r" read, "w" admin).
	ReadConfigured, CanRead bool
	Session                 string
	Flash                   string
	FlashErr                bool

	DeadClass string
	DeadAfter runtime.Cursor
	Dead      []deadView
	DeadNext  runtime.Cursor
	DeadErr   string
	// DeadQ is the dead letter search as given (the form's values);
	// DeadTotal counts its matches on every page; DeadNextHref is the
	// link to the next page, the search kept.
	DeadQ        url.Values
	DeadTotal    int
	DeadNextHref template.URL

	// Preview is the dry run of a bulk requeue or discard of the search
	// (?bulk=requeue|discard&rate=&limit=); Op the operation of ?op=;
	// Ops the recent operations of the group (the audit trail).
	Preview *previewView
	Op      *opView
	OpErr   string
	Ops     []opView
	OpsErr  string
	// BulkRate and BulkLimit are the bulk panel's rate and limit as
	// given.
	BulkRate, BulkLimit string

	Parked    []parkedJSON
	ParkedErr string

	Delayed    []delayedView
	DelayedErr string
}

// classView is one class card.
type classView struct {
	classJSON
	// BudgetFill is DrainEstimate / DrainTimeout.
	BudgetFill float64
}

type deadView struct {
	Key                     string // the dead letter ID
	Class, ID, MsgKey, Err  string
	Attempts                int
	FirstFailed, LastFailed time.Time
	// Owner is the instance owning its partition ("" none now);
	// Partition its input partition (-1 none).
	Owner     string
	Partition int32
}

func toDeadView(dl *runtime.GroupDeadLetter) deadView {
	return deadView{
		Key: dl.Key, Class: dl.Message.Class, ID: dl.Message.ID, MsgKey: printable(dl.Message.Key), Err: dl.Err,
		Attempts: dl.Message.Attempt, FirstFailed: dl.FirstFailed, LastFailed: dl.LastFailed, Owner: dl.Owner, Partition: dl.Partition,
	}
}

// previewView is a dry run on the dashboard: how many dead letters the
// search selects for Action (within the limit), a sample, and the
// parameters the real operation's form repeats.
type previewView struct {
	Action  string
	Matched int
	Sample  []deadView
	Rate    float64
	Limit   int
	Err     string
}

// opView is a dead-letter operation on the dashboard.
type opView struct {
	ID, Action, Selection, Who, Via, State, CanceledBy string
	Started                                            time.Time
	Matched, Done, Failed, FailedAgain, Left, Skipped  int
	Unreported                                         int
	Rate                                               float64
	Limit                                              int
	// Progress is the share of Matched that is over (done, failed or
	// skipped).
	Progress float64
	// Running: an owner reports its part running; Settling: done as
	// far as the owners that reported say, but within a minute of its
	// start some of its dead letters have no report yet (their owners'
	// statuses may be on their way).
	Running, Settling bool
}

func toOpView(st *runtime.DeadOpStatus) opView {
	v := opView{ID: st.ID, Action: st.Action, Selection: selectionText(st.Filter), Who: st.Who, Via: st.Via, State: st.State,
		CanceledBy: st.CanceledBy, Started: st.Started, Matched: st.Matched, Done: st.Done, Failed: st.Failed,
		FailedAgain: st.FailedAgain, Left: st.Left, Skipped: st.Skipped, Unreported: st.Unreported, Rate: st.Rate, Limit: st.Limit,
		Running:  st.State == runtime.DeadOpRunning,
		Settling: st.State == runtime.DeadOpDone && st.Unreported > 0 && time.Since(st.Started) < time.Minute}
	if st.Matched > 0 {
		v.Progress = float64(st.Done+st.Failed+st.Skipped) / float64(st.Matched)
	}
	return v
}

// How many recent operations the dashboard shows.
const pageOps = 10

type delayedView struct {
	Due                 time.Time
	Class, ID, Reason   string
	Redeliveries, Tries int
}

func (h *handler) dashboard(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := page{
		Base:            basePath(r),
		Nonce:           nonce(),
		Refresh:         max(h.refresh.Milliseconds(), 0),
		Now:             time.Now().UTC(),
		instanceJSON:    h.instance(),
		TokenConfigured: len(h.token) > 0,
		ReadConfigured:  len(h.readToken) > 0,
		Session:         h.session(r),
		DeadClass:       q.Get("class"),
	}
	p.Flash, p.FlashErr = flash(q)
	p.LoggedIn = p.Session == roleAdmin
	p.CanRead = len(h.readToken) == 0 || p.Session != roleNone
	for _, cs := range h.rt.Stats() {
		cv := classView{classJSON: toClassJSON(cs)}
		if !p.CanRead {
			cv.Hold = cv.Hold.redacted()
		}
		if p.DrainTimeoutSeconds > 0 {
			cv.BudgetFill = cs.DrainEstimate / p.DrainTimeoutSeconds
		}
		p.Classes = append(p.Classes, cv)
	}
	if !p.CanRead {
		h.render(w, p)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	h.deadPanel(ctx, q, &p)
	h.bulkPanel(ctx, r, &p)
	h.parkedPanel(&p)
	h.delayedPanel(&p)

	h.render(w, p)
}

// deadPanel fills p's dead-letter panel: the page of dead letters after
// the cursor in q's "after" (a bad cursor is flashed and the first page
// shown), filtered by q, or the error that read it. It blocks on the
// state file up to ctx.
func (h *handler) deadPanel(ctx context.Context, q url.Values, p *page) {
	p.DeadAfter = runtime.Cursor(q.Get("after"))
	p.DeadQ = deadFilterQuery(q)
	filter, err := parseDeadFilter(q)
	var (
		dls  []runtime.GroupDeadLetter
		next runtime.Cursor
	)
	if err == nil {
		dls, next, p.DeadTotal, err = h.rt.GroupDeadLetters(ctx, filter, p.DeadAfter, pageDead)
		if errors.Is(err, runtime.ErrBadCursor) {
			p.Flash, p.FlashErr = fmt.Sprintf("Ignored a bad after parameter %q: it must be the cursor of a dead-letter page.", p.DeadAfter), true
			p.DeadAfter = ""
			dls, next, p.DeadTotal, err = h.rt.GroupDeadLetters(ctx, filter, "", pageDead)
		}
	}
	if err != nil {
		p.DeadErr = errText(err)
	} else {
		p.DeadNext = next
		if next != "" {
			nq := deadFilterQuery(q)
			nq.Set("after", string(next))
			p.DeadNextHref = template.URL("?" + nq.Encode())
		}
		for i := range dls {
			p.Dead = append(p.Dead, toDeadView(&dls[i]))
		}
	}
}

// parkedPanel fills p's parked panel: up to pageParked parked keys, or
// the error that read them.
func (h *handler) parkedPanel(p *page) {
	if keys, err := h.rt.ParkedKeys(); err != nil {
		p.ParkedErr = errText(err)
	} else {
		for i, k := range keys {
			if i == pageParked {
				break
			}
			p.Parked = append(p.Parked, parkedJSON{Class: k.Class, KeyText: ptr(printable(k.Key)), Count: k.Count, Oldest: k.Oldest})
		}
	}
}

// delayedPanel fills p's delayed panel: the first pageDelayed delayed
// messages as [runtime.Runtime.Delayed] lists them, or the error that
// read them.
func (h *handler) delayedPanel(p *page) {
	if entries, _, err := h.rt.Delayed("", pageDelayed); err != nil {
		p.DelayedErr = errText(err)
	} else {
		for _, e := range entries {
			m := &e.Message
			p.Delayed = append(p.Delayed, delayedView{Due: e.Due, Class: m.Class, ID: m.ID, Reason: delayedReason(e),
				Redeliveries: e.Redeliveries, Tries: m.Attempt})
		}
	}
}

// bulkPanel fills p's bulk panel from r's query: the dry run of
// ?bulk=requeue|discard (with rate and limit) of the search, the
// operation of ?op=, and the recent operations. The page stops
// reloading itself while it shows a dry run (the operator is deciding),
// and reloads every second while the operation it shows runs or
// settles.
func (h *handler) bulkPanel(ctx context.Context, r *http.Request, p *page) {
	q := r.URL.Query()
	p.BulkRate, p.BulkLimit = q.Get("rate"), q.Get("limit")
	if action := q.Get("bulk"); action != "" {
		pv := &previewView{Action: action}
		p.Preview = pv
		p.Refresh = 0
		req, err := parseBulk(q, action, false)
		switch {
		case action != deadop.Requeue && action != deadop.Discard:
			pv.Err = fmt.Sprintf("admin: bulk must be %s or %s, got %q", deadop.Requeue, deadop.Discard, action)
		case err != nil:
			pv.Err = err.Error()
		default:
			req.op.DryRun, req.op.Who = true, who(r)
			st, err := h.rt.StartDeadOp(ctx, req.op)
			if err != nil {
				pv.Err = errText(err)
				break
			}
			pv.Matched, pv.Rate, pv.Limit = st.Matched, req.op.Rate, req.op.Limit
			for i := range st.Sample {
				pv.Sample = append(pv.Sample, toDeadView(&st.Sample[i]))
			}
		}
	}
	if id := q.Get("op"); id != "" {
		if st, err := h.rt.DeadOpStatus(ctx, id); err != nil {
			p.OpErr = errText(err)
		} else {
			v := toOpView(&st)
			p.Op = &v
			if (v.Running || v.Settling) && p.Refresh > 1000 {
				p.Refresh = 1000
			}
		}
	}
	ops, err := h.rt.DeadOps(ctx)
	if err != nil {
		p.OpsErr = errText(err)
		return
	}
	for i := range ops[:min(len(ops), pageOps)] {
		p.Ops = append(p.Ops, toOpView(&ops[i]))
	}
}

// render writes the dashboard page p.
func (h *handler) render(w http.ResponseWriter, p page) {
	var buf bytes.Buffer
	if err := dashboardTmpl.Execute(&buf, p); err != nil {
		h.log.Error("dashboard not rendered", "err", err)
		writeError(w, http.StatusInternalServerError, "admin: render dashboard: %v", err)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Security-Policy", fmt.Sprintf("default-src 'none'; style-src 'nonce-%[1]s'; style-src-attr 'unsafe-inline'; script-src 'nonce-%[1]s'; "+
		"form-action 'self'; base-uri 'self'; frame-ancestors 'none'", p.Nonce))
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	w.Write(buf.Bytes())
}

func (h *handler) uiLogin(w http.ResponseWriter, r *http.Request) {
	if !h.sameOrigin(w, r) || !h.parseForm(w, r) {
		return
	}
	switch {
	case len(h.token) == 0 && len(h.readToken) == 0:
		h.back(w, r, "no-token", "")
	default:
		client := clientOf(r)
		if _, limited := h.fails.limited(client, time.Now()); limited {
			h.back(w, r, "too-many", "")
			return
		}
		role := h.roleOf(r.PostFormValue("token"))
		if role == roleNone {
			h.failed(r, client, "dashboard login")
			h.back(w, r, "bad-token", "")
			return
		}
		h.succeeded(client, role)
		h.setSession(w, r, role, false)
		h.back(w, r, "logged-in", "")
	}
}

func (h *handler) uiLogout(w http.ResponseWriter, r *http.Request) {
	if !h.sameOrigin(w, r) {
		return
	}
	h.setSession(w, r, roleNone, true)
	h.back(w, r, "logged-out", "")
}

func (h *handler) uiRequeue(w http.ResponseWriter, r *http.Request) {
	h.uiAction(w, r, "requeued", func(ctx context.Context, key string) error { return h.requeue(ctx, key) })
}

func (h *handler) uiDiscard(w http.ResponseWriter, r *http.Request) {
	h.uiAction(w, r, "discarded", func(ctx context.Context, key string) error { return h.discard(ctx, key) })
}

// uiAllowed reports whether a dashboard button's post may act: from this
// origin, with an admin token configured and the session logged in.
// When it may not, it has answered: the browser is sent back with why.
func (h *handler) uiAllowed(w http.ResponseWriter, r *http.Request) bool {
	if !h.sameOrigin(w, r) {
		return false
	}
	switch {
	case len(h.token) == 0:
		h.back(w, r, "no-token", "")
		return false
	case !h.loggedIn(r):
		h.back(w, r, "login-first", "")
		return false
	}
	return true
}

// uiAction runs a dashboard button's action when the session allows it
// and sends the browser back to the dashboard with the outcome.
func (h *handler) uiAction(w http.ResponseWriter, r *http.Request, done string, act func(context.Context, string) error) {
	if !h.uiAllowed(w, r) {
		return
	}
	key := r.PathValue("key")
	if !validKey(key) {
		h.back(w, r, "bad-key", "")
		return
	}
	if err := act(r.Context(), key); err != nil {
		code := "failed"
		var notOwner *runtime.NotOwnerError
		switch {
		case errors.As(err, &notOwner) && notOwner.Owner == "":
			code = "no-owner"
		case errors.As(err, &notOwner):
			v := url.Values{"msg": {"not-owner"}, "key": {key}, "owner": {notOwner.Owner}}
			h.redirect(w, r, v)
			return
		case errors.Is(err, runtime.ErrBadKey):
			code = "bad-key"
		case errors.Is(err, runtime.ErrNotFound):
			code = "not-found"
		case errors.Is(err, runtime.ErrRequeued):
			code = "busy"
		case errors.Is(err, runtime.ErrUnknownClass):
			code = "unknown-class"
		case errors.Is(err, runtime.ErrNotRunning):
			code = "not-running"
		case errors.Is(err, context.DeadlineExceeded):
			code = "pool-full"
		default:
			h.log.Error("dashboard action failed", "action", done, "key", key, "err", err)
		}
		h.back(w, r, code, key)
		return
	}
	h.back(w, r, done, key)
}

func (h *handler) uiBulkRequeue(w http.ResponseWriter, r *http.Request) {
	h.uiBulk(w, r, deadop.Requeue)
}

func (h *handler) uiBulkDiscard(w http.ResponseWriter, r *http.Request) {
	h.uiBulk(w, r, deadop.Discard)
}

// uiBulk starts the bulk operation of the dashboard's form (the search,
// rate, limit and, for a discard, confirm) when the session allows it,
// and sends the browser back to the search with the operation shown.
func (h *handler) uiBulk(w http.ResponseWriter, r *http.Request, action string) {
	if !h.uiAllowed(w, r) {
		return
	}
	if !h.parseForm(w, r) {
		return
	}
	back := deadFilterQuery(r.PostForm)
	req, err := parseBulk(r.PostForm, action, false)
	if err != nil {
		back.Set("msg", "bad-bulk")
		h.redirect(w, r, back)
		return
	}
	req.op.DryRun, req.op.Who = false, who(r)
	st, err := h.startOp(r.Context(), req)
	var (
		unconfirmed *unconfirmedError
		tooMany     *tooManyError
	)
	switch {
	case errors.As(err, &unconfirmed):
		back.Set("msg", "confirm-first")
	case errors.As(err, &tooMany):
		back.Set("msg", "op-too-many")
	case errors.Is(err, runtime.ErrNotFound):
		back.Set("msg", "op-empty")
	case errors.Is(err, runtime.ErrNotRunning):
		back.Set("msg", "not-running")
	case err != nil:
		h.log.Error("dashboard bulk operation failed", "action", action, "err", err)
		back.Set("msg", "op-failed")
	default:
		back.Set("msg", "op-started")
		back.Set("op", st.ID)
	}
	h.redirect(w, r, back)
}

// uiOpCancel cancels an operation from the dashboard and shows it.
func (h *handler) uiOpCancel(w http.ResponseWriter, r *http.Request) {
	if !h.uiAllowed(w, r) {
		return
	}
	id := r.PathValue("id")
	code := "op-canceled"
	if _, err := h.cancelOp(r.Context(), id, who(r)); err != nil {
		code = "op-failed"
		if errors.Is(err, runtime.ErrNotFound) {
			code = "op-unknown"
		} else {
			h.log.Error("dashboard cancel failed", "op", id, "err", err)
		}
	}
	h.redirect(w, r, url.Values{"msg": {code}, "op": {id}})
}

// sameOrigin rejects cross-origin browser posts (CSRF) with 403.
func (h *handler) sameOrigin(w http.ResponseWriter, r *http.Request) bool {
	if err := h.csrf.Check(r); err != nil {
		writeError(w, http.StatusForbidden, "admin: %v", err)
		return false
	}
	return true
}

// back redirects to the dashboard, showing the message of code (about
// dead letter key, when not "").
func (h *handler) back(w http.ResponseWriter, r *http.Request, code string, key string) {
	v := url.Values{"msg": {code}}
	if key != "" {
		v.Set("key", key)
	}
	h.redirect(w, r, v)
}

// ownerText is a group member's name from a query, for a flash message:
// control characters dropped, at most 120 runes.
func ownerText(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	if r := []rune(s); len(r) > 120 {
		s = string(r[:120]) + "…"
	}
	return s
}

// validKey reports whether s has the characters and length of a dead
// letter ID (hex digits and a dash, or a number): what a flash message
// may repeat. The runtime checks the form.
func validKey(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' || c == '-') {
			return false
		}
	}
	return true
}

// redirect sends the browser back to the dashboard with query q (the
// flash message's code and what it is about).
func (h *handler) redirect(w http.ResponseWriter, r *http.Request, q url.Values) {
	http.Redirect(w, r, basePath(r)+"?"+q.Encode(), http.StatusSeeOther)
}

// flashes are the dashboard's messages by code; %s is the dead letter key
// (the query's key), or for the class messages the class (its name,
// quoted). Codes come from the query, so only these texts can ever be
// shown.
var flashes = map[string]struct {
	text  string
	err   bool
	class bool // %s is the query's class name, not a dead letter key
}{
	"logged-in":     {"Logged in: requeue and discard are enabled.", false, false},
	"logged-out":    {"Logged out.", false, false},
	"requeued":      {"Dead letter %s requeued: it runs again in its class.", false, false},
	"discarded":     {"Dead letter %s discarded.", false, false},
	"bad-token":     {"Wrong token.", true, false},
	"too-many":      {"Too many wrong tokens from this address: try again in a minute.", true, false},
	"no-token":      {"No token is configured: requeue and discard are disabled.", true, false},
	"login-first":   {"Log in with the admin token first.", true, false},
	"bad-key":       {"That is not a dead letter ID (16 hex digits, a dash and a number).", true, false},
	"not-owner":     {"Dead letter %s belongs to a partition another instance owns, which did not answer in time: try again.", true, false},
	"no-owner":      {"Dead letter %s belongs to a partition no instance owns now (a rebalance): try again.", true, false},
	"not-found":     {"Dead letter %s does not exist (handled or discarded already?).", true, false},
	"busy":          {"Dead letter %s was requeued and has not finished yet.", true, false},
	"unknown-class": {"Dead letter %s belongs to a class that is not configured: it cannot be requeued.", true, false},
	"not-running":   {"The runtime is not running (stopping?): try again after the restart.", true, false},
	"pool-full":     {"Dead letter %s was not requeued: its class's queue stayed full.", true, false},
	"failed":        {"The action on dead letter %s failed; the service log says why.", true, false},

	"op-started":    {"Operation started: its progress is below; the owners of the dead letters carry it out.", false, false},
	"op-canceled":   {"Operation canceled: the owners stop taking its dead letters; what they did stays done.", false, false},
	"op-unknown":    {"There is no such operation (only recent ones are kept).", true, false},
	"op-failed":     {"The operation could not be started or canceled; the service log says why.", true, false},
	"bad-bulk":      {"The bulk operation's parameters are not valid: rate is dead letters per second (0: no limit), limit a count (0: all).", true, false},
	"op-too-many":   {fmt.Sprintf("The search matches more than the %d dead letters one operation takes: set a limit (the oldest first) or narrow it.", deadop.MaxIDs), true, false},
	"op-empty":      {"No dead letter matches the search any more: nothing was started.", true, false},
	"confirm-first": {"A discard of more than one dead letter must be confirmed: run the dry run, then confirm.", true, false},

	"class-paused":  {"Class %s paused: it takes and starts no messages until resumed, across restarts too.", false, true},
	"class-resumed": {"Class %s resumed.", false, true},
	"class-unknown": {"There is no class %s.", true, true},
	"class-failed":  {"Pausing or resuming class %s failed; the service log says why.", true, true},
}

// flash returns the message of query q's code, and whether it is an
// error; "" for no code or an unknown one.
func flash(q url.Values) (string, bool) {
	f, ok := flashes[q.Get("msg")]
	if !ok {
		return "", false
	}
	if !strings.Contains(f.text, "%s") {
		return f.text, f.err
	}
	if f.class {
		return fmt.Sprintf(f.text, fmt.Sprintf("%q", q.Get("name"))), f.err
	}
	key := q.Get("key")
	if !validKey(key) {
		key = "?"
	}
	text := fmt.Sprintf(f.text, key)
	if owner := q.Get("owner"); q.Get("msg") == "not-owner" && owner != "" {
		text += fmt.Sprintf(" It is owned by %s.", ownerText(owner))
	}
	return text, f.err
}

// basePath returns the path the handler is mounted at, with a trailing
// slash: "/" at the root, "/admin/" under http.StripPrefix("/admin", h).
func basePath(r *http.Request) string {
	orig := r.URL.Path
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil && u.Path != "" {
		orig = u.Path
	}
	if prefix, ok := strings.CutSuffix(orig, r.URL.Path); ok {
		return strings.TrimSuffix(prefix, "/") + "/"
	}
	return "/"
}

// nonce returns a fresh CSP nonce.
func nonce() string {
	b := make([]byte, 16)
	rand.Read(b)
	return base64.RawStdEncoding.EncodeToString(b)
}

func errText(err error) string {
	if errors.Is(err, runtime.ErrNotRunning) {
		return "The runtime is not running: the state file is closed."
	}
	return err.Error()
}

func ptr[T any](v T) *T { return &v }

// printable renders a message key for a table cell: its text when it is
// valid UTF-8 without control characters, else hex; nil as "∅".
func printable(b []byte) string {
	if b == nil {
		return "∅"
	}
	if utf8.Valid(b) && !bytes.ContainsFunc(b, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return short(string(b))
	}
	return short(fmt.Sprintf("0x%x", b))
}

// short cuts s to 60 runes.
func short(s string) string {
	if utf8.RuneCountInString(s) <= 60 {
		return s
	}
	return string([]rune(s)[:59]) + "…"
}

// fmtSeconds renders a duration given in seconds.
func fmtSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d <= 0:
		return "0s"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
